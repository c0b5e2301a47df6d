"""Holder-side helper for the semaphores, used inside a holder workflow.

The semaphores cap replacements and, since issue 35, each disruptive step.

The holder workflow owns one ``ReplacementPermit`` and must:

* route its ``permit_granted`` signal (``Signals.PERMIT_GRANTED``) to
  ``ReplacementPermit.on_grant``;
* run on a worker that also registers ``ReplacementSemaphoreWorkflow``,
  ``PermitGuardWorkflow`` and the ``ensure_semaphore`` activity (or pass the task
  queue of one that does);
* use a fresh request id per acquisition (a released id is not granted again).

``acquire`` makes sure the semaphore exists, starts the guard child that
releases the permit if the holder dies, then asks and waits. The guard is
started before the request so that there is no moment where the semaphore
knows a request that nothing would release. ``release`` gives the permit
back to the semaphore directly and dismisses the guard (ADR 006), for holders
that go on afterwards; a holder that closes right after leaves the permit to
its guard instead (``leave_to_guard``, ADR 007).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import CancelledError as TemporalCancelledError
from temporalio.exceptions import FailureError
from temporalio.workflow import ChildWorkflowHandle, ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from gpu_remediation.contracts import EnsureSemaphoreInput
    from gpu_remediation.ids import SEMAPHORE_WORKFLOW_ID, Activities, Signals, guard_workflow_id
    from gpu_remediation.semaphore_models import (
        PermitGrant,
        PermitGuardInput,
        PermitRelease,
        PermitRequest,
    )
    from workflows.permit_guard import PermitGuardWorkflow

ENSURE_SEMAPHORE_TIMEOUT = timedelta(seconds=30)
"""Start-to-close timeout of the ``ensure_semaphore`` activity (one start call)."""

ENSURE_SEMAPHORE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30)
)
"""Retried until it succeeds: a holder cannot proceed without the semaphore."""

WAIT_SUMMARY = "waiting for a replacement permit"


class ReplacementPermit:
    """One holder's permit: acquire, observe and release it from workflow code."""

    def __init__(
        self, semaphore_workflow_id: str = SEMAPHORE_WORKFLOW_ID, task_queue: str | None = None
    ) -> None:
        """Prepare a permit; nothing is sent until ``acquire``.

        Args:
            semaphore_workflow_id: Id of the semaphore workflow (tests use their own).
            task_queue: Task queue for the ``ensure_semaphore`` activity and the
                guard child; by default the holder's own.
        """
        self._semaphore_workflow_id = semaphore_workflow_id
        self._task_queue = task_queue
        self._request_id: str | None = None
        self._grant: PermitGrant | None = None
        self._guard: ChildWorkflowHandle[PermitGuardWorkflow, str] | None = None
        # The workflow's own event loop, recorded when the request starts.
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def request_id(self) -> str | None:
        """The request being waited for or held, or None."""
        return self._request_id

    @property
    def held(self) -> bool:
        """Whether the permit was granted and not released since."""
        return self._grant is not None

    @property
    def expires_at(self) -> datetime | None:
        """When the semaphore reclaims the permit if it is not released first."""
        return self._grant.expires_at if self._grant is not None else None

    def on_grant(self, grant: PermitGrant) -> None:
        """Record a grant; call from the holder's ``permit_granted`` signal handler.

        Grants for other request ids (a withdrawn or earlier request) are ignored.

        Args:
            grant: The grant signalled by the semaphore.
        """
        if self._request_id is None or grant.request_id != self._request_id:
            workflow.logger.info(
                "Ignoring grant for %s (current request: %s)", grant.request_id, self._request_id
            )
            return
        self._grant = grant

    async def acquire(
        self,
        request_id: str,
        lease: timedelta,
        # Workflow time, bounding a durable wait: asyncio.timeout does not apply.
        timeout: timedelta,  # noqa: ASYNC109
        capacity: int,
        interrupted: Callable[[], bool] = lambda: False,
        *,
        pool: str | None = None,
        pool_capacity: int | None = None,
        purpose: str = "node replacements",
        guarded: bool = True,
    ) -> bool:
        """Ask for a permit and wait for it.

        Args:
            request_id: Unique per acquisition (e.g. incident id plus attempt);
                repeats of it are deduplicated by the semaphore.
            lease: How long the permit may be held before the semaphore reclaims it.
            timeout: How long to wait for the grant.
            capacity: Capacity used only if the semaphore does not exist yet.
            interrupted: Stops the wait early when it turns true (an operator's
                abort); the request is then withdrawn.
            pool: The holder's node pool, for the semaphore's per-pool cap.
            pool_capacity: Per-pool cap used only if the semaphore does not exist yet.
            purpose: What the semaphore caps, shown in the UI if it is started here.
            guarded: Start a guard child that releases the permit if the holder
                closes. Without one (a permit held only while one short step runs),
                only the lease reclaims the permit of a holder that vanished.

        Returns:
            True if the permit is held; False if none was granted within
            ``timeout`` or before ``interrupted`` (the request is then withdrawn).

        Raises:
            RuntimeError: If this permit is already requested or held.
        """
        if self._request_id is not None:
            raise RuntimeError(
                f"permit already requested as {self._request_id!r}; release it first"
            )
        info = workflow.info()
        self._loop = asyncio.get_running_loop()
        self._request_id = request_id
        try:
            if guarded:
                self._guard = await self._start_guard(request_id)
            request = PermitRequest(
                holder_workflow_id=info.workflow_id,
                holder_run_id=info.run_id,
                request_id=request_id,
                lease=lease,
                pool=pool,
            )
            semaphore = workflow.get_external_workflow_handle(self._semaphore_workflow_id)
            try:
                await semaphore.signal(Signals.REQUEST_PERMIT, request)
            except FailureError as err:
                if isinstance(err, TemporalCancelledError):
                    raise  # the holder stopped waiting: not a missing semaphore
                # Not running yet (first use, or after an operator removed it):
                # start it, then ask again. Running, it costs nothing extra.
                await self._ensure_semaphore(capacity, pool_capacity, purpose)
                await semaphore.signal(Signals.REQUEST_PERMIT, request)
            await workflow.wait_condition(
                lambda: self._grant is not None or interrupted(),
                timeout=timeout,
                timeout_summary=WAIT_SUMMARY,
            )
            if self._grant is None:
                await self.release("holder stopped waiting")
                return False
        except TimeoutError:
            await self.release("timed out waiting for a permit")
            return False
        except (asyncio.CancelledError, Exception):
            # Cancelled or failed while asking: withdraw now rather than when the
            # holder closes, since the holder may go on doing cleanup for a while.
            # (Not BaseException: a worker evicting this workflow from its cache
            # closes the coroutine with GeneratorExit, which must not await.)
            await self.release("holder stopped waiting")
            raise
        return True

    async def _start_guard(self, request_id: str) -> ChildWorkflowHandle[PermitGuardWorkflow, str]:
        info = workflow.info()
        return await workflow.start_child_workflow(
            PermitGuardWorkflow.run,
            PermitGuardInput(
                semaphore_workflow_id=self._semaphore_workflow_id,
                request_id=request_id,
                holder_workflow_id=info.workflow_id,
                holder_run_id=info.run_id,
            ),
            id=guard_workflow_id(info.workflow_id, request_id),
            task_queue=self._task_queue,
            parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
            static_summary=(
                f"Permit guard (plumbing) of {info.workflow_id}: releases permit "
                f"{request_id} of {self._semaphore_workflow_id} if that incident closes"
            ),
        )

    async def release(self, reason: str = "released") -> None:
        """Give the permit back (or withdraw the request) and stop the guard.

        Idempotent: does nothing if nothing is requested or held.

        Args:
            reason: Recorded by the semaphore's log.
        """
        request_id, guard = self._request_id, self._guard
        if request_id is None or not self._on_own_loop():
            # Off its own loop, this runs from a coroutine closed after the
            # worker dropped the workflow (``finally`` on GeneratorExit, on
            # whichever loop is current, even another workflow's). Nothing may
            # be sent from there: the guard releases when the holder closes.
            return
        self._request_id, self._grant, self._guard = None, None, None
        release = PermitRelease(request_id=request_id, reason=reason)
        if guard is None:
            await self._signal_release(release)
            return
        # The release goes straight to the semaphore and the guard is told it
        # has nothing left to do: one message each, in the same task (ADR 006).
        # Each send is made only once the task before it exists: while a worker
        # evicts the workflow (a holder releasing in ``finally``), creating a
        # task fails, and a send made for a later task would never be awaited
        # (a warning whenever it is collected).
        sends = [asyncio.ensure_future(self._signal_release(release))]
        sends.append(asyncio.ensure_future(self._dismiss_guard(guard)))
        await asyncio.gather(*sends)

    def leave_to_guard(self) -> None:
        """Leave the held permit to the guard: for a holder about to close.

        Closing the holder cancels the guard (``ParentClosePolicy.REQUEST_CANCEL``)
        and a cancelled guard releases the permit: the path that covers a
        terminated holder, taken by every holder that ends with its permit, so
        it runs all the time rather than only after crashes. It costs one
        message where ``release`` costs two and the holder's tasks that wait
        for them (ADR 007). The permit stays held until the holder closes:
        call this only right before the workflow returns. Nothing is sent.

        Raises:
            RuntimeError: If no permit is held, or none with a guard.
        """
        if self._grant is None or self._guard is None:
            raise RuntimeError("no permit held with a guard to leave it to")
        workflow.logger.info(
            "Permit %s goes back through its guard when this workflow closes", self._request_id
        )

    def _on_own_loop(self) -> bool:
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False

    async def _signal_release(self, release: PermitRelease) -> None:
        semaphore = workflow.get_external_workflow_handle(self._semaphore_workflow_id)
        try:
            await semaphore.signal(Signals.RELEASE_PERMIT, release)
        except FailureError as err:
            if isinstance(err, TemporalCancelledError):
                raise
            # No semaphore running: no permit to give back (a new one starts empty).
            workflow.logger.warning("Could not release %s: %s", release.request_id, err)

    async def _dismiss_guard(self, guard: ChildWorkflowHandle[PermitGuardWorkflow, str]) -> None:
        """Tell the guard the permit is given back, and wait for it to end."""
        try:
            await guard.signal(PermitGuardWorkflow.dismiss)
            await guard
        except FailureError as err:
            if isinstance(err, TemporalCancelledError):
                raise
            # Only if someone terminated the guard: it can release nothing now,
            # and the holder's own release has gone out in the same task.
            workflow.logger.warning("Permit guard %s ended badly: %s", guard.id, err)

    async def _ensure_semaphore(
        self, capacity: int, pool_capacity: int | None, purpose: str
    ) -> None:
        await workflow.execute_activity(
            Activities.ENSURE_SEMAPHORE,
            EnsureSemaphoreInput(
                capacity=capacity,
                pool_capacity=pool_capacity,
                purpose=purpose,
                workflow_id=self._semaphore_workflow_id,
            ),
            task_queue=self._task_queue,
            start_to_close_timeout=ENSURE_SEMAPHORE_TIMEOUT,
            retry_policy=ENSURE_SEMAPHORE_RETRY,
            summary=f"start the semaphore of {purpose}",
        )
