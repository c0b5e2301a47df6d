"""Node admission on the dev server with the real admission activities over HTTP."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from gpu_remediation.admission_models import AdmissionOutcome, SkipBurnInInput
from gpu_remediation.ids import (
    ADMITTED_BOOT_ANNOTATION,
    STARTUP_TAINT_KEY,
    Queries,
    Updates,
    admission_workflow_id,
    node_workflow_id,
)
from gpu_remediation.models import DcgmEvidence, EfaEvidence, ManualEvidence
from gpu_remediation.workflow_models import NodeRemediationState
from simulator.kube_api import NODES, KubeApiServer, KubeStore
from tests.conftest import assert_eventually
from tests.workflows.admission_support import (
    ScriptedDiag,
    admission_state,
    admission_worker,
    gate_policy,
    put_gated_node,
    start,
    taint_keys,
)


async def _incident_state(client: Client, cluster: str, node: str) -> NodeRemediationState:
    handle = client.get_workflow_handle(node_workflow_id(cluster, node))
    state: NodeRemediationState = await handle.query(
        Queries.STATE, result_type=NodeRemediationState
    )
    return state


async def _terminate_incident(client: Client, cluster: str, node: str) -> None:
    await client.get_workflow_handle(node_workflow_id(cluster, node)).terminate("test over")


async def test_a_healthy_new_node_is_untainted_only_after_its_checks_pass(
    dev_env: WorkflowEnvironment, kube: KubeApiServer, store: KubeStore, task_queue: str
) -> None:
    put_gated_node(store, "gpu-new")
    diag = ScriptedDiag(hold=True)
    async with admission_worker(dev_env.client, kube, task_queue, diag):
        _, handle = await start(dev_env.client, task_queue, "gpu-new")
        await asyncio.wait_for(diag.running.wait(), 10)
        assert STARTUP_TAINT_KEY in taint_keys(store, "gpu-new")  # diag running: still gated
        diag.release.set()
        result = await handle.result()
    assert result.outcome == AdmissionOutcome.ADMITTED
    assert [(c.name, c.passed) for c in result.checks] == [("dcgm_diag", True), ("efa", True)]
    assert diag.runs == ["gpu-new@2"]
    node = store.get(NODES, "gpu-new")
    assert STARTUP_TAINT_KEY not in taint_keys(store, "gpu-new")
    assert node["metadata"]["annotations"][ADMITTED_BOOT_ANNOTATION] == "boot-a"
    assert result.ready_to_schedulable_s is not None
    assert result.ready_to_schedulable_s > 0
    assert (result.node_pool, result.instance_type) == ("h100", "p5.48xlarge")


async def test_a_dead_on_arrival_node_is_never_untainted_and_goes_to_replacement(
    dev_env: WorkflowEnvironment, kube: KubeApiServer, store: KubeStore, task_queue: str
) -> None:
    put_gated_node(store, "gpu-doa")
    diag = ScriptedDiag(fail=True)
    async with admission_worker(dev_env.client, kube, task_queue, diag):
        cluster, handle = await start(dev_env.client, task_queue, "gpu-doa", first_boot=True)
        result = await handle.result()
        assert result.outcome == AdmissionOutcome.DEAD_ON_ARRIVAL
        assert result.handed_to == node_workflow_id(cluster, "gpu-doa")
        state = await assert_eventually(
            lambda: _incident_state(dev_env.client, cluster, "gpu-doa"),
            lambda s: len(s.evidence) >= 2,
            message="the incident received the failed burn-in",
        )
        await _terminate_incident(dev_env.client, cluster, "gpu-doa")
    kinds = {type(e) for e in state.evidence}
    assert kinds == {DcgmEvidence, ManualEvidence}
    (manual,) = [e for e in state.evidence if isinstance(e, ManualEvidence)]
    assert manual.runbook == "replace"
    assert not manual.force  # the breaker still applies
    assert STARTUP_TAINT_KEY in taint_keys(store, "gpu-doa")
    assert ADMITTED_BOOT_ANNOTATION not in store.get(NODES, "gpu-doa")["metadata"]["annotations"]


async def test_a_later_boot_failing_efa_goes_to_its_incident_without_replacement(
    dev_env: WorkflowEnvironment, kube: KubeApiServer, store: KubeStore, task_queue: str
) -> None:
    efa_down = {
        "type": "EfaHealthProblem",
        "status": "True",
        "reason": "EfaHealthCheckFailed",
        "message": "EFA link (rdmap131s0/1): state DOWN, physical state Disabled",
    }
    put_gated_node(store, "gpu-efa", efa=efa_down)
    diag = ScriptedDiag()
    async with admission_worker(dev_env.client, kube, task_queue, diag):
        cluster, handle = await start(
            dev_env.client, task_queue, "gpu-efa", first_boot=False, trigger="reboot"
        )
        result = await handle.result()
        state = await assert_eventually(
            lambda: _incident_state(dev_env.client, cluster, "gpu-efa"),
            lambda s: len(s.evidence) >= 1,
            message="the incident received the failed burn-in",
        )
        await _terminate_incident(dev_env.client, cluster, "gpu-efa")
    assert result.outcome == AdmissionOutcome.BURN_IN_FAILED
    assert [(c.name, c.passed) for c in result.checks] == [("dcgm_diag", True), ("efa", False)]
    assert [type(e) for e in state.evidence] == [EfaEvidence]
    assert STARTUP_TAINT_KEY in taint_keys(store, "gpu-efa")


async def test_a_reboot_during_burn_in_restarts_burn_in_for_the_new_boot(
    dev_env: WorkflowEnvironment, kube: KubeApiServer, store: KubeStore, task_queue: str
) -> None:
    put_gated_node(store, "gpu-rb")
    diag = ScriptedDiag(hold=True)
    async with admission_worker(dev_env.client, kube, task_queue, diag):
        cluster, handle = await start(dev_env.client, task_queue, "gpu-rb")
        await asyncio.wait_for(diag.running.wait(), 10)
        store.set_node_boot_id("gpu-rb", "boot-b")
        first = await handle.result()
        assert first.outcome == AdmissionOutcome.BOOT_CHANGED
        assert first.checks == []  # the old boot's diag never counts
        nxt = dev_env.client.get_workflow_handle(admission_workflow_id(cluster, "gpu-rb", "boot-b"))
        await assert_eventually(lambda: _len(diag.runs), lambda n: n == 2, message="second diag")
        diag.release.set()
        second = await nxt.result()
    assert second["outcome"] == "admitted"
    assert second["trigger"] == "reboot"
    assert second["first_boot"] is True  # never admitted yet: still its arrival
    node = store.get(NODES, "gpu-rb")
    assert node["metadata"]["annotations"][ADMITTED_BOOT_ANNOTATION] == "boot-b"
    assert STARTUP_TAINT_KEY not in taint_keys(store, "gpu-rb")
    assert diag.cancelled >= 1


async def _len(items: list[str]) -> int:
    return len(items)


async def test_a_node_deleted_during_burn_in_ends_the_admission_cleanly(
    dev_env: WorkflowEnvironment, kube: KubeApiServer, store: KubeStore, task_queue: str
) -> None:
    put_gated_node(store, "gpu-del")
    diag = ScriptedDiag(hold=True)
    async with admission_worker(dev_env.client, kube, task_queue, diag):
        _, handle = await start(dev_env.client, task_queue, "gpu-del")
        await asyncio.wait_for(diag.running.wait(), 10)
        store.delete(NODES, "gpu-del")
        result = await handle.result()
        await assert_eventually(lambda: _cancelled(diag), lambda n: n == 1, message="diag cut")
    assert result.outcome == AdmissionOutcome.NODE_GONE
    assert result.handed_to is None
    assert result.checks == []
    description = await handle.describe()
    assert description.status == WorkflowExecutionStatus.COMPLETED


async def _cancelled(diag: ScriptedDiag) -> int:
    return diag.cancelled


async def test_the_operator_override_admits_at_once_and_is_in_the_decision_log(
    dev_env: WorkflowEnvironment, kube: KubeApiServer, store: KubeStore, task_queue: str
) -> None:
    put_gated_node(store, "gpu-op")
    diag = ScriptedDiag(hold=True)
    async with admission_worker(dev_env.client, kube, task_queue, diag):
        _, handle = await start(dev_env.client, task_queue, "gpu-op")
        await asyncio.wait_for(diag.running.wait(), 10)
        answer = await handle.execute_update(
            Updates.SKIP_BURN_IN,
            SkipBurnInInput(by="alice", reason="known-good host, urgent capacity"),
            result_type=str,
        )
        result = await handle.result()
    assert "admitting gpu-op" in answer
    assert result.outcome == AdmissionOutcome.OVERRIDDEN
    assert STARTUP_TAINT_KEY not in taint_keys(store, "gpu-op")
    logged = [(d.stage, d.action, d.reason) for d in result.decisions]
    assert ("operator", "burn-in skipped by alice", "known-good host, urgent capacity") in logged
    assert ("admit", "startup taint removed", "burn-in skipped by alice") in logged


async def test_with_the_gate_off_a_tainted_node_is_untainted_without_checks(
    dev_env: WorkflowEnvironment, kube: KubeApiServer, store: KubeStore, task_queue: str
) -> None:
    put_gated_node(store, "gpu-off")
    diag = ScriptedDiag()
    async with admission_worker(dev_env.client, kube, task_queue, diag):
        _, handle = await start(
            dev_env.client, task_queue, "gpu-off", policy=gate_policy(enabled=False)
        )
        result = await handle.result()
    assert result.outcome == AdmissionOutcome.ADMITTED_UNCHECKED
    assert diag.runs == []
    assert result.checks == []
    assert STARTUP_TAINT_KEY not in taint_keys(store, "gpu-off")


async def test_the_incidents_verification_of_the_same_boot_is_not_run_twice(
    dev_env: WorkflowEnvironment, kube: KubeApiServer, store: KubeStore, task_queue: str
) -> None:
    put_gated_node(store, "gpu-ver")
    diag = ScriptedDiag()
    async with admission_worker(dev_env.client, kube, task_queue, diag):
        _, handle = await start(
            dev_env.client, task_queue, "gpu-ver", trigger="reboot", verified_diag_level=3
        )
        result = await handle.result()
    assert result.outcome == AdmissionOutcome.ADMITTED
    assert diag.runs == []
    assert result.checks[0].reused
    assert result.checks[0].passed


async def test_a_skip_after_the_admission_ended_is_refused(
    dev_env: WorkflowEnvironment, kube: KubeApiServer, store: KubeStore, task_queue: str
) -> None:
    put_gated_node(store, "gpu-late")
    diag = ScriptedDiag()
    async with admission_worker(dev_env.client, kube, task_queue, diag):
        _, handle = await start(
            dev_env.client, task_queue, "gpu-late", policy=gate_policy(settle=timedelta(0))
        )
        await handle.result()
        state = await admission_state(handle)
    assert state.outcome == AdmissionOutcome.ADMITTED
