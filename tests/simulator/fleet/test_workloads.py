"""Training jobs occupy the nodes, fail with them, and availability is accounted."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

from gpu_remediation.contracts import DrainGpuPodsInput, QuarantineNodeInput
from simulator.fleet import Fleet, WorkloadConfig
from simulator.fleet.workloads import JOB_LABEL
from simulator.kube_api import PODS
from tests.conftest import assert_eventually
from tests.simulator.fleet.conftest import Real


def job_pods(fleet: Fleet) -> dict[str, str]:
    """Pod name -> node, for the training jobs' pods."""
    pods, _ = fleet.store.list_objects(PODS)
    return {
        p["metadata"]["name"]: p["spec"]["nodeName"]
        for p in pods
        if JOB_LABEL in p["metadata"]["labels"]
    }


async def test_jobs_run_as_gpu_pods_and_a_fault_fails_the_job(
    make_fleet: Callable[..., Fleet], aws_env: None
) -> None:
    workloads = WorkloadConfig(job_nodes=3, utilization=1.0, restart_delay=timedelta(hours=1))
    fleet = make_fleet(workloads=workloads, time_factor=600)
    real = Real(fleet)
    pods = await assert_eventually(
        lambda: asyncio.to_thread(job_pods, fleet), lambda found: len(found) == 6
    )
    assert sorted(pods.values()) == sorted(fleet.nodes)
    pod = fleet.store.get(PODS, "h100-job-000-r1-0", "training")
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"

    fleet.inject("xid_reset", "h100-0001", gpu=0)
    await assert_eventually(
        lambda: asyncio.to_thread(job_pods, fleet),
        lambda found: not any(name.startswith("h100-job-000-r1") for name in found),
    )
    # Quarantine the faulty node: the job cannot come back until capacity returns.
    await real.run("quarantine_node", QuarantineNodeInput(node="h100-0001", incident_id="i"))
    snapshot = fleet.snapshot()
    assert snapshot.jobs is not None
    assert snapshot.jobs["runs_failed_by_fault"] == 1
    assert snapshot.jobs["running"] == 1
    assert snapshot.availability["available"] < 1.0

    # Draining the other job's node evicts its pod: that run fails by eviction.
    await real.run(
        "drain_gpu_pods", DrainGpuPodsInput(node="p5-0000", incident_id="i", timeout_s=5)
    )
    await assert_eventually(
        lambda: asyncio.to_thread(fleet.snapshot),
        lambda snap: snap.jobs is not None and snap.jobs["runs_failed_by_eviction"] == 1,
    )


async def test_a_job_that_runs_its_course_succeeds(make_fleet: Callable[..., Fleet]) -> None:
    workloads = WorkloadConfig(job_nodes=3, utilization=1.0, job_duration=timedelta(minutes=10))
    fleet = make_fleet(workloads=workloads)  # 10 simulated minutes = 0.5 s real
    snapshot = await assert_eventually(
        lambda: asyncio.to_thread(fleet.snapshot),
        lambda snap: snap.jobs is not None and snap.jobs["runs_succeeded"] >= 2,
        timeout=10,
    )
    assert snapshot.jobs is not None
    assert snapshot.jobs["runs_failed"] == 0
    assert snapshot.jobs["success_rate"] == 1.0
    assert snapshot.availability["available"] == 1.0
