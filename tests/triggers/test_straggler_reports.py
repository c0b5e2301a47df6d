"""Step times a job writes on its pods reach the slow node's incident through relay and watcher.

Real parts: the Kubernetes API emulator over HTTP (the job's pods write their
step times with the checkpoint helper, as a training job does), the dev server,
the watcher's outbox and starter, and the node workflow with the scripted
fleet's activities.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from checkpoint_client import CheckpointClient, KubeConfig
from gpu_remediation.ids import node_workflow_id
from gpu_remediation.models import FaultClass, Outcome, StragglerEvidence
from gpu_remediation.policy import StragglerPolicy
from tests.conftest import assert_eventually
from tests.triggers.watcher_support import (
    GPU_LABELS,
    Emulator,
    emulator,
    evidence_reports,
    make_watcher,
    running,
    watcher_policy,
)
from tests.workflows.node_support import Cluster, cluster
from triggers.checkpoint_relay import CheckpointRelay
from triggers.stragglers import StragglerDetector
from triggers.watcher import NodeConditionWatcher
from workflows.node_remediation import NodeRemediationWorkflow

JOBSET = "jobset.sigs.k8s.io/jobset-name"
NODES = ["gpu-a", "gpu-b", "gpu-c", "gpu-d"]


@asynccontextmanager
async def relay_and_watcher(
    emu: Emulator, c: Cluster, task_queue: str, api: object
) -> AsyncIterator[NodeConditionWatcher]:
    policy = watcher_policy()
    stragglers = StragglerPolicy(min_steps=150, min_span=timedelta(0))
    watcher = make_watcher(
        api,
        c.client,
        policy,
        cluster=c.name,
        task_queue=task_queue,
        semaphore_workflow_id=c.semaphore_id,
    )
    relay = CheckpointRelay(
        emu.api_client(),
        c.client,
        c.name,
        watch_timeout=5,
        backoff_initial=0.05,
        stragglers=StragglerDetector(stragglers, policy.jobs.label_keys),
        report_stragglers=watcher.add_reports,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(relay.run(stop))
    try:
        async with running(watcher):
            await assert_eventually(lambda: listed(relay), lambda n: n > 0)
            yield watcher
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)


async def listed(relay: CheckpointRelay) -> int:
    """How often the relay listed the pods (it sees later writes as they happen)."""
    return relay.source.lists


def job_pods(emu: Emulator, token: Path, unwatched: str | None = None) -> list[CheckpointClient]:
    """A four-node JobSet's pods, and each pod's helper writing to the emulator over HTTP.

    ``unwatched``: a node without the GPU labels the watcher selects.
    """
    helpers = []
    for rank, node in enumerate(NODES):
        name = f"llm-{rank}"
        emu.store.put_pod("ml", name, node_name=node, labels={JOBSET: "llm"}, gpus=8)
        emu.store.put_node(node, labels=None if node == unwatched else GPU_LABELS)
        config = KubeConfig(base_url=emu.api.url, token_path=token, ca_path=None)
        helpers.append(
            CheckpointClient(
                namespace="ml", pod_name=name, annotations_path=token.parent / name, kube=config
            )
        )
    return helpers


async def steps(helpers: list[CheckpointClient], step: int, times: list[float]) -> None:
    for helper, seconds in zip(helpers, times, strict=True):
        await asyncio.to_thread(helper.report_step_time, step, seconds, 100, every=0)


async def test_a_rank_slower_than_its_gang_gets_its_idle_node_diagnosed(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("service-account-token\n")
    with emulator() as emu:
        helpers = job_pods(emu, token)
        async with cluster(dev_env, task_queue) as c:
            with emu.api_client() as api:
                async with relay_and_watcher(emu, c, task_queue, api):
                    for step in (100, 200):
                        await steps(helpers, step, [2.0, 2.0, 2.7, 2.0])
                    reports = await assert_eventually(
                        lambda: evidence_reports(c.client, c.name, "gpu-c"), bool
                    )
                    result = await c.client.get_workflow_handle_for(
                        NodeRemediationWorkflow.run, node_workflow_id(c.name, "gpu-c")
                    ).result()
    assert (result.fault_class, result.outcome) == (FaultClass.STRAGGLER, Outcome.NO_FAULT_FOUND)
    [evidence] = [e for r in reports for e in r.evidence]
    assert isinstance(evidence, StragglerEvidence)
    assert (evidence.job, evidence.pod, evidence.gang) == ("ml/llm", "ml/llm-2", 4)
    assert evidence.slower_by == 0.35
    for other in ("gpu-a", "gpu-b", "gpu-d"):
        assert await evidence_reports(c.client, c.name, other) == []


async def test_a_report_naming_a_node_the_watcher_does_not_watch_is_dropped(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    # A pod's creator may set spec.nodeName: the node must be one of the watched GPU nodes.
    token = tmp_path / "token"
    token.write_text("service-account-token\n")
    with emulator() as emu:
        helpers = job_pods(emu, token, unwatched="gpu-c")
        async with cluster(dev_env, task_queue) as c:
            with emu.api_client() as api:
                async with relay_and_watcher(emu, c, task_queue, api) as watcher:
                    for step in (100, 200):
                        await steps(helpers, step, [2.0, 2.0, 2.7, 2.0])
                    await assert_eventually(lambda: listed_foreign(watcher), lambda n: n == 1)
                    assert await evidence_reports(c.client, c.name, "gpu-c") == []


async def listed_foreign(watcher: NodeConditionWatcher) -> int:
    return watcher.foreign_reports
