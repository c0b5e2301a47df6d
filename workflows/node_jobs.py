"""Job coordination: before the first disruption, give the node's jobs their chance.

The node's GPU pods are grouped by job (JobSet, batch/v1 Job, Kubeflow, or the
policy's own label keys). By the fault class's urgency the incident then goes
on at once (``immediate``), asks the jobs that opted in to checkpoint and waits
for each asked job's answer up to ``jobs.checkpoint_timeout``
(``checkpoint_first``), or keeps the quarantined node running its job until the
job ends or checkpoints, up to ``jobs.max_defer`` (``when_idle``). The wait is a
durable timer plus the signals the watcher's relay sends (an answer, a watched
pod ended), and a coarse timer (``jobs.recheck_interval``) that looks at the
node's jobs itself, since the relay forgets watched pods when it restarts; a
worker or watcher restart loses neither the request nor the wait. Operators cut
it with ``approve stop_gpu_work`` or ``skip_to``; ``abort`` withdraws the
request; a pause holds the drain after the wait until ``resume``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from gpu_remediation import decision_log as log_words
    from gpu_remediation.ids import Signals
    from gpu_remediation.job_contracts import CheckpointAnswerReport, NodeJobs, WatchedPodEnded
    from gpu_remediation.jobs import JobRef, describe_jobs, incident_id, judge_answer
    from gpu_remediation.models import Rung, Urgency

from workflows.node_compensation import Compensation
from workflows.node_incident import failure_cause

JOB_STAGE_PATCH = "job-coordination"
"""Incidents started before the job stage existed replay without it."""
PAUSE_AFTER_WAIT_PATCH = "pause-after-job-wait"
"""Incidents paused during their job wait before this fix drained at its end."""
EVERY_JOB_PATCH = "checkpoint-every-job"
"""Waits begun before it ended at the first answer, whichever job gave it."""
RECHECK_PATCH = "job-wait-recheck"
"""Waits begun before it looked at the node's jobs only when the relay said a pod ended."""
MAX_IGNORED_ANSWER_LOGS = 10
"""Ignored answers beyond this are counted, not logged (a looping job must not
fill the decision log)."""


