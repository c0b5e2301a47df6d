"""A retried NCCL check never starts a second all-reduce, even without its heartbeat.

The all-reduce Job's name is derived from the activity and the node's boot: the
retry's create answers 409 and the retry reads the Job its first attempt
created. A Job that ended without a result is deleted, so a retry runs a new
one instead of adopting the failure. Over HTTP against the emulator.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.admission_nccl import NcclJobs
from gpu_remediation.admission_models import RunNcclCheckInput
from gpu_remediation.settings import Settings
from simulator.kube_api import JOBS, HostResult, JobKubelet, KubeApiServer, KubeStore
from tests.conftest import assert_eventually
from tests.gpu_remediation.nccl_outputs import all_reduce_output

NS = Settings().job_namespace
CHECK = RunNcclCheckInput(
    node="gpu-1",
    boot_id="boot-a",
    admission_id="admission/gpu-1",
    image="registry.example/nccl-tests:2.13.10",
    min_bus_bandwidth_gbps=300.0,
    timeout_s=600,
)


class AllReduceHost:
    """Runs the all-reduce once released; None while ``never_runs`` (no pod ever starts)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.never_runs = False
        self.runs = 0

    def __call__(self, job: dict[str, Any], command: Any) -> HostResult | None:
        assert command is None  # not one of the fixed host commands
        if self.never_runs:
            return None
        self.runs += 1
        self.release.wait(20)
        return HostResult(0, all_reduce_output(480.0))


@pytest.fixture
def host() -> Iterator[AllReduceHost]:
    running = AllReduceHost()
    yield running
    running.release.set()  # a failing test must not leave the kubelet's thread waiting


@pytest.fixture
def nccl(api: Any, store: KubeStore, settings: Settings, host: AllReduceHost) -> Iterator[NcclJobs]:
    store.put_node("gpu-1", boot_id="boot-a", gpus=8)
    with JobKubelet(store, host):
        yield NcclJobs(client.BatchV1Api(api), client.CoreV1Api(api), settings)


async def _job_names(store: KubeStore) -> list[str]:
    jobs, _ = await asyncio.to_thread(store.list_objects, JOBS, NS)
    return [job["metadata"]["name"] for job in jobs]


def _retry() -> ActivityEnvironment:
    # The same activity, attempt 2, and Temporal has no heartbeat of attempt 1.
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=2, heartbeat_details=[])
    return env


async def test_a_retry_without_the_heartbeat_reads_the_all_reduce_its_first_attempt_started(
    nccl: NcclJobs, host: AllReduceHost, store: KubeStore, kube: KubeApiServer
) -> None:
    first = asyncio.ensure_future(ActivityEnvironment().run(nccl.run, CHECK))
    (name,) = await assert_eventually(lambda: _job_names(store), lambda names: len(names) == 1)
    # Attempt 1 loses the API server while it waits, and fails; its Job runs on.
    outage = kube.faults.inject(f"/jobs/{name}$", method="GET", status=503)
    with pytest.raises(ApplicationError) as failed:
        await first
    assert failed.value.type == "KubernetesError"
    kube.faults.remove(outage.id or 0)
    host.release.set()

    result = await _retry().run(nccl.run, CHECK)

    assert result.passed
    assert result.job == f"{NS}/{name}"
    assert host.runs == 1  # one all-reduce on the node
    assert await _job_names(store) == []


async def test_a_job_that_ended_without_a_result_is_deleted_so_the_retry_runs_a_new_one(
    nccl: NcclJobs, host: AllReduceHost, store: KubeStore
) -> None:
    host.never_runs = True
    with pytest.raises(ApplicationError) as failed:
        await ActivityEnvironment().run(nccl.run, CHECK)
    assert failed.value.type == "NcclJobFailed"
    assert await _job_names(store) == []
    host.never_runs = False
    host.release.set()

    result = await _retry().run(nccl.run, CHECK)

    assert result.passed
    assert host.runs == 1
