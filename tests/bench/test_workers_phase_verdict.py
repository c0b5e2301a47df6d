"""When a workers-benchmark phase meets its target: nothing lost, work spread, kill mid-run."""

from bench.workers import Phase
from bench.workers_history import WorkerShare


def phase(
    repaired: int = 10, closed: dict[str, int] | None = None, killed: str | None = None
) -> Phase:
    closed = {"w0": 4, "w1": 6} if closed is None else closed
    return Phase(
        kind="kill" if killed else "throughput",
        identities=sorted(closed),
        incidents=10,
        repaired=repaired,
        seconds=1.0,
        incidents_per_s=10.0,
        shares={name: WorkerShare(incidents_closed=n) for name, n in closed.items() if n},
        moved=0,
        workflow_task_timeouts=0,
        activities_retried=0,
        killed=killed,
        killed_had_closed=closed.get(killed, 0) if killed else 0,
    )


def test_every_incident_repaired_on_every_worker_meets_the_target() -> None:
    assert phase().ok


def test_one_incident_not_repaired_misses_the_target() -> None:
    assert not phase(repaired=9).ok


def test_a_live_worker_that_closed_nothing_misses_the_target() -> None:
    assert not phase(closed={"w0": 10, "w1": 0}).ok


def test_the_killed_worker_need_not_close_more_after_it_died() -> None:
    assert phase(closed={"w0": 1, "w1": 9}, killed="w0").ok


def test_a_kill_before_the_victim_closed_anything_proves_nothing() -> None:
    assert not phase(closed={"w0": 0, "w1": 10}, killed="w0").ok


def test_a_worker_no_history_names_misses_the_target() -> None:
    verdict = phase()
    verdict.identities.append("w2")
    assert not verdict.ok
