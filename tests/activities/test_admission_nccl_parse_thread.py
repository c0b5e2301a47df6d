"""The NCCL check judges the all-reduce's log on a thread, and a hostile log is only a verdict.

The log is the node's to choose (issue 35): while one check reads it, the
worker's event loop keeps serving every other activity, and no content of it
fails the activity instead of the check. Over HTTP against the emulator.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from temporalio.testing import ActivityEnvironment

import activities.admission_nccl as admission_nccl
from activities.admission_nccl import NcclJobs
from gpu_remediation.admission_models import RunNcclCheckInput
from gpu_remediation.admission_nccl import judge
from gpu_remediation.settings import Settings
from simulator.kube_api import HostResult, JobKubelet, KubeStore
from tests.gpu_remediation.nccl_outputs import all_reduce_output

CHECK = RunNcclCheckInput(
    node="gpu-1",
    boot_id="boot-a",
    admission_id="admission/gpu-1",
    image="registry.example/nccl-tests:2.13.10",
    min_bus_bandwidth_gbps=300.0,
    timeout_s=600,
)


class Host:
    """Prints ``output`` as the all-reduce's log."""

    def __init__(self) -> None:
        self.output = all_reduce_output(480.0)

    def __call__(self, job: dict[str, Any], command: Any) -> HostResult:
        assert command is None  # not one of the fixed host commands
        return HostResult(0, self.output)


@pytest.fixture
def host() -> Host:
    return Host()


@pytest.fixture
def nccl(api: Any, store: KubeStore, settings: Settings, host: Host) -> Iterator[NcclJobs]:
    store.put_node("gpu-1", boot_id="boot-a", gpus=8)
    with JobKubelet(store, host):
        yield NcclJobs(client.BatchV1Api(api), client.CoreV1Api(api), settings)


async def test_the_all_reduce_log_is_judged_off_the_event_loop(
    nccl: NcclJobs, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []
    original: Callable[..., Any] = judge

    def watched(*args: Any) -> Any:
        seen.append(threading.get_ident())
        return original(*args)

    monkeypatch.setattr(admission_nccl, "judge", watched)
    result = await ActivityEnvironment().run(nccl.run, CHECK)
    assert result.passed
    assert len(seen) == 1
    assert threading.get_ident() not in seen


async def test_a_megabyte_of_5000_digit_rows_fails_the_check_not_the_activity(
    nccl: NcclJobs, host: Host
) -> None:
    row = "9" * 5000 + " 256 float sum -1 1.0 1.0 999.00 0 1.0 1.0 999.00 0\n"
    host.output = row * (1_000_000 // len(row))
    result = await ActivityEnvironment().run(nccl.run, CHECK)
    assert not result.passed
    assert "without results" in result.summary
    assert result.bus_bandwidth_gbps is None
