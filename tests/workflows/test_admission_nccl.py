"""The optional NCCL all-reduce burn-in check: a Job on the node, through the emulator.

The real admission activities create the Job over HTTP; the emulator's
simulated kubelet (``JobKubelet``) runs its pod on the node and hands back
``all_reduce_perf`` output (nccl-tests' layout, scripted figures).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from kubernetes import client as k8s
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from activities.kube_admission import KubeAdmissionActivities
from gpu_remediation.admission_models import AdmissionOutcome
from gpu_remediation.ids import STARTUP_TAINT_KEY, admission_workflow_id, node_workflow_id
from gpu_remediation.models import ConditionEvidence, ManualEvidence
from gpu_remediation.policy import NcclCheckPolicy, Policy
from gpu_remediation.settings import Settings
from simulator.kube_api import JOBS, JobKubelet, KubeApiServer, KubeStore
from tests.conftest import assert_eventually
from tests.gpu_remediation.nccl_outputs import all_reduce_output
from tests.workflows.admission_support import (
    ScriptedDiag,
    gate_policy,
    put_gated_node,
    start,
    taint_keys,
)
from tests.workflows.test_node_admission import _incident_state, _terminate_incident
from worker import build_worker

NAMESPACE = "gpu-remediation"
IMAGE = "registry.example/nccl-tests:2.13.10"


class AllReduceHost:
    """The node's side of the Job: records it, optionally waits, prints the output."""

    def __init__(self, busbw: float, *, hold: bool = False) -> None:
        self.output = all_reduce_output(busbw)
        self.jobs: list[dict[str, Any]] = []
        self.running = threading.Event()
        self.release = threading.Event()
        if not hold:
            self.release.set()

    def __call__(self, job: dict[str, Any], command: Any) -> tuple[int, str, str]:
        assert command is None  # not one of the fixed host commands
        self.jobs.append(job)
        self.running.set()
        self.release.wait(20)
        return 0, self.output, ""


def nccl_policy(**nccl: Any) -> Policy:
    return gate_policy(nccl=NcclCheckPolicy(enabled=True, image=IMAGE, **nccl))


@asynccontextmanager
async def nccl_worker(
    client: Client, kube: KubeApiServer, store: KubeStore, task_queue: str, host: AllReduceHost
) -> AsyncIterator[ScriptedDiag]:
    """A worker with the real admission activities, a scripted diag and the simulated kubelet."""
    diag = ScriptedDiag()
    settings = Settings(
        kube_api_url=kube.url, poll_interval=timedelta(milliseconds=50), job_namespace=NAMESPACE
    )
    with kube.api_client() as api, JobKubelet(store, host):
        activities = KubeAdmissionActivities(k8s.CoreV1Api(api), settings)
        async with build_worker(
            client,
            [*activities.all(), diag.activity()],
            task_queue,
            max_heartbeat_throttle_interval=timedelta(milliseconds=100),
            default_heartbeat_throttle_interval=timedelta(milliseconds=100),
        ):
            yield diag
        host.release.set()


async def jobs_left(store: KubeStore) -> int:
    return len(await job_names(store))


async def job_names(store: KubeStore) -> set[str]:
    jobs, _ = await asyncio.to_thread(store.list_objects, JOBS, NAMESPACE)
    return {job["metadata"]["name"] for job in jobs}


