"""The watcher and a real incident across a reboot that did not fix the node.

Reboot-then-replace (EKS node auto repair) verifies a reboot by the condition:
the fault reported again during the cooldown climbs to replacement. The agent's
condition stays True through the reboot (no status flip), so the watcher has to
tell the reboot by the node's boot id.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from temporalio.testing import WorkflowEnvironment

from gpu_remediation.ids import Activities, node_workflow_id
from gpu_remediation.models import Outcome, XidEvidence
from gpu_remediation.npd_message import NPD_GPU_REASON, format_message
from gpu_remediation.policy import ConditionRule, Policy, TriggerPolicy
from policies import load_baseline
from tests.conftest import assert_eventually
from tests.triggers.watcher_support import (
    GPU_LABELS,
    SELECTOR,
    emulator,
    incident_stage,
    make_watcher,
    running,
)
from tests.workflows.node_support import cluster
from workflows.node_remediation import NodeRemediationWorkflow

NODE = "gpu-rb"


def reboot_then_replace(cooldown: timedelta) -> Policy:
    """The baseline with the agent's GPU condition reported after 1s, and a short cooldown."""
    rule = ConditionRule.model_validate(
        {"type": "GpuHealthProblem", "problem_statuses": ["True"], "grace": "1s"}
    )
    triggers = TriggerPolicy(node_selector=SELECTOR, conditions=[rule])
    return load_baseline("reboot-then-replace").model_copy(
        update={"triggers": triggers, "cooldown": cooldown}
    )


def gpu_fault_message() -> str:
    """What the node agent writes for a double-bit ECC error on GPU 0 (Xid 48)."""
    found = XidEvidence(
        observed_at=datetime.now(UTC),
        source="kernel-log",
        xid=48,
        gpu_index=0,
        pci_bus="0000:53:00",
    )
    return format_message([found], max_bytes=1024)


async def test_a_fault_that_survives_the_reboot_is_reported_again_and_the_node_replaced(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    policy = reboot_then_replace(cooldown=timedelta(seconds=20))
    with emulator() as emu:
        emu.store.put_node(NODE, labels=GPU_LABELS)
        emu.store.set_node_boot_id(NODE, "boot-a")
        async with cluster(dev_env, task_queue) as c:
            with emu.api_client() as api:
                watcher = make_watcher(
                    api,
                    c.client,
                    policy,
                    cluster=c.name,
                    task_queue=task_queue,
                    semaphore_workflow_id=c.semaphore_id,
                )
                async with running(watcher):
                    message = gpu_fault_message()
                    emu.store.set_node_condition(
                        NODE, "GpuHealthProblem", "True", reason=NPD_GPU_REASON, message=message
                    )
                    await assert_eventually(
                        lambda: incident_stage(c.client, c.name, NODE),
                        lambda stage: stage == "cooldown",
                        timeout=15,
                    )
                    assert c.fleet.reboots == 1
                    # The host is back on a new boot and its restarted agent writes the
                    # same fault again: the status never changed.
                    emu.store.set_node_boot_id(NODE, "boot-b")
                    emu.store.set_node_condition(
                        NODE, "GpuHealthProblem", "True", reason=NPD_GPU_REASON, message=message
                    )
                    result = await c.client.get_workflow_handle_for(
                        NodeRemediationWorkflow.run, node_workflow_id(c.name, NODE)
                    ).result()
    assert result.outcome == Outcome.REPLACED
    assert c.fleet.reboots == 1
    assert c.fleet.called(Activities.DELETE_NODE_CLAIM) == 1
