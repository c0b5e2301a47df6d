"""Simulated jobs speak the checkpoint handshake through the API, as checkpoint_client code does."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from gpu_remediation.contracts import DrainGpuPodsInput
from gpu_remediation.job_contracts import FindNodeJobsInput, RequestCheckpointInput
from gpu_remediation.models import Urgency
from simulator.fleet import Fleet, WorkloadConfig
from simulator.kube_api import PODS
from tests.conftest import assert_eventually
from tests.simulator.fleet.conftest import Real

LABEL_KEYS = ["jobset.sigs.k8s.io/jobset-name"]
ANSWER = "gpu-remediation.io/checkpoint-answer"


def workloads(**overrides: Any) -> WorkloadConfig:
    values: dict[str, Any] = {
        "job_nodes": 3,
        "utilization": 1.0,
        "checkpoint_interval": timedelta(minutes=30),
        "checkpoint_cost": timedelta(minutes=1),
        "restart_delay": timedelta(minutes=1),
        "handshake_share": 1.0,
    }
    values.update(overrides)
    return WorkloadConfig(**values)


async def jobs_where(fleet: Fleet, check: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    snapshot = await assert_eventually(
        lambda: asyncio.to_thread(fleet.snapshot),
        lambda snap: snap.jobs is not None and check(snap.jobs),
    )
    assert snapshot.jobs is not None
    return dict(snapshot.jobs)


async def ask(real: Real, node: str, incident: str, urgency: Urgency) -> None:
    found = await real.run(
        "find_node_jobs", FindNodeJobsInput(node=node, incident_id=incident, label_keys=LABEL_KEYS)
    )
    assert [job.checkpoint_supported for job in found.jobs] == [True]
    await real.run(
        "request_checkpoint",
        RequestCheckpointInput(
            node=node,
            incident_id=incident,
            request_incident=incident,
            deadline=datetime.now(UTC) + timedelta(minutes=5),
            urgency=urgency,
            label_keys=LABEL_KEYS,
            jobs=found.jobs,
        ),
    )


def answer_on(fleet: Fleet, pod: str) -> dict[str, Any] | None:
    raw = (fleet.store.get(PODS, pod, "training")["metadata"].get("annotations") or {}).get(ANSWER)
    return None if raw is None else dict(json.loads(raw))


async def test_a_job_asked_to_checkpoint_saves_answers_and_resumes_from_it_after_the_drain(
    make_fleet: Callable[..., Fleet], aws_env: None
) -> None:
    fleet = make_fleet(workloads=workloads())
    real = Real(fleet)
    await jobs_where(fleet, lambda j: j["running"] == 2)
    await asyncio.sleep(0.2)  # some work since the start (4 simulated minutes)
    await ask(real, "h100-0001", "incident-a", Urgency.CHECKPOINT_FIRST)

    answer = await assert_eventually(
        lambda: asyncio.to_thread(answer_on, fleet, "h100-job-000-r1a0-0"),
        lambda found: found is not None,
    )
    assert answer is not None
    assert answer["incident"] == "incident-a"
    assert answer["step"] > 0
    jobs = await jobs_where(fleet, lambda j: j["checkpoints_answered"] == 1)
    assert jobs["checkpoint_requests"] == 1
    assert jobs["deferred"] == 0

    await real.run(
        "drain_gpu_pods", DrainGpuPodsInput(node="h100-0001", incident_id="i", timeout_s=5)
    )
    jobs = await jobs_where(fleet, lambda j: j["disruptions"] == 1)
    # It had just saved for the drain: the project cost it no work and no budget.
    assert jobs["failures_caused_by_remediation"] == 0
    assert jobs["restarts_spending_budget"] == 0
    assert jobs["gpu_seconds_lost_to_remediation"] < 8 * 3 * 60  # the drain's own latency


async def test_a_when_idle_request_is_answered_by_the_next_periodic_save(
    make_fleet: Callable[..., Fleet], aws_env: None
) -> None:
    # 60x: a save every 30 simulated s of work takes 0.5 real s, 1 s of simulated saving.
    fleet = make_fleet(
        workloads=workloads(checkpoint_interval=timedelta(minutes=2)), time_factor=60
    )
    real = Real(fleet)
    await jobs_where(fleet, lambda j: j["running"] == 2)
    await ask(real, "p5-0000", "incident-b", Urgency.WHEN_IDLE)
    jobs = await jobs_where(fleet, lambda j: j["deferred"] == 1)
    assert jobs["checkpoints_answered"] == 0  # not saved at once
    await assert_eventually(
        lambda: asyncio.to_thread(answer_on, fleet, "p5-job-000-r1a0-0"),
        lambda found: found is not None and found["incident"] == "incident-b",
        timeout=10,
    )
    await real.run(
        "drain_gpu_pods", DrainGpuPodsInput(node="p5-0000", incident_id="i", timeout_s=5)
    )
    jobs = await jobs_where(fleet, lambda j: j["disruptions"] == 1)
    # Drained after the checkpoint that answered: not a failure the project caused.
    assert jobs["failures_caused_by_remediation"] == 0


async def test_a_job_that_did_not_opt_in_is_found_but_never_answers(
    make_fleet: Callable[..., Fleet], aws_env: None
) -> None:
    fleet = make_fleet(workloads=workloads(handshake_share=0.0))
    real = Real(fleet)
    await jobs_where(fleet, lambda j: j["running"] == 2)
    found = await real.run(
        "find_node_jobs",
        FindNodeJobsInput(node="h100-0002", incident_id="i", label_keys=LABEL_KEYS),
    )
    assert [(job.name, job.nodes, job.checkpoint_supported) for job in found.jobs] == [
        ("h100-job-000", 3, False)
    ]
    jobs = await jobs_where(fleet, lambda j: j["handshake_jobs"] == 0)
    assert jobs["checkpoint_requests"] == 0


async def test_draining_a_job_that_did_not_opt_in_loses_its_work_and_counts_against_the_project(
    make_fleet: Callable[..., Fleet], aws_env: None
) -> None:
    fleet = make_fleet(workloads=workloads(handshake_share=0.0))
    real = Real(fleet)
    await jobs_where(fleet, lambda j: j["running"] == 2)
    await asyncio.sleep(0.2)  # work since the start, before the first save (30 simulated min)
    await real.run(
        "drain_gpu_pods", DrainGpuPodsInput(node="h100-0002", incident_id="i", timeout_s=5)
    )
    jobs = await jobs_where(fleet, lambda j: j["disruptions"] == 1)
    assert jobs["failures_caused_by_remediation"] == 1
    assert jobs["handshake_failures_caused_by_remediation"] == 0
    assert jobs["failures_caused_by_remediation.on.none"] == 1  # a drain on a healthy node
    assert jobs["restarts_spending_budget"] == 0  # DisruptionTarget: the budget is kept
    assert jobs["gpu_seconds_lost_to_remediation"] > 0
    # The gang is placed again (after the restart delay) and resumes.
    await jobs_where(fleet, lambda j: j["running"] == 2)
