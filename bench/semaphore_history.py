"""What the semaphore's own history says about a benchmark run, across continue-as-new.

The semaphore benchmarks check the semaphore from its recorded history, not
from probes that run while the queue drains:

* the cap: permits out at once, counted in history order (``peak_permits_out``);
* FIFO: the order of the grants it sent against the order it received the
  requests (``overtaken``);
* exactly once: how many grants each request id got (``grant_problems``);
* continue-as-new: every run of the chain, followed from the first run id
  through each ``ContinuedAsNew`` event's new run id (visibility lists runs in
  no guaranteed order), with the waiters and holders each new run was handed
  and how long the semaphore served nothing in between.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client

from gpu_remediation.ids import Signals
from gpu_remediation.semaphore_models import (
    PermitGrant,
    PermitRelease,
    PermitRequest,
    SemaphoreInput,
)

GRANT = "grant"
RELEASE = "release"


def peak_permits_out(changes: Iterable[tuple[str, str]]) -> int:
    """The most permits out at once, from ``(GRANT | RELEASE, request_id)`` in history order.

    A grant re-sent to a holder that retried its request does not count twice;
    a release of a request that was never granted (a withdrawn waiter) changes
    nothing.
    """
    out: set[str] = set()
    peak = 0
    for kind, request_id in changes:
        if kind == GRANT:
            out.add(request_id)
            peak = max(peak, len(out))
        else:
            out.discard(request_id)
    return peak


def first_occurrences(ids: Iterable[str]) -> list[str]:
    """``ids`` without repeats, each where it first appeared."""
    return list(dict.fromkeys(ids))


def overtaken(requests: Sequence[str], grants: Sequence[str]) -> list[str]:
    """Request ids granted after a request that arrived later than them was granted.

    ``requests`` and ``grants`` are request ids in the order the semaphore
    received the requests and sent the grants; repeats (a retried request, a
    re-sent grant) count where they first appear. Empty means the grants kept
    the requests' order. Grants of ids never requested are ``grant_problems``'
    business, not this.
    """
    rank = {request_id: index for index, request_id in enumerate(first_occurrences(requests))}
    latest = -1
    late: list[str] = []
    for request_id in first_occurrences(grants):
        position = rank.get(request_id)
        if position is None:
            continue
        if position < latest:
            late.append(request_id)
        latest = max(latest, position)
    return late


@dataclass(frozen=True)
class GrantProblems:
    """Request ids that were not granted exactly once."""

    never: list[str]
    """Expected ids with no grant."""
    twice: dict[str, int]
    """Ids with more than one grant signal, and how many."""
    unexpected: list[str]
    """Granted ids nobody expected."""

    @property
    def none(self) -> bool:
        """Every expected id was granted exactly once, and nothing else."""
        return not (self.never or self.twice or self.unexpected)


def grant_problems(expected: Iterable[str], grants: Iterable[str]) -> GrantProblems:
    """Compare the grant signals sent with the request ids that each needed exactly one."""
    counts = Counter(grants)
    wanted = list(dict.fromkeys(expected))
    return GrantProblems(
        never=[request_id for request_id in wanted if counts[request_id] == 0],
        twice={request_id: n for request_id, n in counts.items() if n > 1},
        unexpected=sorted(set(counts) - set(wanted)),
    )


@dataclass
class ContinuedRun:
    """One run that a continue-as-new started."""

    waiters_carried: int
    holders_carried: int
    input_bytes: int
    """Size of the run's input payload (the carried state)."""
    gap_s: float
    """From the previous run's ``ContinuedAsNew`` event to this run's first completed task."""


@dataclass
class SemaphoreHistory:
    """What the semaphore's history shows about a benchmark run."""

    runs: int = 0
    events: int = 0
    run_events: list[int] = field(default_factory=list)
    """Events of each run, in order."""
    tasks: int = 0
    failed_tasks: Counter[str] = field(default_factory=Counter)
    """Failed workflow tasks by cause (a continue-as-new that raced new signals is one)."""
    requests: list[str] = field(default_factory=list)
    """Request ids in the order the semaphore received them (repeats kept)."""
    grants: list[str] = field(default_factory=list)
    """Request ids in the order grants were sent (repeats kept)."""
    changes: list[tuple[str, str]] = field(default_factory=list)
    continued: list[ContinuedRun] = field(default_factory=list)

    @property
    def max_holders(self) -> int:
        """Most permits out at once (``peak_permits_out``)."""
        return peak_permits_out(self.changes)

    @property
    def max_waiters_carried(self) -> int:
        """Most waiters one continue-as-new handed to the next run (0: none did)."""
        return max((run.waiters_carried for run in self.continued), default=0)


async def read_semaphore_history(
    client: Client, semaphore_id: str, first_run_id: str
) -> SemaphoreHistory:
    """Read every run of the semaphore's chain, from ``first_run_id`` on.

    Permits out are counted in history order: a grant signal sent adds its
    request id, a ``release_permit`` signal received removes it. A grant is
    decided in a workflow task that saw only the releases recorded before it,
    so at every grant this count is the number of holders the semaphore had.
    Releases without a signal (lease expiry, ``force_release``) are not
    counted, which can only overstate the peak; the benchmarks have none.
    """
    result = SemaphoreHistory()
    converter = client.data_converter
    run_id: str | None = first_run_id
    continued_at: datetime | None = None
    while run_id is not None:
        history = await client.get_workflow_handle(semaphore_id, run_id=run_id).fetch_history()
        result.runs += 1
        result.events += len(history.events)
        result.run_events.append(len(history.events))
        run_id = None
        first_task_done = False
        for event in history.events:
            kind = event.event_type
            if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED and continued_at is not None:
                payloads = event.workflow_execution_started_event_attributes.input.payloads
                [carried] = await converter.decode(payloads, [SemaphoreInput])
                state = carried.state
                result.continued.append(
                    ContinuedRun(
                        waiters_carried=len(state.waiters) if state else 0,
                        holders_carried=len(state.holders) if state else 0,
                        input_bytes=sum(p.ByteSize() for p in payloads),
                        gap_s=0.0,
                    )
                )
            elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                result.tasks += 1
                if not first_task_done and continued_at is not None:
                    gap = event.event_time.ToDatetime() - continued_at
                    result.continued[-1].gap_s = gap.total_seconds()
                first_task_done = True
            elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                cause = event.workflow_task_failed_event_attributes.cause
                result.failed_tasks[WorkflowTaskFailedCause.Name(cause)] += 1
            elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                attributes = event.workflow_execution_continued_as_new_event_attributes
                run_id = attributes.new_execution_run_id
                continued_at = event.event_time.ToDatetime()
            elif event.HasField("signal_external_workflow_execution_initiated_event_attributes"):
                sent = event.signal_external_workflow_execution_initiated_event_attributes
                if sent.signal_name == Signals.PERMIT_GRANTED:
                    [grant] = await converter.decode(sent.input.payloads, [PermitGrant])
                    result.grants.append(grant.request_id)
                    result.changes.append((GRANT, grant.request_id))
            elif event.HasField("workflow_execution_signaled_event_attributes"):
                received = event.workflow_execution_signaled_event_attributes
                if received.signal_name == Signals.RELEASE_PERMIT:
                    [release] = await converter.decode(received.input.payloads, [PermitRelease])
                    result.changes.append((RELEASE, release.request_id))
                elif received.signal_name == Signals.REQUEST_PERMIT:
                    [request] = await converter.decode(received.input.payloads, [PermitRequest])
                    result.requests.append(request.request_id)
    return result
