"""Training jobs occupy the nodes, lose work to faults, restart from checkpoints, and count."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from checkpoint_client.protocol import STEP_TIME_ANNOTATION, StepTime, parse_step_time
from gpu_remediation.contracts import DrainGpuPodsInput, QuarantineNodeInput
from simulator.fleet import Fleet, WorkloadConfig
from simulator.fleet.config import FLEET_GANGS, GangShare
from simulator.fleet.workloads import (
    JOB_LABEL,
    JOBSET_LABEL,
    RESTART_LABEL,
    TrainingJob,
    speaks_handshake,
)
from simulator.kube_api import PODS
from tests.conftest import assert_eventually
from tests.simulator.fleet.conftest import Real, conditions


def job_pods(fleet: Fleet) -> dict[str, dict[str, Any]]:
    """Pod name -> pod, for the training jobs' pods."""
    pods, _ = fleet.store.list_objects(PODS)
    return {p["metadata"]["name"]: p for p in pods if JOB_LABEL in p["metadata"]["labels"]}


def workloads(**overrides: Any) -> WorkloadConfig:
    """One 3-node job per pool of the small fleet; 6 h of work, saved every 10 minutes."""
    values: dict[str, Any] = {
        "job_nodes": 3,
        "utilization": 1.0,
        "checkpoint_interval": timedelta(minutes=10),
        "checkpoint_cost": timedelta(minutes=1),
        "restart_delay": timedelta(minutes=1),
    }
    values.update(overrides)
    return WorkloadConfig(**values)


def job(fleet: Fleet, name: str) -> TrainingJob:
    assert fleet.workloads is not None
    return fleet.workloads.jobs[name]


