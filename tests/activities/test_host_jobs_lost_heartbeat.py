"""A retried host command whose heartbeat never reached Temporal adopts its earlier Job.

The Job executor's twin of ``test_host_ssm_lost_heartbeat.py``: when the Temporal
server restarts mid-command (``remediate demo --chaos``) the heartbeat naming the
Job is lost, and a retry that named its Job afresh ran the GPU reset twice. The
name is now derived from the activity, so the retry's create answers 409 and the
retry waits for (or reads) the Job already there. Over HTTP against the emulator.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest
from kubernetes import client
from temporalio.testing import ActivityEnvironment

from activities.host import HostActivities
from activities.host_commands import HostCommand
from activities.kube_jobs import JobExecutor, activity_job_name
from gpu_remediation.contracts import ResetGpusInput
from gpu_remediation.settings import Settings
from simulator.kube_api import JOBS, HostResult, JobKubelet, KubeApiServer, KubeStore
from tests.conftest import assert_eventually

NS = "gpu-jobs"
RESET = ResetGpusInput(
    node="gpu-1", incident_id="i", provider_id="aws:///us-west-2a/i-0abc", gpu_indices=[2]
)
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
T = TypeVar("T")


class HeldHost:
    """A host whose GPU reset runs until released; counts the resets it did."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.resets = 0

    def __call__(self, job: dict[str, Any], command: HostCommand | None) -> HostResult:
        assert command is not None
        assert command.kind == "gpu_reset"
        self.resets += 1
        self.release.wait(20)
        return HostResult(0, "GPU 00000000:53:00.0 was successfully reset.\n")


@pytest.fixture
def host() -> Iterator[HeldHost]:
    held = HeldHost()
    yield held
    held.release.set()  # a failing test must not leave the kubelet's thread waiting


@pytest.fixture(autouse=True)
def node(store: KubeStore) -> None:
    """The machine the inputs name: a Job runs only on the incident's machine."""
    store.put_node("gpu-1", provider_id="aws:///us-west-2a/i-0abc")


@pytest.fixture
def kubelet(store: KubeStore, host: HeldHost) -> Iterator[JobKubelet]:
    with JobKubelet(store, host) as running:
        yield running


@pytest.fixture
def executor(api: Any, settings: Settings, kubelet: JobKubelet) -> JobExecutor:
    del kubelet  # running before the executor creates anything
    job_settings = settings.model_copy(update={"job_namespace": NS})
    return JobExecutor(client.BatchV1Api(api), client.CoreV1Api(api), job_settings)


def _jobs(store: KubeStore) -> list[dict[str, Any]]:
    jobs, _ = store.list_objects(JOBS, NS)
    return list(jobs)


def _async(read: Callable[[], T]) -> Callable[[], Awaitable[T]]:
    async def probe() -> T:
        return read()

    return probe


def _refused_creates(kube: KubeApiServer) -> int:
    return sum(
        r.method == "POST" and r.path.endswith("/jobs") and r.status == 409 for r in kube.requests()
    )


def _finished(store: KubeStore) -> bool:
    return any(
        c["type"] == "Complete" and c["status"] == "True"
        for job in _jobs(store)
        for c in (job.get("status") or {}).get("conditions") or []
    )


async def _first_attempt_dies_waiting(executor: JobExecutor, store: KubeStore) -> str:
    """Attempt 1 creates its Job and dies while the host runs it; its heartbeats are lost."""
    first = ActivityEnvironment()
    running = asyncio.ensure_future(first.run(HostActivities(executor).reset_gpus, RESET))
    await assert_eventually(_async(lambda: len(_jobs(store))), lambda n: n == 1)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    ((job,),) = [_jobs(store)]
    return str(job["metadata"]["name"])


def _retry(**info: Any) -> ActivityEnvironment:
    # The same activity, attempt 2, and Temporal has no heartbeat of attempt 1.
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=2, heartbeat_details=[], **info)
    return env


async def test_a_retry_without_the_heartbeat_waits_for_the_job_its_first_attempt_created(
    executor: JobExecutor, host: HeldHost, store: KubeStore, kube: KubeApiServer
) -> None:
    name = await _first_attempt_dies_waiting(executor, store)
    retry = asyncio.ensure_future(_retry().run(HostActivities(executor).reset_gpus, RESET))
    # The retry's create was refused (409): it is waiting for the Job that is there.
    await assert_eventually(_async(lambda: _refused_creates(kube)), lambda n: n == 1)
    host.release.set()

    result = await retry

    assert result.status == "ok"
    assert result.command_id == f"job/{NS}/{name}"
    assert host.resets == 1  # the host reset its GPU once


async def test_a_retry_reads_the_result_of_a_job_that_finished_while_no_attempt_waited(
    executor: JobExecutor, host: HeldHost, store: KubeStore
) -> None:
    name = await _first_attempt_dies_waiting(executor, store)
    host.release.set()
    await assert_eventually(_async(lambda: _finished(store)), bool)

    result = await _retry().run(HostActivities(executor).reset_gpus, RESET)

    assert result.status == "ok"
    assert result.command_id == f"job/{NS}/{name}"
    assert host.resets == 1


async def test_a_retry_after_the_result_was_read_but_not_recorded_reads_it_again(
    executor: JobExecutor, host: HeldHost, store: KubeStore
) -> None:
    # Attempt 1 read the result; its worker died before Temporal recorded it.
    host.release.set()
    first = await ActivityEnvironment().run(HostActivities(executor).reset_gpus, RESET)

    result = await _retry().run(HostActivities(executor).reset_gpus, RESET)

    assert result == first
    assert host.resets == 1  # not reset a second time


async def test_another_activity_on_the_same_node_runs_its_own_job(
    executor: JobExecutor, host: HeldHost, store: KubeStore
) -> None:
    host.release.set()
    first = await ActivityEnvironment().run(HostActivities(executor).reset_gpus, RESET)

    second = await _retry(activity_id="another-decision").run(
        HostActivities(executor).reset_gpus, RESET
    )

    assert second.command_id != first.command_id
    assert host.resets == 2


async def test_the_same_activity_in_a_new_run_of_the_workflow_runs_its_own_job(
    executor: JobExecutor, host: HeldHost
) -> None:
    host.release.set()
    first = await ActivityEnvironment().run(HostActivities(executor).reset_gpus, RESET)

    again = await _retry(workflow_run_id="a-later-run").run(
        HostActivities(executor).reset_gpus, RESET
    )

    assert again.command_id != first.command_id
    assert host.resets == 2


def test_job_names_are_dns_labels_of_at_most_63_characters_for_long_workflow_ids() -> None:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info, workflow_id="incident/" + "n" * 400, activity_id="a" * 200
    )
    commands = [
        HostCommand(kind="gpu_reset"),
        HostCommand(kind="gpu_reset", gpu_indices=[3]),
        HostCommand(kind="dcgm_diag", level=4),
        HostCommand(kind="dcgm_health"),
    ]

    names = [env.run(activity_job_name, c.kind, c.model_dump_json()) for c in commands]
    names.append(env.run(activity_job_name, "x" * 100))

    assert all(len(name) <= 63 and DNS_LABEL.fullmatch(name) for name in names), names
    assert len(set(names)) == len(names)  # one activity's commands each get their own Job
    assert names[0].startswith("gpu-remediation-gpu-reset-")
