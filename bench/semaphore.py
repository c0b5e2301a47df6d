"""Semaphore benchmark: grant/release cycles per second, and the cap is never exceeded.

``--holders`` requesters (default 200, all started at once) are
``bench.holder_workflow.BenchHolderWorkflow``, which acquires through the
project's ``ReplacementPermit`` exactly as the node workflow does: the
``ensure_semaphore`` activity, the guard child, ``request_permit``, the grant
signal; then it runs ``--hold-activities`` no-op activities while holding
(default 0: the target counts the semaphore's grant/release cycles, and what
a holder does while holding is the ladder benchmark's business; 1 measures
a holder that does one activity's work) and closes, leaving the permit to
its guard as a replaced node's incident does (ADR 007): the holder's close
cancels the guard, which signals the release. The semaphore
(capacity ``--capacity``, default 5) serves them FIFO. The worker registers
the semaphore, the guard, the holder, and the activities, with 100 workflow
task slots.

Holding with a durable timer is not used: on the dev server a 10 ms
``workflow.sleep`` fires after about a second (timer queue granularity), which
measures the timer, not the semaphore (3.5 cycles/s with a 10 ms hold).

The semaphore starts with capacity 1, held by a blocker (the tests'
``SemaphoreHolderWorkflow``, holding until signalled), so all requesters queue
up first. Once every holder, guard and the semaphore has no workflow task left
to run (the queue filling is over, not only its requests delivered), capacity
is raised to ``--capacity`` by the ``set_capacity`` update and the blocker
releases: the queue drains.

Measured:

* cycles/s = holders / wall time from raising the capacity until the
  semaphore has neither holders nor waiters, i.e. the last guard's release
  has arrived (each cycle: grant signal, the holder's work, holder
  completion, the guard's release); the target (>= 20) applies to it. The
  end is seen by querying the semaphore's ``state`` every 50 ms (longer for
  queues over 200: each answer lists every waiter);
* grant-to-release rate = (holders - 1) / (last release - first grant), in the
  holders' workflow time;
* end-to-end rate = holders / wall time from the first holder start (the
  queue filling included: 200 workflow starts, 200 ensure_semaphore
  activities, 200 guard children);
* max holders three ways, all must stay <= capacity: counted exactly from the
  semaphore's history after the run (grants sent minus releases received, in
  history order: ``peak_permits_out``), seen by the ``state`` queries while
  it drains, and the max overlap of the holders' own [grant, hand-over]
  intervals (a hand-over precedes the guard's release, so this one
  understates);
* FIFO: the grants the semaphore sent, in history order, against the order
  it received the requests (``bench.semaphore_history.overtaken``; no grant
  may come after that of a later request), across every run of the chain;
* exactly once: every requester (and the warm-up and the blocker) got one
  grant signal, nobody else any;
* continue-as-new: how often the semaphore continued as new, how many
  waiters each new run was handed, the carried state's size and how long the
  semaphore was between runs. ``--require-continue-as-new`` (and
  ``run_1000``, ``bench.run_all --only semaphore_1000``: 1,000 waiters at
  the production threshold) misses the target unless one continue-as-new
  carried queued waiters;
* CPU seconds of the server and of this process (worker and client) while
  it drains: the same work costs up to 40% more CPU in some runs than in
  others on this host, which is what moves the rate between runs.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Sequence
from typing import Any

from temporalio.client import Client, WorkflowHandle, WorkflowQueryFailedError
from temporalio.service import RPCError
from temporalio.worker import Worker

from activities.temporal import TemporalActivities
from bench.baseline_workflow import noop_activity
from bench.common import (
    BENCH_DYNAMIC_CONFIG,
    SEMAPHORE_TRANSFER_POLL_RPS,
    TRANSFER_POLL_RPS_KEY,
    bounded,
    connect,
    cpu_window,
    dev_server,
    poll_until,
)
from bench.holder_workflow import BenchHolderWorkflow
from bench.models import BenchHolderInput
from bench.semaphore_history import grant_problems, overtaken, read_semaphore_history
from gpu_remediation.ids import guard_workflow_id
from gpu_remediation.semaphore_models import (
    DEFAULT_CONTINUE_AS_NEW_AFTER_EVENTS,
    SemaphoreState,
    SetCapacityInput,
)
from tests.workflows.holder_models import HolderReport
from tests.workflows.semaphore_holders import SemaphoreHolderWorkflow
from tests.workflows.semaphore_support import (
    holder_status,
    max_overlap,
    new_semaphore_id,
    semaphore_state,
    start_holder,
    start_semaphore,
)
from workflows.permit_guard import PermitGuardWorkflow
from workflows.replacement_semaphore import ReplacementSemaphoreWorkflow

TARGET_CYCLES_PER_S = 20.0
START_CALLS_IN_FLIGHT = 50
QUEUE_1000 = 1000
QUEUE_1000_QUICK = 100
QUICK_CONTINUE_AS_NEW_AFTER_EVENTS = 300
"""Low enough that the quick run's 100 waiters cross it while they queue; high enough
that a run lasts over a second (the server delays the next run of a shorter one, by
``history.workflowIdReuseMinimalInterval``, 1 s)."""
QUEUE_FILL_S_PER_HOLDER = 0.5
"""Allowed time to fill the queue, per holder (at least two minutes in all)."""


async def _settle(
    client: Client, holders: Sequence[tuple[str, str]], semaphore_id: str, limit_s: float
) -> None:
    """Wait until no holder, guard or the semaphore has a workflow task to run.

    A request reaching the semaphore does not mean the queue filling is over:
    the holder still has the task that saw its request delivered, and its
    guard may not have run its first task yet (in some runs most of the 200
    guards had not). Left pending, that work would run during the drain and
    be counted against the grant/release cycles; it belongs to acquiring
    (the end-to-end rate includes it).
    """
    pending = [semaphore_id]
    for holder_id, request_id in holders:
        pending += [holder_id, guard_workflow_id(holder_id, request_id)]

    async def busy(workflow_id: str) -> bool:
        description = await client.get_workflow_handle(workflow_id).describe()
        return description.raw_description.HasField("pending_workflow_task")

    async def all_idle() -> bool:
        flags = await bounded(pending, START_CALLS_IN_FLIGHT, busy)
        pending[:] = [wid for wid, is_busy in zip(pending, flags, strict=True) if is_busy]
        return not pending

    await poll_until(all_idle, limit_s=limit_s, interval=0.2)


async def run(
    *,
    quick: bool = False,
    holders: int | None = None,
    capacity: int = 5,
    hold_activities: int = 0,
    sample_interval_s: float | None = None,
    default_transfer_rate: bool = False,
    continue_as_new_after_events: int | None = None,
    require_continue_as_new: bool = False,
    name: str = "semaphore",
) -> dict[str, Any]:
    """Run the benchmark; return the numbers (also printed).

    Args:
        quick: 40 holders unless ``holders`` says otherwise.
        holders: Requesters queued behind the blocker.
        capacity: Permits once the queue drains.
        hold_activities: No-op activities each holder runs while holding.
        sample_interval_s: Between ``state`` queries while draining; by default
            50 ms, longer for long queues (each answer lists every waiter).
        default_transfer_rate: Keep the dev server's default transfer-queue read
            rate (20/s on its single shard) instead of this benchmark's 500/s.
        continue_as_new_after_events: The semaphore's threshold (None: the
            production default, ``DEFAULT_CONTINUE_AS_NEW_AFTER_EVENTS``).
        require_continue_as_new: Miss the target unless at least one
            continue-as-new handed queued waiters to the next run.
        name: The result's name (``bench.run_all``'s key).
    """
    server_config = dict(BENCH_DYNAMIC_CONFIG)
    if not default_transfer_rate:
        server_config[TRANSFER_POLL_RPS_KEY] = SEMAPHORE_TRANSFER_POLL_RPS
    count = holders or (40 if quick else 200)
    interval = sample_interval_s or min(0.5, 0.05 * max(1.0, count / 200))
    fill_limit_s = max(120.0, count * QUEUE_FILL_S_PER_HOLDER)
    threshold = continue_as_new_after_events or DEFAULT_CONTINUE_AS_NEW_AFTER_EVENTS
    print(
        f"[{name}] {count} holders, capacity {capacity}, "
        f"{hold_activities} activities while holding, continue-as-new after {threshold} events"
        f"{', default transfer-queue rate' if default_transfer_rate else ''} ...",
        flush=True,
    )
    async with dev_server("semaphore", server_config) as server:
        client = await connect(server.address)
        task_queue = f"bench-semaphore-{uuid.uuid4().hex[:8]}"
        semaphore_id = new_semaphore_id()
        worker = Worker(
            client,
            task_queue=task_queue,
            workflows=[
                ReplacementSemaphoreWorkflow,
                PermitGuardWorkflow,
                BenchHolderWorkflow,
                SemaphoreHolderWorkflow,
            ],
            activities=[TemporalActivities(client).ensure_semaphore, noop_activity],
            max_concurrent_workflow_tasks=100,
            max_concurrent_activities=100,
        )

        async def holder(request_id: str) -> WorkflowHandle[BenchHolderWorkflow, HolderReport]:
            return await client.start_workflow(
                BenchHolderWorkflow.run,
                BenchHolderInput(
                    semaphore_workflow_id=semaphore_id,
                    request_id=request_id,
                    capacity=capacity,
                    hold_activities=hold_activities,
                ),
                id=f"bench-holder/{semaphore_id}/{request_id}",
                task_queue=task_queue,
            )

        async with worker:
            semaphore = await start_semaphore(
                client, task_queue, semaphore_id, 1, continue_as_new_after_events=threshold
            )
            # Warm-up: one full cycle before the clock starts.
            await (await holder("warmup")).result()
            # The blocker (the tests' holder, held until told) keeps the only permit
            # while the requesters queue up.
            blocker = await start_holder(
                client, task_queue, semaphore_id, "blocker", capacity=1, hold=None
            )

            async def blocker_holds() -> bool:
                return (await holder_status(blocker)).held

            query_errors: list[str] = []

            async def state() -> SemaphoreState | None:
                # Between two runs of a continue-as-new the new run may not answer
                # yet: such misses are counted and reported, never taken as empty.
                try:
                    return await semaphore_state(client, semaphore_id)
                except (RPCError, WorkflowQueryFailedError) as err:
                    query_errors.append(f"{type(err).__name__}: {err}")
                    return None

            async def all_queued() -> bool:
                current = await state()
                return current is not None and len(current.waiters) >= count

            await poll_until(blocker_holds)

            samples: list[int] = []
            stop = asyncio.Event()
            drained = asyncio.Event()

            async def sample() -> None:
                while not stop.is_set():
                    current = await state()
                    if current is not None:
                        samples.append(len(current.holders))
                        if not current.holders and not current.waiters:
                            drained.set()
                    await asyncio.sleep(interval)

            sampler: asyncio.Task[None] | None = None
            with cpu_window(server) as cpu:
                started = time.perf_counter()
                try:
                    request_ids = [f"r{i:04d}" for i in range(count)]
                    handles = await bounded(request_ids, START_CALLS_IN_FLIGHT, holder)
                    await poll_until(all_queued, limit_s=fill_limit_s, interval=interval)
                    await _settle(
                        client,
                        [(h.id, r) for h, r in zip(handles, request_ids, strict=True)],
                        semaphore_id,
                        fill_limit_s,
                    )
                    queued = time.perf_counter()
                    sampler = asyncio.create_task(sample())
                    with cpu_window(server) as drain_cpu:
                        await semaphore.execute_update(
                            ReplacementSemaphoreWorkflow.set_capacity,
                            SetCapacityInput(capacity=capacity),
                        )
                        await blocker.signal(SemaphoreHolderWorkflow.finish)
                        # A cycle ends when the guard's release reaches the
                        # semaphore. Watched through the sampler's queries: many
                        # waits for holder results would cost the server a
                        # wake-up on every holder event while it drains.
                        await drained.wait()
                        ended = time.perf_counter()
                    reports: list[HolderReport] = list(
                        await asyncio.gather(*(h.result() for h in handles))
                    )
                    reports.append(await blocker.result())
                finally:
                    stop.set()
                    if sampler is not None:
                        await sampler
            final = await semaphore_state(client, semaphore_id)
            assert semaphore.result_run_id is not None
            sem = await read_semaphore_history(client, semaphore_id, semaphore.result_run_id)
    if not all(r.acquired for r in reports):
        raise RuntimeError("a holder did not get its permit")
    overlap = max_overlap(reports)
    grants = [r.granted_at for r in reports[:-1] if r.granted_at is not None]
    releases = [r.released_at for r in reports[:-1] if r.released_at is not None]
    span = (max(releases) - min(grants)).total_seconds()
    steady = (count - 1) / span if span > 0 else float("inf")
    drain = count / (ended - queued)
    end_to_end = count / (ended - started)
    sampled_max = max(samples, default=0)
    # FIFO and exactly-once, from the semaphore's own record of every run.
    late = overtaken(sem.requests, sem.grants)
    problems = grant_problems(["warmup", "blocker", *request_ids], sem.grants)
    carried_ok = sem.max_waiters_carried > 0 or not require_continue_as_new
    ok = (
        drain >= TARGET_CYCLES_PER_S
        and max(sem.max_holders, sampled_max, overlap) <= capacity
        and not late
        and problems.none
        and carried_ok
    )
    per_cycle = f"{sem.events / (count + 2):.1f} events, {sem.tasks / (count + 2):.1f} tasks"
    print(
        f"[{name}] queue of {count} filled in {queued - started:.1f} s; drained in "
        f"{ended - queued:.2f} s: {drain:.1f} cycles/s (target >= {TARGET_CYCLES_PER_S:g}); "
        f"grant-to-release in holder time {steady:.1f}/s; end to end incl. starting the "
        f"requesters {end_to_end:.1f}/s",
        flush=True,
    )
    print(
        f"[{name}] max holders {sem.max_holders} from the semaphore's history, "
        f"{sampled_max} over {len(samples)} state queries, {overlap} from holder intervals "
        f"(cap {capacity}); semaphore per cycle: {per_cycle} ({sem.runs} runs); "
        f"CPU: server {cpu.server_s:.1f} s, python {cpu.python_s:.1f} s, "
        f"other processes {cpu.other_s:.1f} s; while draining: server "
        f"{drain_cpu.server_s:.1f} s, python {drain_cpu.python_s:.1f} s, "
        f"other {drain_cpu.other_s:.1f} s",
        flush=True,
    )
    gaps = [run.gap_s for run in sem.continued]
    print(
        f"[{name}] FIFO: {len(late)} of {len(sem.grants)} grants out of request order; "
        f"not granted {len(problems.never)}, granted twice {len(problems.twice)}, "
        f"unexpected {len(problems.unexpected)}; continue-as-new {len(sem.continued)} times "
        f"(threshold {threshold}, runs of {sem.run_events} events), most waiters "
        f"carried {sem.max_waiters_carried}, largest state "
        f"{max((r.input_bytes for r in sem.continued), default=0) / 1024:.0f} KiB, longest gap "
        f"{max(gaps, default=0.0):.2f} s; failed semaphore tasks {dict(sem.failed_tasks)}; "
        f"{len(query_errors)} state queries unanswered",
        flush=True,
    )
    return {
        "name": name,
        "quick": quick,
        "holders": count,
        "capacity": capacity,
        "hold_activities": hold_activities,
        "default_transfer_rate": default_transfer_rate,
        "queue_fill_seconds": round(queued - started, 2),
        "drain_seconds": round(ended - queued, 2),
        "cycles_per_s": round(drain, 1),
        "steady_cycles_per_s_holder_time": round(steady, 1),
        "end_to_end_cycles_per_s": round(end_to_end, 1),
        "target_cycles_per_s": TARGET_CYCLES_PER_S,
        "max_holders_from_history": sem.max_holders,
        "max_holders_sampled": sampled_max,
        "state_queries": len(samples),
        "state_query_errors": len(query_errors),
        "state_query_first_errors": query_errors[:3],
        "max_overlap_from_holders": overlap,
        "fifo_grants_out_of_order": len(late),
        "fifo_first_out_of_order": late[:10],
        "grants_sent": len(sem.grants),
        "requests_never_granted": len(problems.never),
        "requests_granted_twice": len(problems.twice),
        "grants_unexpected": len(problems.unexpected),
        "continue_as_new_after_events": threshold,
        "continue_as_new_required": require_continue_as_new,
        "continue_as_new_count": len(sem.continued),
        "continue_as_new_max_waiters_carried": sem.max_waiters_carried,
        "continue_as_new_waiters_carried": [r.waiters_carried for r in sem.continued],
        "continue_as_new_max_state_kib": round(
            max((r.input_bytes for r in sem.continued), default=0) / 1024, 1
        ),
        "continue_as_new_gaps_s": [round(gap, 2) for gap in gaps],
        "semaphore_run_events": sem.run_events,
        "semaphore_failed_workflow_tasks": dict(sem.failed_tasks),
        "semaphore_runs": sem.runs,
        "semaphore_events_per_cycle": round(sem.events / (count + 2), 1),
        "semaphore_workflow_tasks_per_cycle": round(sem.tasks / (count + 2), 1),
        "holders_left_at_end": len(final.holders),
        "waiters_left_at_end": len(final.waiters),
        "server_cpu_s": round(cpu.server_s, 1),
        "python_cpu_s": round(cpu.python_s, 1),
        "other_cpu_s": round(cpu.other_s, 1),
        "drain_server_cpu_s": round(drain_cpu.server_s, 1),
        "drain_python_cpu_s": round(drain_cpu.python_s, 1),
        "drain_other_cpu_s": round(drain_cpu.other_s, 1),
        "ok": ok,
    }


async def run_1000(*, quick: bool = False) -> dict[str, Any]:
    """1,000 waiters (100 when ``quick``), and the semaphore continues as new under them.

    The full size keeps the production threshold: 1,000 cycles at about ten
    semaphore events each cross it several times, the first with hundreds of
    waiters still queued. The quick run lowers it so that its 100 waiters
    cross it too.
    """
    return await run(
        quick=quick,
        holders=QUEUE_1000_QUICK if quick else QUEUE_1000,
        continue_as_new_after_events=QUICK_CONTINUE_AS_NEW_AFTER_EVENTS if quick else None,
        require_continue_as_new=True,
        name="semaphore_1000",
    )


def summary_rows(result: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """``bench.run_all``'s rows for one run: each measure with its target."""
    r, name = result, result["name"]
    rows = [
        (
            name,
            f"cycles/s, {r['holders']} queued, cap {r['capacity']}",
            f"{r['cycles_per_s']:.1f}",
            f">= {TARGET_CYCLES_PER_S:g}",
        ),
        (name, "end to end incl. starting requesters", f"{r['end_to_end_cycles_per_s']:.1f}/s", ""),
        (
            name,
            "max holders (history / queries / holder intervals)",
            f"{r['max_holders_from_history']} / {r['max_holders_sampled']} / "
            f"{r['max_overlap_from_holders']}",
            f"<= {r['capacity']}",
        ),
        (name, "grants out of request order (FIFO)", str(r["fifo_grants_out_of_order"]), "0"),
        (
            name,
            "requests not granted exactly once",
            str(r["requests_never_granted"] + r["requests_granted_twice"] + r["grants_unexpected"]),
            "0",
        ),
    ]
    if r["continue_as_new_required"]:
        rows.append(
            (
                name,
                f"continue-as-new under load (times; most waiters carried; "
                f"threshold {r['continue_as_new_after_events']})",
                f"{r['continue_as_new_count']}; {r['continue_as_new_max_waiters_carried']}",
                ">= 1 with waiters",
            )
        )
    return rows


