"""Summary arithmetic: percentiles, overlapping replacements, and what counts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from demo.incidents import Incident
from demo.summary import max_overlap, percentile, replacement_windows, summarize
from gpu_remediation.models import FaultClass, Outcome, Rung
from gpu_remediation.workflow_models import Decision, NodeRemediationState, RungAttempt
from simulator.fleet import FleetSnapshot

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def incident(
    node: str,
    outcome: Outcome | None,
    decisions: list[tuple[float, str, str]],
    *,
    rung: Rung | None = None,
    waiting_for: str | None = None,
    attempts: tuple[Rung, ...] = (),
) -> Incident:
    state = NodeRemediationState(
        cluster="c",
        node=node,
        node_pool="h100",
        fault_class=FaultClass.ROW_REMAP_FAILURE,
        rung=rung,
        stage="closed" if outcome else "escalate",
        waiting_for=waiting_for,
        paused=False,
        dry_run=False,
        evidence=[],
        attempts=[RungAttempt(rung=r, started_at=T0) for r in attempts],
        decisions=[
            Decision(at=at(t), stage=stage, action=action) for t, stage, action in decisions
        ],
        outcome=outcome,
        started_at=T0,
    )
    return Incident(
        workflow_id=f"gpu-remediation/c/{node}",
        run_id="r",
        node=node,
        started_at=T0,
        closed=outcome is not None,
        fault_class=state.fault_class.value if state.fault_class else None,
        state=state,
        state_final=outcome is not None,
    )


def replaced(node: str, start: float, end: float) -> Incident:
    return incident(
        node,
        Outcome.REPLACED,
        [(start, "replace", "deleted NodeClaim x"), (end, "replace", "replaced")],
        rung=Rung.REPLACE,
        attempts=(Rung.REPLACE,),
    )


def test_percentiles_interpolate_between_ranks() -> None:
    assert percentile([], 50) is None
    assert percentile([7.0], 95) == 7.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile(list(map(float, range(101))), 95) == 95.0


def test_replacements_that_touch_end_to_start_do_not_overlap() -> None:
    incidents = [replaced("a", 0, 10), replaced("b", 5, 20), replaced("c", 10, 30)]
    assert max_overlap(replacement_windows(incidents, at(100))) == 2
    incidents.append(replaced("d", 6, 8))
    assert max_overlap(replacement_windows(incidents, at(100))) == 3


def test_a_replacement_still_in_progress_counts_until_now() -> None:
    running = incident("e", None, [(50, "replace", "deleted NodeClaim e")], rung=Rung.REPLACE)
    windows = replacement_windows([replaced("a", 0, 60), running], at(100))
    assert windows[-1] == (at(50), at(100))
    assert max_overlap(windows) == 2


def snapshot() -> FleetSnapshot:
    return FleetSnapshot(
        sim_seconds=3600,
        capacity=10,
        nodes=10,
        nodes_ready=10,
        faulty_nodes=[],
        truly_faulty=[],
        availability={"available": 0.99, "healthy": 0.995, "schedulable": 0.991},
        counters={"karpenter.terminations": 1, "reboots": 2, "faults.from_mix": 3},
        replacements_in_flight=0,
        max_replacements_in_flight=1,
        jobs=None,
    )


def test_the_summary_counts_outcomes_breaker_trips_and_mttr_in_simulated_time() -> None:
    escalated = incident(
        "b",
        None,
        [(1, "breaker", "open"), (2, "escalate", "handed over (t-1)")],
        rung=Rung.ESCALATE,
        waiting_for="an operator: retry, skip or abort",
    )
    summary = summarize(
        [replaced("a", 10, 30), escalated],
        snapshot(),
        replacement_cap=2,
        time_factor=60,
        wall_seconds=12.3,
        temporal_address="127.0.0.1:7233",
        temporal_ui="http://127.0.0.1:8233",
    )
    assert summary.incidents == 2
    assert summary.outcomes == {"replaced": 1, "escalated": 1}
    assert summary.by_fault_class == {"row_remap_failure": {"replaced": 1, "escalated": 1}}
    assert summary.breaker_trips == 1
    # 30 s from the incident's start to its last decision, times 60.
    assert summary.mttr_real_p50_s == 30
    assert summary.mttr_p50_s == 1800
    assert summary.mttr_incidents == 1
    assert summary.rungs_used == {"replace": 1, "escalate": 1}
    assert summary.max_concurrent_replacements == 1
    assert summary.max_nodes_terminating == 1
    assert summary.replacements == 1
    assert summary.availability == 0.99
