"""The node workflow's side of every activity: names, options and retries.

Each method calls one activity of the contract in ``gpu_remediation.contracts``
with the timeouts and retry policy its rung has in the policy. Corrective
calls are cancelled when the operator aborts, so an abort never waits for a
long reboot or drain to finish.

A step that waits for the world (a drain, a reset, a reboot, a diagnostic, a
replacement) is given its policy window as a workflow timer: the timer, on the
policy's clock, decides when the step has taken too long, not the activity's
own timeouts, which are liveness nets only (window plus ``timeouts.heartbeat``)
and never fire in a healthy run (issue 40). In the simulated fleet the window
is then exactly the policy's, scaled by the time factor, with no real-time
floor; in the history it reads as a timer beside the activity.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from pydantic import BaseModel

    from gpu_remediation import admission_models as a
    from gpu_remediation import contracts as c
    from gpu_remediation import job_contracts as j
    from gpu_remediation.ids import Activities
    from gpu_remediation.jobs import JobRef
    from gpu_remediation.models import FaultClass, Rung, Urgency
    from gpu_remediation.policy import NotifyPolicy, Policy

R = TypeVar("R", bound=BaseModel)

# Reads and bookkeeping are short and safe to repeat, so they retry generously.
# Their start-to-close and the long activities' heartbeat timeout are the
# policy's ``timeouts`` (they bound how soon a dead worker's activity is retried).
BOOKKEEPING_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=10,
)
NOTIFY_WINDOW = timedelta(minutes=15)
"""All tries of a hand-over notice together: a receiver down longer is logged, not awaited."""
# Failures that retrying cannot fix; implementations raise
# ApplicationError(type=...) with these names.
# (NodeReplaced is raised non-retryable: retrying never brings the machine back.)
NON_RETRYABLE = ["InvalidInput", "NodeNotFound", "PdbMisconfigured", "NotSupported", "NodeReplaced"]
# A host not back within the reboot window after a delivered reboot will not be
# back after another: the ladder climbs at once instead of rebooting again.
REBOOT_NON_RETRYABLE = [*NON_RETRYABLE, "RebootNotConfirmed"]


class StepWindowElapsed(Exception):
    """A step that waits for the world did not finish within its policy window."""


STEP_FAILED = (ActivityError, StepWindowElapsed)
"""What a rung's step can fail with; the stage records it and the ladder decides."""


NODE_REPLACED = "NodeReplaced"
"""A mutating activity found another machine under the node's name (activities.node_pin)."""


def failure_type(err: BaseException) -> str | None:
    """The type of the innermost application error of an activity failure, if any."""
    while err.__cause__ is not None:
        err = err.__cause__
    return err.type if isinstance(err, ApplicationError) else None


def failure_cause(err: BaseException) -> str:
    """The innermost message of an activity failure, for the decision log."""
    while err.__cause__ is not None:
        err = err.__cause__
    return str(err) or type(err).__name__


