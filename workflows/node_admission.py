"""Node admission: one boot of a node takes no work until its burn-in passes.

One run per node and boot (``ids.admission_workflow_id``), started by the
watcher when a node carrying the startup taint appears, or by an incident
after a reboot or a replacement. It keeps the node behind the startup taint
(``ids.STARTUP_TAINT_KEY``, NoSchedule), runs the policy's burn-in checks
(DCGM diag at the pool's level, the node agent's EFA verdict, optionally an
NCCL all-reduce Job on the node) and removes the taint when they pass. A
failed check is handed to the node's incident as evidence; on the node's
first boot (dead on arrival) with a replacement runbook, so the node is
replaced unless the pool's breaker is open. A reboot during burn-in ends this
run and starts the new boot's; a deleted node ends it. ``skip_burn_in``
(``remediate admit NODE --skip-burn-in``) admits at once, recorded in the
decision log (ADR 011).
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from gpu_remediation import admission_models as a
    from gpu_remediation import contracts as c
    from gpu_remediation.admission_nccl import Verdict, nccl_evidence
    from gpu_remediation.ids import ADMISSION_WORKFLOW_TYPE, Activities, Queries, Updates
    from gpu_remediation.models import ConditionEvidence, DcgmEvidence, Evidence, ManualEvidence
    from gpu_remediation.search_attributes import SA_CLUSTER, SA_NODE, SA_NODE_POOL
    from gpu_remediation.workflow_models import Decision
    from workflows import admission_metrics as metrics

from workflows.node_actions import failure_cause

# The bookkeeping start-to-close and the checks' heartbeat timeout are the
# policy's ``timeouts`` (they bound how soon a dead worker's activity is retried).
BOOKKEEPING_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=10,
)
NON_RETRYABLE = ["InvalidInput", "NodeNotFound", "NotSupported"]
MAX_DECISIONS = 100
SOURCE = "node-admission"


class _Ended(Exception):
    """This boot's admission is over (node gone, rebooted): unwinds to ``run``."""


