"""The fleet-wide semaphores: cap how many nodes are replaced (or drained, reset, rebooted) at once.

Karpenter's disruption budgets do not limit manual NodeClaim deletion, so the
project caps concurrent replacements itself. One long-lived workflow (id
``SEMAPHORE_WORKFLOW_ID``) owns the permits:

* holders ask with the ``request_permit`` signal and wait in FIFO order;
* a grant is signalled back pinned to the holder's run id, so a newer run of a
  reused node workflow id never receives an older run's permit; if the holder
  run is gone, the permit is reclaimed at once;
* every message carries the holder's request id, so retried requests and
  releases are idempotent;
* holders release by signal, and their guard child (``PermitGuardWorkflow``)
  releases for them when they are terminated, time out or fail;
* leases expire as a last resort, in case both of those paths are lost;
* operators change capacity and take permits away through validated updates;
* a per-pool cap (``pool_capacity``, issue 35) holds back a waiter whose pool
  already has that many holders, and serves the next waiter instead.

The same workflow type caps each disruptive step: one instance per step
(``ids.step_semaphore_id``), started with that step's budget.

State is carried across continue-as-new with absolute lease deadlines.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import FailureError

with workflow.unsafe.imports_passed_through():
    from gpu_remediation.ids import Queries, Signals, Updates
    from gpu_remediation.semaphore_models import (
        MAX_CAPACITY,
        ForceReleaseInput,
        Lease,
        PermitGrant,
        PermitRelease,
        PermitRequest,
        SemaphoreInput,
        SemaphoreState,
        SetCapacityInput,
        Waiter,
    )
    from workflows import metrics

RECENTLY_RELEASED_KEPT = 500
"""Released request ids remembered to drop late repeats of their requests. Bounded
because the list is carried across continue-as-new (ids are at most 256 chars)."""

DETAILS_ROWS_SHOWN = 20
"""Holders and waiters listed in the UI's current details; the rest are counted."""

EXPIRY_TIMER_SUMMARY = "reclaim the earliest expiring lease"