async def test_the_all_reduce_job_runs_pinned_to_the_gated_node_before_the_untaint(
    dev_env: WorkflowEnvironment, kube: KubeApiServer, store: KubeStore, task_queue: str
) -> None:
    put_gated_node(store, "gpu-nccl")
    host = AllReduceHost(480.0, hold=True)
    async with nccl_worker(dev_env.client, kube, store, task_queue, host):
        _, handle = await start(dev_env.client, task_queue, "gpu-nccl", policy=nccl_policy())
        assert await asyncio.to_thread(host.running.wait, 20)
        assert STARTUP_TAINT_KEY in taint_keys(store, "gpu-nccl")  # all-reduce running: gated
        host.release.set()
        result = await handle.result()
        await assert_eventually(lambda: jobs_left(store), lambda n: n == 0, message="job deleted")
    assert result.outcome == AdmissionOutcome.ADMITTED
    assert [(c.name, c.passed) for c in result.checks] == [
        ("dcgm_diag", True),
        ("efa", True),
        ("nccl", True),
    ]
    assert "busbw 480.0 GB/s" in result.checks[-1].summary
    assert STARTUP_TAINT_KEY not in taint_keys(store, "gpu-nccl")
    (job,) = host.jobs
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeName"] == "gpu-nccl"
    assert {"key": STARTUP_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    (container,) = pod["containers"]
    assert container["image"] == IMAGE
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert container["command"][:1] == ["all_reduce_perf"]
    assert container["command"][-4:] == ["-g", "8", "-c", "1"]
    assert "securityContext" not in container  # an ordinary GPU pod, not privileged


async def test_a_slow_all_reduce_on_first_boot_is_dead_on_arrival_with_its_verdict(
    dev_env: WorkflowEnvironment, kube: KubeApiServer, store: KubeStore, task_queue: str
) -> None:
    put_gated_node(store, "gpu-slow")
    host = AllReduceHost(95.0)
    async with nccl_worker(dev_env.client, kube, store, task_queue, host):
        cluster, handle = await start(
            dev_env.client, task_queue, "gpu-slow", policy=nccl_policy(), first_boot=True
        )
        result = await handle.result()
        state = await assert_eventually(
            lambda: _incident_state(dev_env.client, cluster, "gpu-slow"),
            lambda s: len(s.evidence) >= 2,
            message="the incident received the failed all-reduce",
        )
        await _terminate_incident(dev_env.client, cluster, "gpu-slow")
    assert result.outcome == AdmissionOutcome.DEAD_ON_ARRIVAL
    assert result.handed_to == node_workflow_id(cluster, "gpu-slow")
    assert [(c.name, c.passed) for c in result.checks][-1] == ("nccl", False)
    (verdict,) = [e for e in state.evidence if isinstance(e, ConditionEvidence)]
    assert (verdict.type, verdict.reason) == ("NcclAllReduceProblem", "BusBandwidthLow")
    assert "under the floor of 300" in verdict.message
    assert any(isinstance(e, ManualEvidence) and e.runbook == "replace" for e in state.evidence)
    assert STARTUP_TAINT_KEY in taint_keys(store, "gpu-slow")


async def test_a_reboot_during_the_all_reduce_deletes_its_job(
    dev_env: WorkflowEnvironment, kube: KubeApiServer, store: KubeStore, task_queue: str
) -> None:
    put_gated_node(store, "gpu-rbn")
    host = AllReduceHost(480.0, hold=True)
    async with nccl_worker(dev_env.client, kube, store, task_queue, host):
        cluster, handle = await start(dev_env.client, task_queue, "gpu-rbn", policy=nccl_policy())
        assert await asyncio.to_thread(host.running.wait, 20)
        first_boots = await job_names(store)
        assert len(first_boots) == 1
        store.set_node_boot_id("gpu-rbn", "boot-b")
        result = await handle.result()
        # No all-reduce outlives its admission: the Job is gone before the run ended.
        # (The new boot's admission may have started a Job of its own meanwhile.)
        assert not first_boots & await job_names(store)
        await dev_env.client.get_workflow_handle(
            admission_workflow_id(cluster, "gpu-rbn", "boot-b")
        ).terminate("test over")
    assert result.outcome == AdmissionOutcome.BOOT_CHANGED
    assert [c.name for c in result.checks] == ["dcgm_diag", "efa"]


async def test_with_the_check_off_by_default_no_job_is_created(
    dev_env: WorkflowEnvironment, kube: KubeApiServer, store: KubeStore, task_queue: str
) -> None:
    put_gated_node(store, "gpu-plain")
    host = AllReduceHost(480.0)
    async with nccl_worker(dev_env.client, kube, store, task_queue, host):
        _, handle = await start(dev_env.client, task_queue, "gpu-plain", policy=gate_policy())
        result = await handle.result()
    assert result.outcome == AdmissionOutcome.ADMITTED
    assert [c.name for c in result.checks] == ["dcgm_diag", "efa"]
    assert host.jobs == []