async def stats_where(fleet: Fleet, check: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    snapshot = await assert_eventually(
        lambda: asyncio.to_thread(fleet.snapshot),
        lambda snap: snap.jobs is not None and check(snap.jobs),
    )
    assert snapshot.jobs is not None
    return dict(snapshot.jobs)


def test_the_first_job_of_a_pool_and_then_every_other_speaks_the_handshake() -> None:
    assert [speaks_handshake(i, 0.5) for i in range(5)] == [True, False, True, False, True]
    assert [speaks_handshake(i, 0.3) for i in range(4)] == [True, False, False, True]
    assert not any(speaks_handshake(i, 0.0) for i in range(5))
    assert all(speaks_handshake(i, 1.0) for i in range(5))


async def test_jobs_fill_each_pool_in_name_order_as_labelled_jobset_pods(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet(workloads=workloads())
    pods = await assert_eventually(
        lambda: asyncio.to_thread(job_pods, fleet), lambda found: len(found) == 6
    )
    pod = pods["h100-job-000-r1a0-0"]
    assert pod["spec"]["nodeName"] == "h100-0000"
    assert pods["h100-job-000-r1a0-2"]["spec"]["nodeName"] == "h100-0002"
    assert pod["metadata"]["labels"][JOBSET_LABEL] == "h100-job-000"
    assert pod["metadata"]["labels"][RESTART_LABEL] == "0"
    assert pod["metadata"]["annotations"] == {"gpu-remediation.io/checkpoint": "supported"}
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"


async def test_a_fault_that_breaks_work_spends_the_budget_and_a_survivable_one_does_not(
    make_fleet: Callable[..., Fleet], aws_env: None
) -> None:
    fleet = make_fleet(workloads=workloads(), time_factor=600)
    real = Real(fleet)
    await assert_eventually(
        lambda: asyncio.to_thread(job_pods, fleet), lambda found: len(found) == 6
    )
    # Xid 48: the GPU still answers, the job keeps training until its node is drained.
    fleet.inject("xid_reset", "p5-0000", gpu=0)
    # Xid 79: the GPU is gone, the job fails at once.
    fleet.inject("fallen_off_bus", "h100-0001", gpu=0)
    jobs = await stats_where(fleet, lambda j: j["interrupted_by_fault"] == 1)
    await real.run("quarantine_node", QuarantineNodeInput(node="h100-0001", incident_id="i"))
    assert jobs["restarts_spending_budget"] == 1
    assert jobs["runs_failed"] == 0
    assert jobs["gpu_seconds_lost_to_faults"] > 0
    names = set(await asyncio.to_thread(job_pods, fleet))
    assert {n for n in names if n.startswith("p5-job-000-r1a0")} == {
        f"p5-job-000-r1a0-{rank}" for rank in range(3)
    }
    assert not any(n.startswith("h100-job-000-r1a0") for n in names)


async def test_an_eviction_restarts_the_job_from_its_checkpoint_without_spending_the_budget(
    make_fleet: Callable[..., Fleet], aws_env: None
) -> None:
    fleet = make_fleet(workloads=workloads(handshake_share=0.0))
    real = Real(fleet)
    # Let the job save at least once (every 10 simulated minutes = 0.5 s here).
    await assert_eventually(
        lambda: asyncio.to_thread(lambda: job(fleet, "p5-job-000").saved),
        lambda saved: saved > 0,
    )
    await real.run(
        "drain_gpu_pods", DrainGpuPodsInput(node="p5-0001", incident_id="i", timeout_s=5)
    )
    jobs = await stats_where(fleet, lambda j: j["disruptions"] == 1)
    assert jobs["restarts_spending_budget"] == 0
    assert jobs["interrupted_by_remediation"] == 1
    # It had not saved for the drain: the project cost it the work since its checkpoint.
    assert jobs["drains_without_checkpoint"] == 1
    assert jobs["failures_caused_by_remediation"] == 1
    pods = await assert_eventually(
        lambda: asyncio.to_thread(job_pods, fleet),
        lambda found: "p5-job-000-r1a1-0" in found,
    )
    assert pods["p5-job-000-r1a1-0"]["metadata"]["labels"][RESTART_LABEL] == "1"
    attempt = job(fleet, "p5-job-000").attempt
    assert attempt is not None
    assert attempt.resumed_from > 0


async def test_a_plain_delete_spends_the_budget_and_a_spent_budget_fails_the_run(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet(workloads=workloads(backoff_limit=0))
    await assert_eventually(
        lambda: asyncio.to_thread(job_pods, fleet), lambda found: len(found) == 6
    )
    await asyncio.to_thread(fleet.store.delete_object, PODS, "h100-job-000-r1a0-1", "training")
    jobs = await stats_where(fleet, lambda j: j["runs_failed"] == 1)
    assert jobs["runs_failed.gang.3"] == 1
    assert jobs["evictions_spending_budget"] == 1
    assert jobs["runs_failed_by_remediation"] == 1
    assert jobs["success_rate"] == 0.0
    # The job is resubmitted: a new run, which resumes from the failed run's checkpoint.
    await assert_eventually(
        lambda: asyncio.to_thread(job_pods, fleet),
        lambda found: "h100-job-000-r2a0-0" in found,
    )
    attempt = job(fleet, "h100-job-000").attempt
    assert attempt is not None
    assert attempt.resumed_from == job(fleet, "h100-job-000").saved


async def test_a_hanging_fault_fails_its_job_only_when_the_collective_times_out(
    make_fleet: Callable[..., Fleet],
) -> None:
    # 30 simulated minutes of timeout: 1.5 s here.
    config = workloads(collective_timeout=timedelta(minutes=30), handshake_share=0.0)
    fleet = make_fleet(workloads=config)
    await assert_eventually(
        lambda: asyncio.to_thread(job_pods, fleet), lambda found: len(found) == 6
    )
    fleet.inject("efa_link", "h100-0001")  # the link goes silent: every rank waits
    jobs = await stats_where(fleet, lambda j: j["hangs"] == 1)
    assert jobs["interrupted_by_fault"] == 0
    attempt = job(fleet, "h100-job-000").attempt
    assert attempt is not None
    assert attempt.hung
    jobs = await stats_where(fleet, lambda j: j["hang_timeouts"] == 1)
    assert jobs["interrupted_by_fault"] == 1
    assert jobs["restarts_spending_budget"] == 1
    assert jobs["gpu_seconds_hung"] >= 30 * 60 * 3 * 8  # 3 nodes of 8 GPUs, 30 min


async def test_an_eviction_ends_a_hung_job_before_its_timeout_without_spending_the_budget(
    make_fleet: Callable[..., Fleet], aws_env: None
) -> None:
    config = workloads(
        collective_timeout=timedelta(hours=10),
        restart_cost=timedelta(minutes=7),
        handshake_share=0.0,
    )
    fleet = make_fleet(workloads=config)
    real = Real(fleet)
    await assert_eventually(
        lambda: asyncio.to_thread(job_pods, fleet), lambda found: len(found) == 6
    )
    fleet.inject("efa_link", "p5-0002")  # the link goes silent: every rank waits
    await stats_where(fleet, lambda j: j["hangs"] == 1)
    await real.run(
        "drain_gpu_pods", DrainGpuPodsInput(node="p5-0002", incident_id="i", timeout_s=5)
    )
    jobs = await stats_where(fleet, lambda j: j["disruptions"] == 1)
    assert jobs["hang_timeouts"] == 0
    assert jobs["hangs_ended_by_remediation"] == 1
    assert jobs["restarts_spending_budget"] == 0
    assert jobs["gpu_seconds_hung"] > 0
    # The hang had lost the work already: the drain only cut the loss short.
    assert jobs["interrupted_by_fault"] == 1
    assert jobs["interrupted_by_remediation"] == 0
    assert jobs["failures_caused_by_remediation"] == 0
    assert jobs["gpu_seconds_lost_to_remediation"] == 0
    assert jobs["gpu_seconds_lost_to_faults"] > 0
    # Not cordoned, the node takes the restart, which hangs at once: its link is still down.
    jobs = await stats_where(fleet, lambda j: j["hangs"] == 2)
    attempt = job(fleet, "p5-job-000").attempt
    assert attempt is not None
    assert attempt.hung
    # The restart held its nodes for restart_cost before it would have trained.
    assert attempt.since - attempt.started_at == pytest.approx(7 * 60)


async def test_a_gang_of_the_mix_places_one_pod_on_each_of_its_nodes(
    make_fleet: Callable[..., Fleet],
) -> None:
    # 3 nodes a pool: 2.01 nodes for gangs of 2 (one), 0.99 and what is left for gangs of 1.
    gangs = (GangShare(nodes=2, share=0.67), GangShare(nodes=1, share=0.33))
    fleet = make_fleet(workloads=WorkloadConfig(gangs=gangs, utilization=1.0))
    assert fleet.workloads is not None
    assert {name: j.size for name, j in fleet.workloads.jobs.items()} == {
        "h100-job-000": 2,
        "h100-job-001": 1,
        "p5-job-000": 2,
        "p5-job-001": 1,
    }
    pods = await assert_eventually(
        lambda: asyncio.to_thread(job_pods, fleet), lambda found: len(found) == 6
    )
    assert {p["spec"]["nodeName"] for n, p in pods.items() if n.startswith("h100-job-000")} == {
        "h100-0000",
        "h100-0001",
    }


def test_a_gang_too_big_for_a_small_pool_shrinks_to_its_share() -> None:
    mix = WorkloadConfig(utilization=0.9, gangs=FLEET_GANGS)
    # Each size's whole gangs, what they leave over going to the smaller sizes: 900 nodes.
    assert mix.jobs_in(1000) == [128] * 2 + [32] * 10 + [8] * 29 + [1] * 92
    assert sum(mix.jobs_in(500)) == 450
    assert mix.jobs_in(40) == [12, 11, 8, 1, 1, 1, 1, 1]
    assert mix.jobs_in(1) == []
    assert WorkloadConfig(job_nodes=4, utilization=1.0).jobs_in(10) == [4, 4]


def test_a_gang_mix_is_checked() -> None:
    with pytest.raises(ValidationError, match="more than 1"):
        WorkloadConfig(gangs=[{"nodes": 4, "share": 0.6}, {"nodes": 8, "share": 0.6}])
    with pytest.raises(ValidationError, match="each size once"):
        WorkloadConfig(gangs=[{"nodes": 4, "share": 0.2}, {"nodes": 4, "share": 0.2}])
    with pytest.raises(ValidationError, match="job_nodes or gangs"):
        WorkloadConfig(job_nodes=4, gangs=[{"nodes": 4, "share": 0.2}])
    with pytest.raises(ValidationError, match="at least one"):
        WorkloadConfig(gangs=[])
    mix = WorkloadConfig(gangs=[{"nodes": 4, "share": 0.2}, {"nodes": 64, "share": 0.5}])
    assert mix.gang_sizes() == [(64, 0.5), (4, 0.2)]
    assert WorkloadConfig(job_nodes=8).gang_sizes() == [(8, 1.0)]


async def test_a_run_that_does_its_work_succeeds_and_ettr_counts_the_checkpoints(
    make_fleet: Callable[..., Fleet],
) -> None:
    config = workloads(job_duration=timedelta(minutes=10), checkpoint_interval=timedelta(minutes=4))
    fleet = make_fleet(workloads=config)  # 10 simulated minutes = 0.5 s real
    jobs = await stats_where(fleet, lambda j: j["runs_succeeded"] >= 2)
    assert jobs["runs_failed"] == 0
    assert jobs["runs_succeeded.gang.3"] >= 2
    assert jobs["success_rate"] == 1.0
    assert 0.8 < jobs["ettr"] < 1.0  # 2 saves of 1 min per 10 min of work
    assert jobs["gpu_seconds_lost_to_faults"] == 0
    assert jobs["gpu_seconds_checkpointing"] > 0


async def test_a_slow_gpu_slows_its_whole_gang_reports_gpu_degraded_and_breaks_nothing(
    make_fleet: Callable[..., Fleet],
) -> None:
    # Issue 37: the node stays Ready and keeps all its GPUs; its job runs on, 1.34x slower.
    fleet = make_fleet(workloads=workloads(), time_factor=600)
    await assert_eventually(
        lambda: asyncio.to_thread(job_pods, fleet), lambda found: len(found) == 6
    )
    fleet.inject("gpu_degraded", "h100-0001", gpu=2)
    slow = job(fleet, "h100-job-000")
    await assert_eventually(
        lambda: asyncio.to_thread(lambda: conditions(fleet, "h100-0001").get("GpuDegraded", {})),
        lambda cond: cond.get("status") == "True",
    )
    cond = conditions(fleet, "h100-0001")["GpuDegraded"]
    assert cond["reason"] == "GpuDegradationDetected"
    assert cond["message"].startswith("Degraded on GPU 2 (0000:")
    assert conditions(fleet, "h100-0001")["GpuHealthProblem"]["status"] == "False"
    assert slow.attempt is not None
    assert slow.attempt.rate == pytest.approx(1 / 1.34)
    assert job(fleet, "p5-job-000").attempt.rate == 1.0  # type: ignore[union-attr]
    jobs = await stats_where(fleet, lambda j: j["gpu_seconds_lost_to_slowness"] > 0)
    assert (jobs["interrupted_by_fault"], jobs["restarts_spending_budget"]) == (0, 0)
    assert fleet.nodes["h100-0001"].healthy_gpus() == 8  # the device plugin keeps it
    # Cleared (a reset retrains the link): full speed and the condition back to False.
    fleet.clear_faults("h100-0001", fleet.active_faults("h100-0001"), reason="test")
    await assert_eventually(
        lambda: asyncio.to_thread(lambda: conditions(fleet, "h100-0001")["GpuDegraded"]),
        lambda cond: cond["status"] == "False",
    )
    assert slow.attempt.rate == 1.0


async def test_a_silent_slow_gpu_shows_only_in_the_step_times_its_job_writes(
    make_fleet: Callable[..., Fleet],
) -> None:
    # Issue 37: no signal of the agent's shows it; the job's pods write their own step
    # times while the gang is slow (the slow rank's 1.34x the others'), then once more.
    fleet = make_fleet(workloads=workloads(step_times=timedelta(minutes=5)), time_factor=600)
    await assert_eventually(
        lambda: asyncio.to_thread(job_pods, fleet), lambda found: len(found) == 6
    )
    assert not any(
        STEP_TIME_ANNOTATION in p["metadata"]["annotations"] for p in job_pods(fleet).values()
    )
    fleet.inject("gpu_slow", "h100-0001", gpu=2)
    slow = job(fleet, "h100-job-000")

    def step_times() -> dict[str, StepTime]:
        return {
            p["spec"]["nodeName"]: parse_step_time(
                p["metadata"]["annotations"][STEP_TIME_ANNOTATION]
            )
            for p in job_pods(fleet).values()
            if STEP_TIME_ANNOTATION in p["metadata"]["annotations"]
        }

    first = await assert_eventually(lambda: asyncio.to_thread(step_times), lambda t: len(t) == 3)
    assert {node: t.seconds for node, t in first.items()} == {
        "h100-0000": 1.0,
        "h100-0001": 1.34,
        "h100-0002": 1.0,
    }
    later = await assert_eventually(
        lambda: asyncio.to_thread(step_times),
        lambda t: all(t[n].step > first[n].step for n in t),
    )
    step = later["h100-0001"]
    assert 1 <= step.steps <= step.step + 1
    assert conditions(fleet, "h100-0001")["GpuDegraded"]["status"] == "False"
    assert slow.attempt is not None
    assert slow.attempt.rate == pytest.approx(1 / 1.34)
    assert all(
        STEP_TIME_ANNOTATION not in p["metadata"]["annotations"]
        for p in job_pods(fleet).values()
        if p["spec"]["nodeName"].startswith("p5")
    )
    fleet.clear_faults("h100-0001", fleet.active_faults("h100-0001"), reason="test")
    back = await assert_eventually(
        lambda: asyncio.to_thread(step_times), lambda t: t["h100-0001"].seconds == 1.0
    )
    assert {t.seconds for t in back.values()} == {1.0}