# Outside the sandbox (ADR 008): every grant and release passes through this one
# workflow's tasks, and in SDK 1.35 the sandbox costs a compiled ``exec`` for each
# payload of a task, several times over. The code is deterministic by review and
# by its tests, which run it inside the sandbox (semaphore_support.semaphore_worker)
# and replay its recorded history there too.
@workflow.defn(sandboxed=False)
class ReplacementSemaphoreWorkflow:
    """Singleton counting semaphore with FIFO waiters and leases."""

    @workflow.init
    def __init__(self, input: SemaphoreInput) -> None:
        # Initialised here, not in run, so update validators and queries that
        # arrive with the first task see the carried-over state.
        state = input.state or SemaphoreState(
            capacity=input.capacity, pool_capacity=input.pool_capacity
        )
        self._capacity = state.capacity
        self._pool_capacity = state.pool_capacity
        # Dicts keep insertion order: waiters are served first come, first served.
        self._holders: dict[str, Lease] = {lease.request_id: lease for lease in state.holders}
        self._waiters: dict[str, Waiter] = {w.request_id: w for w in state.waiters}
        self._recently_released: list[str] = list(state.recently_released)
        self._continue_as_new_after_events = input.continue_as_new_after_events
        self._grants_in_flight: set[asyncio.Task[None]] = set()
        self._expiry_timer: asyncio.Task[None] | None = None
        self._expiry_timer_due: datetime | None = None
        # Set by every state change so the main loop refreshes the expiry timer
        # and the UI details.
        self._changed = False

    @workflow.run
    async def run(self, input: SemaphoreInput) -> None:
        """Serve permits until continuing as new; never completes otherwise.

        Args:
            input: Capacity, and the state carried over from the previous run.
        """
        while True:
            self._reclaim_expired_leases()
            self._grant_waiters()
            self._publish_details()
            metrics.semaphore_state(
                workflow.info().workflow_id, self._capacity, len(self._holders), len(self._waiters)
            )
            if self._should_continue_as_new():
                # Handlers are synchronous, but update callers and in-flight grant
                # signals must finish in this run: a new run would not resume them.
                await workflow.wait_condition(
                    lambda: workflow.all_handlers_finished() and not self._grants_in_flight
                )
                workflow.continue_as_new(
                    SemaphoreInput(
                        capacity=self._capacity,
                        pool_capacity=self._pool_capacity,
                        state=self._snapshot(),
                        continue_as_new_after_events=self._continue_as_new_after_events,
                    )
                )
            self._changed = False
            # The timer sets _changed when it fires: expired leases are
            # reclaimed at the top.
            self._arm_expiry_timer()
            await workflow.wait_condition(lambda: self._changed or self._should_continue_as_new())

    @workflow.signal(
        name=Signals.REQUEST_PERMIT,
        description="Ask for a permit; idempotent by request_id.",
    )
    def request_permit(self, request: PermitRequest) -> None:
        """Queue a request, or re-send the grant of a request that already holds.

        Args:
            request: The holder's workflow id, run id, request id and lease length.
        """
        request_id = request.request_id
        lease = self._holders.get(request_id)
        if lease is not None:
            if self._same_holder(lease, request):
                # The holder may have missed the grant (it retried): send it again.
                self._dispatch_grant(lease)
            else:
                workflow.logger.warning(
                    "Request %s from %s/%s ignored: the id is held by %s/%s",
                    request_id,
                    request.holder_workflow_id,
                    request.holder_run_id,
                    lease.holder_workflow_id,
                    lease.holder_run_id,
                )
            return
        waiter = self._waiters.get(request_id)
        if waiter is not None:
            if not self._same_holder(waiter, request):
                workflow.logger.warning(
                    "Request %s from %s/%s ignored: the id is queued for %s/%s",
                    request_id,
                    request.holder_workflow_id,
                    request.holder_run_id,
                    waiter.holder_workflow_id,
                    waiter.holder_run_id,
                )
            return
        if request_id in self._recently_released:
            # A late duplicate (or a request overtaken by its own release).
            workflow.logger.info("Request %s dropped: it was released already", request_id)
            return
        self._waiters[request_id] = Waiter(
            holder_workflow_id=request.holder_workflow_id,
            holder_run_id=request.holder_run_id,
            request_id=request_id,
            lease=request.lease,
            enqueued_at=workflow.now(),
            pool=request.pool,
        )
        self._grant_waiters()
        self._changed = True

    @workflow.signal(
        name=Signals.RELEASE_PERMIT,
        description="Give back a permit or withdraw a waiting request; idempotent.",
    )
    def release_permit(self, release: PermitRelease) -> None:
        """Remove the holder or waiter with this request id, then serve waiters.

        Args:
            release: The request id and why it is released.
        """
        self._release(release.request_id, release.reason)

    @workflow.update(
        name=Updates.SET_CAPACITY,
        description="Change the number of permits. Lowering it revokes no lease.",
    )
    def set_capacity(self, input: SetCapacityInput) -> SemaphoreState:
        """Set the capacity; raising it grants waiters at once.

        Lowering it never revokes a lease: it only stops new grants until the
        holders drop below the new capacity.

        Args:
            input: The new capacity.

        Returns:
            The state after the change (including waiters granted by it).
        """
        workflow.logger.info("Capacity %d -> %d", self._capacity, input.capacity)
        self._capacity = input.capacity
        self._grant_waiters()
        self._changed = True
        return self._snapshot()

    @set_capacity.validator
    def _validate_set_capacity(self, input: SetCapacityInput) -> None:
        # The only bounds check: SetCapacityInput leaves it here so the operator
        # sees this message rather than a decoding failure.
        if not 1 <= input.capacity <= MAX_CAPACITY:
            raise ValueError(f"capacity must be between 1 and {MAX_CAPACITY}, got {input.capacity}")

    @workflow.update(
        name=Updates.FORCE_RELEASE,
        description="Take a permit (or a waiting request) away from its holder.",
    )
    def force_release(self, input: ForceReleaseInput) -> SemaphoreState:
        """Release a permit on an operator's behalf.

        The holder is not told; use this only for holders known to be stuck.

        Args:
            input: The request id and the operator's reason.

        Returns:
            The state after the release (including waiters granted by it).
        """
        self._release(input.request_id, f"forced: {input.reason}")
        return self._snapshot()

    @force_release.validator
    def _validate_force_release(self, input: ForceReleaseInput) -> None:
        if input.request_id not in self._holders and input.request_id not in self._waiters:
            raise ValueError(
                f"no holder or waiter with request id {input.request_id!r}; "
                f"holders: {sorted(self._holders)}"
            )

    @workflow.query(name=Queries.STATE, description="Capacity, holders and waiters.")
    def state(self) -> SemaphoreState:
        """Return the current capacity, leases, waiters and recently released ids."""
        return self._snapshot()

    def _snapshot(self) -> SemaphoreState:
        return SemaphoreState(
            capacity=self._capacity,
            pool_capacity=self._pool_capacity,
            holders=list(self._holders.values()),
            waiters=list(self._waiters.values()),
            recently_released=list(self._recently_released),
        )

    @staticmethod
    def _same_holder(known: Lease | Waiter, request: PermitRequest) -> bool:
        return (
            known.holder_workflow_id == request.holder_workflow_id
            and known.holder_run_id == request.holder_run_id
        )

    def _release(self, request_id: str, reason: str) -> None:
        removed: Lease | Waiter | None = self._holders.pop(request_id, None)
        if removed is None:
            removed = self._waiters.pop(request_id, None)
        # Remembered even when unknown: a release may overtake its own request
        # (the guard and the holder are different senders).
        self._remember_released(request_id)
        if removed is None:
            workflow.logger.debug("Release of unknown request %s (%s)", request_id, reason)
            return
        workflow.logger.info(
            "Released %s of %s/%s: %s",
            request_id,
            removed.holder_workflow_id,
            removed.holder_run_id,
            reason,
        )
        self._grant_waiters()
        self._changed = True

    def _remember_released(self, request_id: str) -> None:
        if request_id in self._recently_released:
            self._recently_released.remove(request_id)
        self._recently_released.append(request_id)
        del self._recently_released[:-RECENTLY_RELEASED_KEPT]

    def _grant_waiters(self) -> None:
        while self._waiters and len(self._holders) < self._capacity:
            request_id = self._next_waiter()
            if request_id is None:
                return  # every waiter's pool is at its cap
            waiter = self._waiters.pop(request_id)
            now = workflow.now()
            # Recorded as a holder before the grant is delivered, so a release
            # racing the grant finds it.
            lease = Lease(
                holder_workflow_id=waiter.holder_workflow_id,
                holder_run_id=waiter.holder_run_id,
                request_id=request_id,
                granted_at=now,
                expires_at=now + waiter.lease,
                pool=waiter.pool,
            )
            self._holders[request_id] = lease
            self._changed = True
            self._dispatch_grant(lease)

    def _next_waiter(self) -> str | None:
        """The first waiter (FIFO) whose pool is under its cap; None if there is none."""
        if self._pool_capacity is None:
            return next(iter(self._waiters))
        held: dict[str | None, int] = {}
        for lease in self._holders.values():
            held[lease.pool] = held.get(lease.pool, 0) + 1
        for request_id, waiter in self._waiters.items():
            if waiter.pool is None or held.get(waiter.pool, 0) < self._pool_capacity:
                return request_id
        return None

    def _dispatch_grant(self, lease: Lease) -> None:
        task = asyncio.create_task(self._send_grant(lease))
        self._grants_in_flight.add(task)
        task.add_done_callback(self._grants_in_flight.discard)

    async def _send_grant(self, lease: Lease) -> None:
        holder = workflow.get_external_workflow_handle(
            lease.holder_workflow_id, run_id=lease.holder_run_id
        )
        try:
            await holder.signal(
                Signals.PERMIT_GRANTED,
                PermitGrant(request_id=lease.request_id, expires_at=lease.expires_at),
            )
        except FailureError as err:
            # The pinned run is closed (or never existed): nobody can use the
            # permit, so it goes to the next waiter now rather than at expiry.
            if self._holders.get(lease.request_id) == lease:
                self._release(lease.request_id, f"grant undeliverable: {err}")
            else:
                workflow.logger.info(
                    "Grant of %s undeliverable, already released: %s", lease.request_id, err
                )
        finally:
            self._changed = True

    def _reclaim_expired_leases(self) -> None:
        now = workflow.now()
        for lease in [lease for lease in self._holders.values() if lease.expires_at <= now]:
            workflow.logger.warning(
                "Lease %s of %s/%s expired at %s: reclaimed",
                lease.request_id,
                lease.holder_workflow_id,
                lease.holder_run_id,
                lease.expires_at.isoformat(),
            )
            self._release(lease.request_id, "lease expired")

    def _arm_expiry_timer(self) -> None:
        """Make sure a timer fires no later than the earliest lease deadline.

        A running timer that fires at or before that deadline is kept: when its
        lease was released meanwhile it wakes the loop for nothing and is armed
        again, which is cheaper than replacing the timer on every grant.
        """
        timer, due = self._expiry_timer, self._expiry_timer_due
        if not self._holders:
            # An idle semaphore keeps no timer: nothing can expire.
            if timer is not None and not timer.done():
                timer.cancel()
            self._expiry_timer = self._expiry_timer_due = None
            return
        earliest = min(lease.expires_at for lease in self._holders.values())
        if timer is not None and not timer.done():
            if due is not None and due <= earliest:
                return
            timer.cancel()
        self._expiry_timer_due = earliest
        self._expiry_timer = asyncio.create_task(self._wake_at(earliest))

    async def _wake_at(self, due: datetime) -> None:
        # Never a zero timer: an already due lease is reclaimed on the next pass.
        delay = max(due - workflow.now(), timedelta(milliseconds=1))
        await workflow.sleep(delay, summary=EXPIRY_TIMER_SUMMARY)
        self._changed = True

    def _should_continue_as_new(self) -> bool:
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() > self._continue_as_new_after_events
        )

    def _publish_details(self) -> None:
        lines = [
            f"**Capacity** {self._capacity} · **holders** {len(self._holders)}"
            f" · **waiters** {len(self._waiters)}",
            "",
        ]
        if self._holders:
            lines += ["| holder | request | expires at |", "|---|---|---|"]
            lines += [
                f"| {lease.holder_workflow_id} | {lease.request_id} "
                f"| {lease.expires_at.isoformat(timespec='seconds')} |"
                for lease in list(self._holders.values())[:DETAILS_ROWS_SHOWN]
            ]
            lines.append("")
        if self._waiters:
            lines += ["| # | waiter | request | since |", "|---|---|---|---|"]
            lines += [
                f"| {position} | {waiter.holder_workflow_id} | {waiter.request_id} "
                f"| {waiter.enqueued_at.isoformat(timespec='seconds')} |"
                for position, waiter in enumerate(
                    list(self._waiters.values())[:DETAILS_ROWS_SHOWN], start=1
                )
            ]
        hidden = max(0, len(self._holders) - DETAILS_ROWS_SHOWN) + max(
            0, len(self._waiters) - DETAILS_ROWS_SHOWN
        )
        if hidden:
            lines.append(f"\n… and {hidden} more (query `{Queries.STATE}` for all)")
        workflow.set_current_details("\n".join(lines))