def summarize(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Spread of several runs' drain rates (the host's speed varies between runs)."""
    rates = sorted(r["cycles_per_s"] for r in results)
    summary = {
        "runs": len(rates),
        "cycles_per_s_min": rates[0],
        "cycles_per_s_median": statistics.median(rates),
        "cycles_per_s_max": rates[-1],
        "runs_at_target": sum(rate >= TARGET_CYCLES_PER_S for rate in rates),
        "max_holders": max(
            max(r["max_holders_from_history"], r["max_holders_sampled"]) for r in results
        ),
        "capacity": results[0]["capacity"],
    }
    print(
        f"[semaphore] {summary['runs']} runs: cycles/s min {summary['cycles_per_s_min']:.1f}, "
        f"median {summary['cycles_per_s_median']:.1f}, max {summary['cycles_per_s_max']:.1f}; "
        f"{summary['runs_at_target']} of {summary['runs']} at >= {TARGET_CYCLES_PER_S:g}; "
        f"most holders at once {summary['max_holders']} (cap {summary['capacity']})",
        flush=True,
    )
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="40 holders (smoke run)")
    parser.add_argument(
        "--runs",
        type=int,
        default=1,
        help="repeat the run (each on a new server); print the spread",
    )
    parser.add_argument("--holders", type=int, default=None)
    parser.add_argument("--capacity", type=int, default=5)
    parser.add_argument(
        "--hold-activities",
        type=int,
        default=0,
        help="no-op activities each holder runs while holding (default 0)",
    )
    parser.add_argument(
        "--default-transfer-rate",
        action="store_true",
        help="keep the dev server's transfer-queue read rate (20/s) for comparison",
    )
    parser.add_argument(
        "--continue-as-new-after-events",
        type=int,
        default=None,
        help="the semaphore's continue-as-new threshold (default: the production one, "
        f"{DEFAULT_CONTINUE_AS_NEW_AFTER_EVENTS})",
    )
    parser.add_argument(
        "--require-continue-as-new",
        action="store_true",
        help="miss the target unless a continue-as-new carried queued waiters",
    )
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, got {args.runs}")
    if args.hold_activities < 0:
        parser.error(f"--hold-activities must be 0 or more, got {args.hold_activities}")
    results = [
        asyncio.run(
            run(
                quick=args.quick,
                holders=args.holders,
                capacity=args.capacity,
                hold_activities=args.hold_activities,
                default_transfer_rate=args.default_transfer_rate,
                continue_as_new_after_events=args.continue_as_new_after_events,
                require_continue_as_new=args.require_continue_as_new,
            )
        )
        for _ in range(args.runs)
    ]
    if args.runs > 1:
        summarize(results)


if __name__ == "__main__":
    main()