@workflow.defn(name=ADMISSION_WORKFLOW_TYPE)
class NodeAdmissionWorkflow:
    """Burn-in of one boot of a node, behind its startup taint."""

    @workflow.init
    def __init__(self, input: a.AdmissionInput) -> None:
        self._input = input
        self._gate = input.policy.admission
        self._timeouts = input.policy.timeouts
        self._state = a.AdmissionState(
            cluster=input.cluster,
            node=input.node,
            boot_id=input.boot_id,
            trigger=input.trigger,
            first_boot=input.first_boot,
            stage="start",
            started_at=workflow.now(),
        )
        self._skip: a.SkipBurnInInput | None = None
        self._provider_id = ""

    @workflow.run
    async def run(self, input: a.AdmissionInput) -> a.AdmissionResult:
        """Hold, check, and admit or hand over; return how this boot's admission ended."""
        try:
            return await self._admission()
        except _Ended:
            return self._result()

    async def _admission(self) -> a.AdmissionResult:
        hold = await self._read(add_taint=True)
        if hold.admitted_boot == self._input.boot_id and not hold.tainted:
            self._decide("start", "already admitted", "this boot passed before")
            return self._end(a.AdmissionOutcome.ADMITTED, count=False)
        workflow.upsert_search_attributes(
            [
                SA_NODE.value_set(self._input.node),
                SA_CLUSTER.value_set(self._input.cluster),
                *([SA_NODE_POOL.value_set(hold.node_pool)] if hold.node_pool else []),
            ]
        )
        self._decide(
            "start", "held" + (" (taint added)" if hold.taint_added else ""), self._input.trigger
        )
        if not self._gate.enabled:
            self._decide("gate", "off by policy", "untainted without burn-in")
            return await self._admit(a.AdmissionOutcome.ADMITTED_UNCHECKED)
        if not await self._wait_ready(hold):
            never = self._check("ready", False, "node never turned Ready", self._not_ready())
            self._state.checks.append(never)  # state only: no command changes
            return await self._fail(never)
        for name in self._check_names():
            if self._skip is not None:
                break
            check = await self._run_check(name)
            if check is None:
                break  # skipped by an operator while it ran
            self._state.checks.append(check)
            verdict = "pass" if check.passed else "fail"
            self._decide("burn-in", f"{name} {verdict}", check.summary)
            if not check.passed:
                return await self._fail(check)
        if self._skip is not None:
            return await self._admit(a.AdmissionOutcome.OVERRIDDEN)
        return await self._admit(a.AdmissionOutcome.ADMITTED)

    # ------------------------------------------------------------ operator

    @workflow.update(name=Updates.SKIP_BURN_IN, description="Admit without (the rest of) burn-in.")
    async def skip_burn_in(self, request: a.SkipBurnInInput) -> str:
        """Admit the node now; the request is recorded in the decision log."""
        self._skip = request
        self._decide("operator", f"burn-in skipped by {request.by}", request.reason or "no reason")
        return f"admitting {self._input.node} (boot {self._input.boot_id})"

    @skip_burn_in.validator
    def _validate_skip(self, request: a.SkipBurnInInput) -> None:
        if self._state.outcome is not None:
            raise ValueError(f"admission already ended: {self._state.outcome}")
        if self._skip is not None:
            raise ValueError("burn-in already skipped")
        if self._state.stage in ("admit", "hand over"):
            raise ValueError(f"too late: the admission is at {self._state.stage}")

    @workflow.query(name=Queries.ADMISSION_STATE, description="Checks, decisions, outcome.")
    def state(self) -> a.AdmissionState:
        """The admission's state."""
        return self._state

    # ------------------------------------------------------------ stages

    async def _wait_ready(self, hold: a.AdmissionHold) -> bool:
        """Wait until the node is Ready (it registers before the kubelet says so)."""
        self._set(stage="wait for Ready")
        deadline = workflow.now() + self._gate.ready_timeout
        while not hold.ready:
            if self._skip is not None:
                return True
            if workflow.now() >= deadline:
                return False
            await self._sleep(self._gate.poll_interval, "waiting for the node to be Ready")
            hold = await self._read()
        return True

    def _check_names(self) -> list[a.CheckName]:
        names: list[a.CheckName] = ["dcgm_diag", "efa"] if self._gate.efa else ["dcgm_diag"]
        # Last: the all-reduce is the slowest and needs the GPUs the diag found sound.
        return [*names, "nccl"] if self._gate.nccl.enabled else names

    async def _run_check(self, name: a.CheckName) -> a.BurnInCheck | None:
        self._set(stage=f"burn-in: {name}")
        level = self._gate.diag_level_for(self._state.node_pool)
        if name == "dcgm_diag":
            verified = self._input.verified_diag_level
            if verified is not None and verified >= level:
                summary = f"passed at level {verified} in the incident's verification of this boot"
                return self._check(name, True, summary, [], reused=True)
            arg: Any = c.RunDiagnosticInput(
                node=self._input.node,
                incident_id=workflow.info().workflow_id,
                provider_id=self._provider_id,
                level=level,
            )
            return await self._activity_check(
                name, Activities.RUN_DIAGNOSTIC, arg, c.DiagnosticResult, f"DCGM diag level {level}"
            )
        if name == "nccl":
            nccl = self._gate.nccl
            floor = nccl.floor_for(self._state.node_pool)
            arg = a.RunNcclCheckInput(
                **self._node_input(),
                image=nccl.image,
                max_bytes=nccl.max_bytes,
                min_bus_bandwidth_gbps=floor,
                timeout_s=min(86_400, max(60, int(self._gate.check_timeout.total_seconds()))),
            )
            return await self._activity_check(
                name, Activities.RUN_NCCL_CHECK, arg, a.NcclCheckResult, "NCCL all-reduce Job"
            )
        settle_until = self._state.started_at + self._gate.settle
        deadline = workflow.now() + self._gate.check_timeout
        while True:
            if workflow.now() < settle_until:
                await self._sleep(settle_until - workflow.now(), "the node agent's next cycles")
            if self._skip is not None:
                return None
            check = await self._activity_check(
                name,
                Activities.CHECK_EFA,
                a.CheckEfaInput(**self._node_input()),
                a.CheckEfaResult,
                "the node agent's EFA verdict",
            )
            if check is None or check.passed or check.evidence or workflow.now() >= deadline:
                return check
            settle_until = workflow.now() + self._gate.poll_interval  # not reported yet

    async def _activity_check(
        self, name: a.CheckName, activity: str, arg: Any, result_type: type, summary: str
    ) -> a.BurnInCheck | None:
        """Run one check's activity, re-reading the node while it runs; None if skipped.

        ``check_timeout`` is the check's window on the workflow's clock (all
        attempts); the activity's own timeouts are liveness nets behind it.
        """
        started = workflow.now()
        deadline = started + self._gate.check_timeout
        retry = self._gate.retry
        handle = workflow.start_activity(
            activity,
            arg,
            result_type=result_type,
            start_to_close_timeout=self._gate.check_timeout + self._timeouts.heartbeat,
            heartbeat_timeout=self._timeouts.heartbeat,
            retry_policy=RetryPolicy(
                initial_interval=retry.initial_interval,
                backoff_coefficient=retry.backoff,
                maximum_interval=retry.max_interval,
                maximum_attempts=retry.max_attempts,
                non_retryable_error_types=NON_RETRYABLE,
            ),
            summary=summary,
            # A check cut short (node gone, rebooted, skipped) is stopped on the
            # host before this run goes on: no diag outlives its admission.
            cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )
        look = 0
        while not handle.done() and self._skip is None:
            if workflow.now() >= deadline:
                handle.cancel()
                with contextlib.suppress(ActivityError):
                    await handle  # its cancellation, acknowledged by the activity
                why = f"not done within the policy's check_timeout {self._gate.check_timeout}"
                return self._check(name, False, why, self._unrunnable(name, why), started=started)
            # The looks are on a fixed schedule from the start, not a poll interval
            # after the last look: a timer that drifted by each look's own length
            # came to end a few milliseconds after the activity's own look at the
            # world, which on the time-skipping test server (the clock-free what-if)
            # fires it while this workflow's task runs and breaks the run (ADR 018).
            look += 1
            while started + look * self._gate.poll_interval <= workflow.now():
                look += 1  # the last look took longer than the interval
            next_look = min(started + look * self._gate.poll_interval, deadline)
            try:
                await workflow.wait_condition(
                    lambda: handle.done() or self._skip is not None,
                    timeout=next_look - workflow.now(),
                    timeout_summary=f"{name} running",
                )
            except TimeoutError:
                try:
                    await self._read()  # raises _Ended if the node went or rebooted
                except _Ended:
                    handle.cancel()
                    with contextlib.suppress(ActivityError):
                        await handle  # its cancellation, acknowledged by the activity
                    raise
        if not handle.done():
            handle.cancel()
            with contextlib.suppress(ActivityError):
                await handle
            return None
        try:
            result = await handle
        except ActivityError as err:
            await self._read()  # a check that failed because the node went or rebooted
            cause = failure_cause(err)
            return self._check(
                name, False, f"could not run: {cause}", self._unrunnable(name, cause)
            )
        passed = bool(result.passed)
        text = str(result.summary or "")
        evidence: list[Evidence] = list(result.failures if name == "dcgm_diag" else result.evidence)
        if not passed and not evidence:
            evidence = self._unrunnable(name, text or "failed without findings")
        return self._check(name, passed, text, evidence, started=started)

    async def _admit(self, outcome: a.AdmissionOutcome) -> a.AdmissionResult:
        self._set(stage="admit")
        skipped_by = self._skip.by if self._skip else "?"
        how = {
            a.AdmissionOutcome.ADMITTED: "burn-in passed",
            a.AdmissionOutcome.OVERRIDDEN: f"burn-in skipped by {skipped_by}",
        }.get(outcome, "gate off by policy")
        result = await self._bookkeeping(
            Activities.ADMIT_NODE,
            a.AdmitNodeInput(**self._node_input(), how=how),
            a.AdmitNodeResult,
            "remove the startup taint",
        )
        if result.status == "node_gone":
            return self._end(a.AdmissionOutcome.NODE_GONE)
        if result.status == "boot_changed":
            await self._boot_changed(result.boot_id_now)
            return self._result()
        self._set(schedulable_at=workflow.now())
        self._decide("admit", "startup taint removed" if result.taint_removed else "untainted", how)
        return self._end(outcome)

    async def _fail(self, check: a.BurnInCheck) -> a.AdmissionResult:
        """Hand the node to its incident; on the first boot with a replacement runbook."""
        self._set(stage="hand over")
        doa = self._input.first_boot
        evidence = list(check.evidence)[:255]
        if doa and self._gate.first_boot_replaces:
            evidence.append(
                ManualEvidence(
                    observed_at=workflow.now(),
                    source=SOURCE,
                    runbook="replace",
                    requested_by="node-admission (dead on arrival)",
                    message=f"failed burn-in ({check.name}) on its first boot",
                )
            )
        handed = await self._bookkeeping(
            Activities.HAND_TO_INCIDENT,
            a.HandToIncidentInput(
                cluster=self._input.cluster,
                node=self._input.node,
                policy=self._input.policy,
                evidence=evidence,
                report_id=f"admission:{self._input.boot_id}:{check.name}",
                semaphore_workflow_id=self._input.semaphore_workflow_id,
            ),
            a.HandToIncidentResult,
            "hand the node to its incident",
        )
        self._set(handed_to=handed.workflow_id)
        what = "dead on arrival: replacement asked" if doa else "burn-in failed"
        self._decide("hand over", what, f"{check.name}: {check.summary}"[:1024])
        metrics.burn_in_failed(
            check.name, doa, self._state.node_pool, self._state.instance_type, self._state.zone
        )
        return self._end(
            a.AdmissionOutcome.DEAD_ON_ARRIVAL if doa else a.AdmissionOutcome.BURN_IN_FAILED
        )

    async def _boot_changed(self, boot_id: str) -> None:
        """The node rebooted: this boot's burn-in is void; start the new boot's."""
        self._decide("boot", "changed", f"{self._input.boot_id} -> {boot_id}: burn-in restarts")
        if boot_id:
            nxt = self._input.model_copy(
                update={"boot_id": boot_id, "trigger": "reboot", "verified_diag_level": None}
            )
            await self._bookkeeping(
                Activities.START_ADMISSION,
                a.StartAdmissionInput(admission=nxt),
                a.StartAdmissionResult,
                f"start the burn-in of boot {boot_id}",
            )
        self._end(a.AdmissionOutcome.BOOT_CHANGED)

    # ------------------------------------------------------------ helpers

    async def _read(self, *, add_taint: bool = False) -> a.AdmissionHold:
        """Read the node; raise ``_Ended`` when it is gone or runs another boot."""
        hold: a.AdmissionHold = await self._bookkeeping(
            Activities.HOLD_FOR_ADMISSION,
            a.HoldForAdmissionInput(**self._node_input(), add_taint=add_taint),
            a.AdmissionHold,
            "hold behind the startup taint" if add_taint else "read the node",
        )
        if not hold.exists:
            self._decide("node", "gone", "the node was deleted")
            self._end(a.AdmissionOutcome.NODE_GONE)
            raise _Ended
        if hold.boot_id != self._input.boot_id:
            await self._boot_changed(hold.boot_id)
            raise _Ended
        self._provider_id = hold.provider_id
        self._set(node_pool=hold.node_pool, instance_type=hold.instance_type, zone=hold.zone)
        if hold.ready and self._state.ready_at is None:
            self._set(ready_at=workflow.now())  # first seen Ready (workflow time, replay-safe)
        return hold

    def _end(self, outcome: a.AdmissionOutcome, *, count: bool = True) -> a.AdmissionResult:
        self._set(outcome=outcome, stage="closed", waiting_for=None)
        state = self._state
        if count:
            metrics.admission_closed(
                outcome.value, state.node_pool, state.instance_type, state.zone
            )
            if outcome in a.ADMITTED_OUTCOMES:
                metrics.node_admitted(
                    outcome.value,
                    state.node_pool,
                    state.instance_type,
                    state.zone,
                    self._result().ready_to_schedulable_s,
                )
        return self._result()

    def _result(self) -> a.AdmissionResult:
        state = self._state
        seconds = None
        if state.ready_at is not None and state.schedulable_at is not None:
            seconds = (state.schedulable_at - state.ready_at).total_seconds()
        return a.AdmissionResult(**state.model_dump(), ready_to_schedulable_s=seconds)

    def _check(
        self,
        name: a.CheckName,
        passed: bool,
        summary: str,
        evidence: list[Evidence],
        *,
        reused: bool = False,
        started: Any = None,
    ) -> a.BurnInCheck:
        now = workflow.now()
        return a.BurnInCheck(
            name=name,
            passed=passed,
            summary=summary[:2048],
            evidence=evidence[:256],
            started_at=started or now,
            ended_at=now,
            reused=reused,
        )

    def _unrunnable(self, name: a.CheckName, why: str) -> list[Evidence]:
        now, message = workflow.now(), f"burn-in {name}: {why}"[:4096]
        if name == "dcgm_diag":
            return [DcgmEvidence(observed_at=now, source=SOURCE, check="diag", message=message)]
        if name == "nccl":
            return [nccl_evidence(Verdict(False, why[:2048], "AllReduceFailed"), now)]
        # "True": a problem the incident acts on (quarantine, diagnose). "Unknown"
        # would read as no problem, and a later boot's incident would close
        # while the node stayed behind the taint. The agent's own condition,
        # once it reports healthy, clears it (same key).
        return [
            ConditionEvidence(
                observed_at=now,
                source=SOURCE,
                type="EfaHealthProblem",
                status="True",
                reason="BurnInCheckFailed",
                message=message,
            )
        ]

    def _not_ready(self) -> list[Evidence]:
        return [
            ConditionEvidence(
                observed_at=workflow.now(),
                source=SOURCE,
                type="Ready",
                status="Unknown",
                reason="BurnInNeverReady",
                message=f"not Ready within {self._gate.ready_timeout} of burn-in's start",
            )
        ]

    def _set(self, **changes: Any) -> None:
        self._state = self._state.model_copy(update=changes)

    def _node_input(self) -> dict[str, str]:
        return {
            "node": self._input.node,
            "boot_id": self._input.boot_id,
            "admission_id": workflow.info().workflow_id,
        }

    def _decide(self, stage: str, action: str, reason: str = "") -> None:
        decisions = self._state.decisions
        decisions.append(Decision(at=workflow.now(), stage=stage, action=action, reason=reason))
        del decisions[:-MAX_DECISIONS]

    async def _sleep(self, duration: timedelta, summary: str) -> None:
        """Sleep, woken early by an operator's skip."""
        self._set(waiting_for=summary)
        try:
            await workflow.wait_condition(
                lambda: self._skip is not None, timeout=duration, timeout_summary=summary
            )
        except TimeoutError:
            pass
        finally:
            self._set(waiting_for=None)

    async def _bookkeeping(self, name: str, arg: Any, result_type: type, summary: str) -> Any:
        return await workflow.execute_activity(
            name,
            arg,
            result_type=result_type,
            start_to_close_timeout=self._timeouts.bookkeeping,
            retry_policy=BOOKKEEPING_RETRY,
            summary=summary,
        )