class NodeActions:
    """Typed calls of the remediation activities for one node's incident."""

    def __init__(
        self,
        policy: Policy,
        node: str,
        aborted: Callable[[], bool],
        pin: Callable[[], c.NodePin | None],
        replaced: Callable[[str], None],
    ) -> None:
        """Bind the calls to one node.

        Args:
            policy: The policy whose rung timeouts and retries apply.
            node: The node's name.
            aborted: Tells whether an operator aborted (cancels corrective calls).
            pin: The machine the incident pinned at triage (None before), sent
                with every call so mutating activities refuse another machine.
            replaced: Told why, when an activity refuses the node as another machine.
        """
        self._policy = policy
        self._node = node
        self._aborted = aborted
        self._pin = pin
        self._replaced = replaced

    def _ids(self) -> dict[str, object]:
        return {"node": self._node, "incident_id": workflow.info().workflow_id, "pin": self._pin()}

    def _noticed(self, err: ActivityError) -> None:
        if failure_type(err) == NODE_REPLACED:
            self._replaced(failure_cause(err))

    async def read_health(self, summary: str = "read node health") -> c.NodeHealth:
        """Read the node's readiness, boot id, provider id and pool."""
        return await self._bookkeeping(
            Activities.READ_NODE_HEALTH, c.ReadNodeHealthInput(**self._ids()), c.NodeHealth, summary
        )

    async def node_history(
        self, incidents_since: datetime, attempts_since: datetime
    ) -> c.NodeHistory:
        """Read the pinned machine's earlier incidents (repeat-offender rule, attempt budgets)."""
        info = workflow.info()
        pin = self._pin()
        return await self._bookkeeping(
            Activities.LOOKUP_NODE_HISTORY,
            c.LookupNodeHistoryInput(
                workflow_id=info.workflow_id,
                current_run_id=info.run_id,
                incidents_since=incidents_since,
                attempts_since=attempts_since,
                provider_id=pin.provider_id if pin else "",
            ),
            c.NodeHistory,
            "look up earlier incidents of this node",
        )

    async def count_replacements(
        self, cluster: str, pool: str | None, since: datetime
    ) -> c.ReplacementCount:
        """Count the pool's nodes replaced since ``since`` (the rate budget)."""
        return await self._bookkeeping(
            Activities.COUNT_REPLACEMENTS,
            c.CountReplacementsInput(cluster=cluster, node_pool=pool, since=since),
            c.ReplacementCount,
            f"count the replacements in pool {pool}",
        )

    async def pool_health(self, pool: str | None) -> c.PoolHealth:
        """Count the pool's nodes (the GPU nodes when none) and the unhealthy ones."""
        return await self._bookkeeping(
            Activities.CHECK_BREAKER,
            c.CheckBreakerInput(
                node_pool=pool,
                node_selector=None if pool else self._policy.triggers.node_selector,
            ),
            c.PoolHealth,
            f"check the breaker of pool {pool}",
        )

    async def quarantine(self, *, held: bool = False) -> c.QuarantineResult:
        """Cordon and add the NoSchedule quarantine taint; mark or unmark it as held."""
        return await self._rung_call(
            Rung.QUARANTINE,
            Activities.QUARANTINE_NODE,
            c.QuarantineNodeInput(**self._ids(), held=held),
            c.QuarantineResult,
            "mark the quarantine held by the breaker" if held else "cordon and taint",
        )

    async def release(self, *, uncordon: bool) -> c.ReleaseResult:
        """Remove the quarantine taint and uncordon (unless told not to)."""
        return await self._bookkeeping(
            Activities.RELEASE_NODE,
            c.ReleaseNodeInput(**self._ids(), uncordon=uncordon),
            c.ReleaseResult,
            "untaint" + (" and uncordon" if uncordon else ""),
        )

    async def drain(self) -> c.DrainResult:
        """Evict the node's GPU pods within the rung's timeout."""
        timeout = self._policy.rung(Rung.STOP_GPU_WORK).timeout
        return await self._rung_call(
            Rung.STOP_GPU_WORK,
            Activities.DRAIN_GPU_PODS,
            c.DrainGpuPodsInput(**self._ids(), timeout_s=timeout.total_seconds()),
            c.DrainResult,
            "evict GPU pods",
            window=timeout,
        )

    async def reset_gpus(self, provider_id: str, gpus: list[int]) -> c.ResetGpusResult:
        """Reset the named GPUs (all when empty)."""
        return await self._rung_call(
            Rung.GPU_RESET,
            Activities.RESET_GPUS,
            c.ResetGpusInput(**self._ids(), provider_id=provider_id, gpu_indices=gpus),
            c.ResetGpusResult,
            f"reset GPUs {gpus or 'all'}",
            window=self._policy.rung(Rung.GPU_RESET).timeout,
        )

    async def reboot(self, provider_id: str, boot_id_before: str) -> c.RebootResult:
        """Reboot out of band; ``boot_id_before`` makes a retry after the reboot a no-op."""
        timeout = self._policy.rung(Rung.REBOOT).timeout
        return await self._rung_call(
            Rung.REBOOT,
            Activities.REBOOT_NODE,
            c.RebootNodeInput(
                **self._ids(),
                provider_id=provider_id,
                boot_id_before=boot_id_before,
                timeout_s=timeout.total_seconds(),
            ),
            c.RebootResult,
            "reboot via EC2 and wait for Ready",
            window=timeout,
            non_retryable=REBOOT_NON_RETRYABLE,
        )

    async def run_step(self, rung: Rung, provider_id: str, gpus: list[int]) -> c.RungStepResult:
        """Run a rung's own activity (``Activities.rung_step``) with its timeout and retries."""
        timeout = self._policy.rung(rung).timeout
        activity = Activities.rung_step(rung)
        return await self._rung_call(
            rung,
            activity,
            c.RunRungStepInput(
                **self._ids(),
                provider_id=provider_id,
                rung=rung.value,
                gpu_indices=gpus,
                timeout_s=timeout.total_seconds(),
            ),
            c.RungStepResult,
            f"{rung}: {activity}",
            window=timeout,
        )

    async def diagnose(
        self, provider_id: str, label: str, level: int | None = None
    ) -> c.DiagnosticResult:
        """Run the verification diagnostic at ``level`` (None: the policy's level)."""
        verification = self._policy.verification
        level = level or verification.diag_level
        return await self._rung_call(
            Rung.DIAGNOSE,
            Activities.RUN_DIAGNOSTIC,
            c.RunDiagnosticInput(**self._ids(), provider_id=provider_id, level=level),
            c.DiagnosticResult,
            f"DCGM diag level {level} ({label})",
            window=verification.timeout,
        )

    async def efa_loopback(self, provider_id: str, label: str) -> c.EfaLoopbackResult:
        """Load each EFA device with ``fi_pingpong`` in loopback and judge it (issue 37)."""
        verification = self._policy.verification
        load = verification.efa_load_test
        return await self._rung_call(
            Rung.DIAGNOSE,
            Activities.RUN_EFA_LOOPBACK,
            c.RunEfaLoopbackInput(
                **self._ids(),
                provider_id=provider_id,
                max_counter_increase=load.max_counter_increase,
                min_bandwidth_fraction=load.min_bandwidth_fraction,
            ),
            c.EfaLoopbackResult,
            f"EFA loopback under load ({label})",
            window=verification.timeout,
        )

    async def check_efa(self, conditions: tuple[str, ...]) -> a.CheckEfaResult:
        """Read the node agent's EFA verdict (``conditions``, all healthy).

        A read: the verification's window is the workflow's loop around it.
        """
        return await self._rung_call(
            Rung.DIAGNOSE,
            Activities.CHECK_EFA,
            a.CheckEfaInput(
                node=self._node,
                admission_id=workflow.info().workflow_id,
                conditions=list(conditions),
            ),
            a.CheckEfaResult,
            "the node agent's EFA checks",
        )

    async def delete_node_claim(self, provider_id: str) -> c.DeleteNodeClaimResult:
        """Delete the node's Karpenter NodeClaim (idempotent)."""
        return await self._rung_call(
            Rung.REPLACE,
            Activities.DELETE_NODE_CLAIM,
            c.DeleteNodeClaimInput(**self._ids(), provider_id=provider_id),
            c.DeleteNodeClaimResult,
            "delete the Karpenter NodeClaim",
        )

    async def wait_for_replacement(self, pool: str | None, since: datetime) -> c.ReplacementResult:
        """Wait until the old node is gone and new capacity in the pool is Ready."""
        timeout = self._policy.rung(Rung.REPLACE).timeout
        return await self._rung_call(
            Rung.REPLACE,
            Activities.WAIT_FOR_REPLACEMENT,
            c.WaitForReplacementInput(
                **self._ids(), node_pool=pool, timeout_s=timeout.total_seconds(), since=since
            ),
            c.ReplacementResult,
            "wait for the old node to go and new capacity to be Ready",
            window=timeout,
        )

    async def escalate(self, fault: FaultClass, reason: str, summary: str) -> c.EscalationResult:
        """Open a ticket / notify a human."""
        return await self._bookkeeping(
            Activities.ESCALATE,
            c.EscalateInput(
                **self._ids(), fault_class=fault, reason=reason[:2048], summary=summary[:8192]
            ),
            c.EscalationResult,
            "hand over to a human",
        )

    async def notify_hand_over(
        self,
        cluster: str,
        notify: NotifyPolicy,
        fault: FaultClass,
        reason: str,
        reference: str,
        summary: str,
    ) -> c.NotifyHandOverResult:
        """Tell the hand-over webhook; retried ``notify.attempts`` times with backoff."""
        return await workflow.execute_activity(  # type: ignore[no-any-return]
            Activities.NOTIFY_HAND_OVER,
            c.NotifyHandOverInput(
                **self._ids(),
                cluster=cluster,
                fault_class=fault,
                reason=reason[:2048],
                reference=reference[:2048],
                summary=summary[:8192],
                notify=notify,
            ),
            result_type=c.NotifyHandOverResult,
            # A liveness net around the send's own timeout; the hand-over's hold does
            # not start until this returns, so all the tries together are bounded too.
            start_to_close_timeout=notify.timeout + self._policy.timeouts.bookkeeping,
            schedule_to_close_timeout=NOTIFY_WINDOW,
            retry_policy=RetryPolicy(
                initial_interval=timedelta(seconds=5),
                maximum_interval=timedelta(minutes=5),
                maximum_attempts=notify.attempts,
            ),
            summary="notify people of the hand-over",
        )

    async def notify_workload_owner(self, fault: FaultClass, message: str) -> None:
        """Tell the GPU pods' owners that their application faulted."""
        await workflow.execute_activity(
            Activities.NOTIFY_WORKLOAD_OWNER,
            c.NotifyWorkloadOwnerInput(**self._ids(), fault_class=fault, message=message[:2048]),
            start_to_close_timeout=self._policy.timeouts.bookkeeping,
            retry_policy=BOOKKEEPING_RETRY,
            summary="notify the workload owner",
        )

    async def find_jobs(self) -> j.NodeJobs:
        """Find the training jobs whose GPU pods run on the node."""
        return await self._bookkeeping(
            Activities.FIND_NODE_JOBS,
            j.FindNodeJobsInput(**self._ids(), label_keys=self._policy.jobs.label_keys),
            j.NodeJobs,
            "find the jobs on the node",
        )

    async def request_checkpoint(
        self,
        incident: str,
        jobs: list[JobRef],
        deadline: datetime,
        urgency: Urgency,
        reason: str,
    ) -> j.CheckpointRequestResult:
        """Ask the opted-in jobs to checkpoint by ``deadline``; watch the node's GPU pods."""
        return await self._bookkeeping(
            Activities.REQUEST_CHECKPOINT,
            j.RequestCheckpointInput(
                **self._ids(),
                request_incident=incident,
                deadline=deadline,
                urgency=urgency,
                reason=reason[:256],
                label_keys=self._policy.jobs.label_keys,
                jobs=jobs,
            ),
            j.CheckpointRequestResult,
            f"ask {len(jobs)} job(s) to checkpoint",
        )

    async def withdraw_checkpoint(
        self, incident: str, jobs: list[JobRef]
    ) -> j.CheckpointWithdrawResult:
        """Remove this incident's checkpoint requests and watch marks."""
        return await self._bookkeeping(
            Activities.WITHDRAW_CHECKPOINT,
            j.WithdrawCheckpointInput(
                **self._ids(),
                request_incident=incident,
                label_keys=self._policy.jobs.label_keys,
                jobs=jobs,
            ),
            j.CheckpointWithdrawResult,
            "withdraw the checkpoint request",
        )

    async def record(
        self, rung: Rung | None, fault: FaultClass | None, message: str, *, warning: bool
    ) -> None:
        """Write the step onto the node (annotation + event) for kubectl users."""
        try:
            await workflow.execute_activity(
                Activities.RECORD_STEP,
                c.RecordStepInput(
                    **self._ids(),
                    rung=rung,
                    fault_class=fault,
                    message=message[:1024],
                    warning=warning,
                ),
                start_to_close_timeout=self._policy.timeouts.bookkeeping,
                retry_policy=BOOKKEEPING_RETRY,
                summary="record on the node",
            )
        except ActivityError as err:
            self._noticed(err)
            raise

    async def _bookkeeping(
        self, name: str, arg: BaseModel, result_type: type[R], summary: str
    ) -> R:
        try:
            return await workflow.execute_activity(  # type: ignore[no-any-return]
                name,
                arg,
                result_type=result_type,
                start_to_close_timeout=self._policy.timeouts.bookkeeping,
                retry_policy=BOOKKEEPING_RETRY,
                summary=summary,
            )
        except ActivityError as err:
            self._noticed(err)
            raise

    async def _rung_call(
        self,
        rung: Rung,
        name: str,
        arg: BaseModel,
        result_type: type[R],
        summary: str,
        *,
        window: timedelta | None = None,
        non_retryable: list[str] = NON_RETRYABLE,
    ) -> R:
        """Run one of the rung's activities with its retries.

        Args:
            rung: The rung whose retry policy (and timeout) applies.
            name: The activity.
            arg: Its input.
            result_type: Its result's model.
            summary: What the call does, for the UI and the decision log.
            window: For a step that waits for the world, the policy's window for
                all of its attempts, a workflow timer (raises
                ``StepWindowElapsed`` when it fires first). None for an API
                call, bounded per attempt by the rung's ``timeout`` (at least
                ``timeouts.bookkeeping``: a liveness net, like every API call's).
            non_retryable: Error types no retry can fix.
        """
        retry = self._policy.rung(rung).retry
        handle = workflow.start_activity(
            name,
            arg,
            result_type=result_type,
            # With a window, a liveness net only: the window's timer fires first.
            start_to_close_timeout=(
                window + self._policy.timeouts.heartbeat
                if window is not None
                else max(self._policy.rung(rung).timeout, self._policy.timeouts.bookkeeping)
            ),
            # A silent long activity is presumed dead well before its own timeout.
            heartbeat_timeout=self._policy.timeouts.heartbeat,
            retry_policy=RetryPolicy(
                initial_interval=retry.initial_interval,
                backoff_coefficient=retry.backoff,
                maximum_interval=retry.max_interval,
                maximum_attempts=retry.max_attempts,
                non_retryable_error_types=non_retryable,
            ),
            summary=summary,
        )
        try:
            await workflow.wait_condition(
                lambda: handle.done() or self._aborted(),
                timeout=window,
                timeout_summary=f"the policy's window for: {summary}",
            )
        except TimeoutError:
            handle.cancel()
            with contextlib.suppress(ActivityError):
                await handle  # its cancellation
            raise StepWindowElapsed(f"{summary}: not done within the policy's {window}") from None
        if not handle.done():
            # Awaiting a cancelled activity raises ActivityError, which the
            # stage handles like any failure before the abort is acted on.
            handle.cancel()
        try:
            return await handle  # type: ignore[no-any-return]
        except ActivityError as err:
            self._noticed(err)
            raise