class JobCoordination(Compensation):
    """Finds the node's jobs and waits for them as the fault's urgency allows."""

    # State of the current wait, set when it begins. Immutable values, replaced
    # rather than changed, so these class-level defaults are never shared.
    _every_job = False
    """Whether the wait ends only when each asked job answered (EVERY_JOB_PATCH)."""
    _recheck = False
    """Whether the wait also looks at the node's jobs on a timer (RECHECK_PATCH)."""
    _asked_jobs: tuple[str, ...] = ()
    """``namespace/name`` of each job asked to checkpoint."""
    _job_answers: tuple[tuple[str, str], ...] = ()
    """(job, what it answered), in the order the answers came."""
    _unnamed_answer = False
    """An answer that names no job (an older relay) came: it ends the wait, as it used to."""

    @workflow.signal(
        name=Signals.CHECKPOINT_ANSWER, description="Relayed: a job answered a checkpoint request."
    )
    def checkpoint_answer(self, report: CheckpointAnswerReport) -> None:
        """Accept each asked job's first valid answer; log the ones ignored.

        An answer naming no job (from a relay older than per-job answers) is
        taken for the whole node, as before: the first one ends the wait.
        """
        job = report.job if self._every_job else None
        if job is not None and job in dict(self._job_answers):
            # More pods of the job, or its next save: not an error, and a job
            # that answers at every step must not fill the decision log.
            info = workflow.info()
            if report.request_incident == incident_id(info.workflow_id, info.run_id):
                return
        if self._request_incident is None or self._answers_end_wait():
            self._ignore_answer(report.pod, "no checkpoint request is pending")
            return
        if job is not None and job not in self._asked_jobs:
            self._ignore_answer(report.pod, f"{job} was not asked to checkpoint")
            return
        verdict = judge_answer(report.raw, report.truncated, self._request_incident)
        if verdict.answer is None:
            self._ignore_answer(report.pod, verdict.problem or "unreadable")
            return
        self._answer = verdict.answer
        answer = verdict.answer
        if answer.refused is not None:
            what = f"refused by {report.pod}"
            self._record.decide(
                log_words.JOBS_STAGE, "checkpoint refused", f"{report.pod}: {answer.refused}"
            )
        else:
            what = f"saved at step {answer.step}"
            saved = answer.saved_at.isoformat() if answer.saved_at else "time not given"
            self._record.decide(
                log_words.JOBS_STAGE,
                log_words.CHECKPOINT_ANSWERED,
                f"{report.pod}: step {answer.step}, saved {saved}",
            )
        if job is None:
            self._unnamed_answer = True
            self._checkpoint = what
        else:
            self._job_answers = (*self._job_answers, (job, what))
            self._checkpoint = self._answers_summary("asked")
        self._update_details()

    def _answers_end_wait(self) -> bool:
        """Whether the answers so far end the wait: every asked job's, or the first one."""
        if not self._every_job:
            return self._answer is not None
        answered = dict(self._job_answers)
        every = bool(self._asked_jobs) and all(job in answered for job in self._asked_jobs)
        return self._unnamed_answer or every

    def _answers_summary(self, pending: str) -> str:
        """What each asked job answered (``pending`` for the others), for the operator."""
        answered = dict(self._job_answers)
        if len(self._asked_jobs) == 1:
            return answered.get(self._asked_jobs[0], pending)
        return "; ".join(f"{job}: {answered.get(job, pending)}" for job in self._asked_jobs)

    @workflow.signal(
        name=Signals.WATCHED_POD_ENDED,
        description="Relayed: a GPU pod this incident waits on ended.",
    )
    def watched_pod_ended(self, report: WatchedPodEnded) -> None:
        """Wake the job wait to look again at what still runs on the node."""
        if report.request_incident == self._request_incident:
            self._pods_ended += 1

    async def _coordinate_jobs(self) -> bool:
        """Find the jobs and wait as the urgency says; False when an operator cut in."""
        if self._jobs_coordinated or not self._policy.jobs.enabled:
            return True
        self._jobs_coordinated = True
        found = await self._find_jobs()
        if found is None or found.gpu_pods == 0:
            return True
        urgency, why = self._urgency()
        asked = [job for job in found.jobs if job.checkpoint_supported]
        if urgency == Urgency.IMMEDIATE:
            self._record.decide(log_words.JOBS_STAGE, "no wait", why)
            return True
        if urgency == Urgency.CHECKPOINT_FIRST and not asked:
            self._record.decide(
                log_words.JOBS_STAGE, "no wait", "no job on the node opted in to checkpoints"
            )
            return True
        jobs = self._policy.jobs
        timeout = jobs.checkpoint_timeout if urgency == Urgency.CHECKPOINT_FIRST else jobs.max_defer
        if self._dry_run:
            what = "ask for a checkpoint" if asked else "wait for the jobs to end"
            self._record.decide(log_words.JOBS_STAGE, f"would {what}", f"{why}; up to {timeout}")
            return True
        return await self._wait_for_jobs(urgency, asked, timeout, why)

    async def _hold_while_paused(self) -> bool:
        """Keep a paused incident from draining (a pause does not end the job wait itself).

        The ladder looks at the pause before each step, but the job wait may
        last a day: a pause that came during it holds the drain here.

        Returns:
            False when an operator's skip or abort came while it was held.
        """
        if not self._paused or not workflow.patched(PAUSE_AFTER_WAIT_PATCH):
            return True
        self._record.decide(log_words.JOBS_STAGE, "drain held", "paused by an operator")
        await self._wait_while_paused()
        return self._abort is None and self._skip_to is None

    async def _find_jobs(self, *, quiet_if_same: bool = False) -> NodeJobs | None:
        """Look at the node's jobs; with ``quiet_if_same``, log only what changed."""
        try:
            found = await self._actions.find_jobs()
        except ActivityError as err:
            # Not knowing the jobs must not keep a broken node in service.
            self._record.decide(log_words.JOBS_STAGE, "could not list the jobs", failure_cause(err))
            return None
        same = list(found.jobs) == self._jobs
        self._jobs = list(found.jobs)
        if quiet_if_same and same:
            return found
        extra = f"; {found.unowned_pods} GPU pod(s) of no job" if found.unowned_pods else ""
        self._record.decide(
            log_words.JOBS_STAGE, f"on the node: {describe_jobs(self._jobs)}", extra.lstrip("; ")
        )
        self._update_details()
        return found

    def _urgency(self) -> tuple[Urgency, str]:
        assert self._classification is not None
        manual = self._record.manual_request()
        if manual is not None and manual.force:
            return Urgency.IMMEDIATE, f"forced by {manual.requested_by}"
        fault = self._classification.fault_class
        urgency = self._policy.fault_class(fault).urgency
        return urgency, log_words.urgency_reason(urgency, fault)

    async def _wait_for_jobs(
        self, urgency: Urgency, asked: list[JobRef], wait: timedelta, why: str
    ) -> bool:
        """Ask, then wait for an answer, the jobs' end, the deadline or an operator."""
        info = workflow.info()
        self._request_incident = incident_id(info.workflow_id, info.run_id)
        # Decided once per wait: a wait begun under the older code replays under it.
        self._every_job = workflow.patched(EVERY_JOB_PATCH)
        self._recheck = workflow.patched(RECHECK_PATCH)
        self._asked_jobs = tuple(job.display for job in asked)
        self._job_answers, self._unnamed_answer = (), False
        deadline = workflow.now() + wait
        try:
            result = await self._actions.request_checkpoint(
                self._request_incident, self._jobs, deadline, urgency, why
            )
        except ActivityError as err:
            self._record.decide(log_words.JOBS_STAGE, "could not ask the jobs", failure_cause(err))
            self._request_incident = None
            return True
        what = (
            log_words.asked_to_checkpoint(describe_jobs(asked))
            if asked
            else log_words.WAITING_FOR_JOBS
        )
        self._checkpoint = "asked" if asked else "waiting for the jobs to end"
        self._record.decide(
            log_words.JOBS_STAGE,
            what,
            f"{why}; {result.requested_pods} pod(s) asked, {result.watched_pods} watched, "
            f"until {deadline.isoformat(timespec='seconds')} ({wait})",
        )
        self._awaiting_approval, self._approved = Rung.STOP_GPU_WORK, False
        try:
            outcome = await self._wait_loop(
                deadline, "a job checkpoint" if asked else "jobs to end"
            )
        finally:
            self._awaiting_approval = None
        self._record.decide(log_words.JOBS_STAGE, "wait over", outcome)
        await self._withdraw_request()
        self._request_incident = None
        if urgency == Urgency.WHEN_IDLE:
            self._deferred = True
        return self._abort is None and self._skip_to is None

    async def _wait_loop(self, deadline: datetime, what: str) -> str:
        """Wait until something ends the wait; return what did."""
        while True:
            remaining = deadline - workflow.now()
            if remaining <= timedelta(0):
                if self._every_job and self._job_answers:
                    self._checkpoint = self._answers_summary("deadline passed")
                elif self._answer is None:
                    self._checkpoint = "deadline passed"
                return "deadline passed"
            timeout = remaining
            if self._recheck:
                # The relay forgets watched pods when it restarts (a pod deleted
                # meanwhile sends no event): a coarse timer looks for itself.
                timeout = min(remaining, self._policy.jobs.recheck_interval)
            seen = self._pods_ended
            self._waiting_for = f"{what} (until {deadline.isoformat(timespec='seconds')})"
            self._update_details()
            rechecking = False
            try:
                await workflow.wait_condition(
                    lambda s=seen: (  # type: ignore[misc]
                        self._answers_end_wait()
                        or self._pods_ended != s
                        or self._approved
                        or self._skip_to is not None
                        or self._abort is not None
                    ),
                    timeout=timeout,
                    timeout_summary=f"wait for {what}",
                )
            except TimeoutError:
                if not self._recheck or workflow.now() >= deadline:
                    continue  # the loop sees the deadline passed
                rechecking = True
            finally:
                self._waiting_for = None
            if self._abort is not None:
                return "aborted by an operator"
            if self._approved or self._skip_to is not None:
                return "cut short by an operator"
            if self._answers_end_wait():
                return self._checkpoint or "answered"
            found = await self._find_jobs(quiet_if_same=rechecking)
            if found is None:
                continue
            if found.gpu_pods == 0:
                self._checkpoint = "the jobs ended"
                return "no GPU work left on the node"
            if self._every_job and self._job_answers and not self._still_asked(found):
                self._checkpoint = self._answers_summary("left the node")
                return "every asked job still on the node answered"

    def _still_asked(self, found: NodeJobs) -> list[str]:
        """Asked jobs that run on the node and have not answered."""
        here = {job.display for job in found.jobs}
        answered = dict(self._job_answers)
        return [job for job in self._asked_jobs if job in here and job not in answered]

    async def _withdraw_request(self) -> None:
        """Remove the request from the jobs' pods (on other nodes they keep running)."""
        assert self._request_incident is not None
        try:
            result = await self._actions.withdraw_checkpoint(self._request_incident, self._jobs)
        except ActivityError as err:
            self._record.decide(
                log_words.JOBS_STAGE, "could not withdraw the request", failure_cause(err)
            )
            return
        if result.cleared_pods:
            self._record.decide(
                log_words.JOBS_STAGE, "request withdrawn", f"from {result.cleared_pods} pod(s)"
            )

    def _ignore_answer(self, pod: str, problem: str) -> None:
        self._ignored_answers += 1
        if self._ignored_answers <= MAX_IGNORED_ANSWER_LOGS:
            self._record.decide(log_words.JOBS_STAGE, "answer ignored", f"{pod}: {problem}")
