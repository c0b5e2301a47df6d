"""A scriptable in-memory fleet registered under the real activity names.

The node workflow is tested against this double: it records every call, so
tests can assert what did and did not happen (no reset for Xid 79, exactly
one reboot, no side effects in dry-run), and its answers are scripted per
test (reset unsupported, diagnostics failing, a pool that is half unhealthy).
Benchmarks use it as the "instant test activities".
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from temporalio import activity
from temporalio.exceptions import ApplicationError

from gpu_remediation import admission_models as a
from gpu_remediation import contracts as c
from gpu_remediation import job_contracts as j
from gpu_remediation.ids import Activities
from gpu_remediation.models import DcgmEvidence

# Activities that change something on the node or in the cloud.
SIDE_EFFECTS = frozenset(
    {
        Activities.QUARANTINE_NODE,
        Activities.RELEASE_NODE,
        Activities.DRAIN_GPU_PODS,
        Activities.RESET_GPUS,
        Activities.REBOOT_NODE,
        Activities.RUN_DIAGNOSTIC,
        Activities.DELETE_NODE_CLAIM,
        Activities.WAIT_FOR_REPLACEMENT,
        Activities.ESCALATE,
        Activities.NOTIFY_WORKLOAD_OWNER,
        Activities.RECORD_STEP,
        Activities.REQUEST_CHECKPOINT,
        Activities.WITHDRAW_CHECKPOINT,
    }
)


def fake_pod_uid(pod: str) -> str:
    """The uid the fake fleet gives the pod ``namespace/name`` (pods of job J: J-0, J-1, ...)."""
    return "uid-" + pod.replace("/", "-")


def failing_diag(error_id: int = 85, gpu: int = 0) -> c.DiagnosticResult:
    """A diagnostic result that fails with one DCGM error."""
    return c.DiagnosticResult(
        passed=False,
        summary=f"DCGM error {error_id} on GPU {gpu}",
        failures=[
            DcgmEvidence(
                observed_at=datetime.now(UTC),
                source="dcgm-diag",
                check="diag",
                error_id=error_id,
                gpu_index=gpu,
            )
        ],
    )


@dataclass
class FakeFleet:
    """Scripted answers and a log of calls, per test."""

    node_exists: bool = True
    node_pool: str | None = "gpu-pool"
    reset_status: c.ResetStatus = "ok"
    diagnostics: list[c.DiagnosticResult] = field(default_factory=list)
    pool_total: int = 10
    pool_unhealthy: int = 1
    fail: set[str] = field(default_factory=set)
    calls: list[tuple[str, object]] = field(default_factory=list)
    boot_counter: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    boot_id: str = "boot-0"
    reboots: int = 0
    crash_after_reboot: bool = False
    replace_seconds: float = 0.0
    replace_gate: asyncio.Event | None = None
    """When set, replacements wait for it (a test decides when they finish)."""
    pod_uid: Callable[[str], str] = field(default_factory=lambda: fake_pod_uid)
    """The uid of the pod ``namespace/name`` when a checkpoint request is written on it."""
    request_gate: asyncio.Event | None = None
    """When set, checkpoint requests wait for it (answers can come while they run)."""
    replacing: int = 0
    max_replacing: int = 0
    node_jobs: list[j.NodeJobs] = field(default_factory=lambda: [j.NodeJobs()])
    """Answers of successive job look-ups; the last one repeats."""
    efa_checks: list[a.CheckEfaResult] = field(default_factory=list)
    """Answers of successive EFA checks; when empty, EFA is healthy."""
    efa_loopbacks: list[c.EfaLoopbackResult] = field(default_factory=list)
    """Answers of successive EFA loopbacks; when empty, every device passes."""
    efa_link_down_until_reboot: bool = False
    """The EFA link is down until the host reboots (the agent reports it so)."""
    host_dead_after_reboot: bool = False
    """A delivered reboot never brings the host back (the window passes)."""
    node_uid: str = "uid-node-0"
    """The Node object's uid, as reads report it."""
    replaced_after_reads: int | None = None
    """After this many node reads, the name is another machine (a new uid and provider
    id): reads say so, and mutating calls pinned to the old one raise NodeReplaced."""
    reads: int = 0
    replaced_at: str | None = None
    """The activity at whose call the name becomes another machine (it is refused)."""
    replaced_in_pool: int = 0
    reboot_gate: asyncio.Event | None = None
    """When set, reboots wait for it (a test decides when they finish)."""
    rebooting: int = 0
    max_rebooting: int = 0
    pool_unhealthy_then: list[int] = field(default_factory=list)
    """Unhealthy counts the next breaker checks answer, in order, before ``pool_unhealthy``."""
    """What the replacement count answers (the pool's replacements in the rate window)."""

    def called(self, name: str) -> int:
        """How many times activity ``name`` ran."""
        return Counter(n for n, _ in self.calls)[name]

    def names(self) -> list[str]:
        """Activity names in call order."""
        return [n for n, _ in self.calls]

    def side_effects(self) -> list[str]:
        """Calls that change something."""
        return [n for n in self.names() if n in SIDE_EFFECTS]

    def _log(self, name: str, arg: object) -> None:
        self.calls.append((name, arg))
        if name == self.replaced_at:
            self.node_uid = "uid-node-new"
        pin = getattr(arg, "pin", None)
        if name in SIDE_EFFECTS and pin is not None and pin.uid != self.node_uid:
            # Like activities.node_pin: the name is another machine now.
            raise ApplicationError(
                f"node is another machine now: uid {self.node_uid} (scripted)",
                type="NodeReplaced",
                non_retryable=True,
            )
        if name in self.fail:
            raise ApplicationError(f"{name} failed (scripted)", type="Scripted", non_retryable=True)

    def activities(self) -> list[object]:
        """The activity callables to register on a worker."""

        @activity.defn(name=Activities.READ_NODE_HEALTH)
        async def read_node_health(input: c.ReadNodeHealthInput) -> c.NodeHealth:
            self._log(Activities.READ_NODE_HEALTH, input)
            if self.reads == self.replaced_after_reads:
                self.node_uid = "uid-node-new"
            self.reads += 1
            instance = abs(hash((input.node, self.node_uid))) % 10**16
            return c.NodeHealth(
                exists=self.node_exists,
                ready=True,
                uid=self.node_uid,
                boot_id=self.boot_id,
                provider_id=f"aws:///us-west-2a/i-0{instance:016x}",
                node_pool=self.node_pool,
            )

        @activity.defn(name=Activities.QUARANTINE_NODE)
        async def quarantine_node(input: c.QuarantineNodeInput) -> c.QuarantineResult:
            self._log(Activities.QUARANTINE_NODE, input)
            return c.QuarantineResult(was_already_cordoned=False, taint_added=True)

        @activity.defn(name=Activities.RELEASE_NODE)
        async def release_node(input: c.ReleaseNodeInput) -> c.ReleaseResult:
            self._log(Activities.RELEASE_NODE, input)
            return c.ReleaseResult(taint_removed=True, uncordoned=input.uncordon)

        @activity.defn(name=Activities.DRAIN_GPU_PODS)
        async def drain_gpu_pods(input: c.DrainGpuPodsInput) -> c.DrainResult:
            self._log(Activities.DRAIN_GPU_PODS, input)
            return c.DrainResult(evicted_uids=["uid-1", "uid-2"])

        @activity.defn(name=Activities.RESET_GPUS)
        async def reset_gpus(input: c.ResetGpusInput) -> c.ResetGpusResult:
            self._log(Activities.RESET_GPUS, input)
            return c.ResetGpusResult(status=self.reset_status, command_id="cmd-1")

        @activity.defn(name=Activities.REBOOT_NODE)
        async def reboot_node(input: c.RebootNodeInput) -> c.RebootResult:
            self._log(Activities.REBOOT_NODE, input)
            # Like the real activity: a changed boot id means the reboot
            # already happened (a retry after a crash), so do not reboot again.
            if self.boot_id != input.boot_id_before:
                return c.RebootResult(boot_id_after=self.boot_id, rebooted_by_this_call=False)
            self.reboots += 1
            if self.reboot_gate is not None:
                self.rebooting += 1
                self.max_rebooting = max(self.max_rebooting, self.rebooting)
                try:
                    await self.reboot_gate.wait()
                finally:
                    self.rebooting -= 1
            self.boot_id = f"boot-{next(self.boot_counter)}"
            self.efa_link_down_until_reboot = False
            if self.host_dead_after_reboot:
                raise ApplicationError(
                    f"{input.node}: reboot not confirmed within {input.timeout_s:.0f}s (scripted)",
                    type="RebootNotConfirmed",
                )
            if self.crash_after_reboot:
                self.crash_after_reboot = False
                raise ApplicationError("worker lost after issuing the reboot (scripted)")
            return c.RebootResult(boot_id_after=self.boot_id, rebooted_by_this_call=True)

        @activity.defn(name=Activities.RUN_DIAGNOSTIC)
        async def run_diagnostic(input: c.RunDiagnosticInput) -> c.DiagnosticResult:
            self._log(Activities.RUN_DIAGNOSTIC, input)
            if self.diagnostics:
                return self.diagnostics.pop(0)
            return c.DiagnosticResult(passed=True, summary="all tests passed")

        @activity.defn(name=Activities.RUN_EFA_LOOPBACK)
        async def run_efa_loopback(input: c.RunEfaLoopbackInput) -> c.EfaLoopbackResult:
            self._log(Activities.RUN_EFA_LOOPBACK, input)
            if self.efa_loopbacks:
                return self.efa_loopbacks.pop(0)
            return c.EfaLoopbackResult(passed=True, summary="EFA loopback under load: 32 devices")

        @activity.defn(name=Activities.CHECK_EFA)
        async def check_efa(input: a.CheckEfaInput) -> a.CheckEfaResult:
            self._log(Activities.CHECK_EFA, input)
            if self.efa_checks:
                return self.efa_checks.pop(0)
            if self.efa_link_down_until_reboot:
                return a.CheckEfaResult(
                    passed=False, reported=True, summary="EFA link (rdmap113s0): port 1 is DOWN"
                )
            return a.CheckEfaResult(passed=True, reported=True, summary="EFA healthy")

        @activity.defn(name=Activities.RECORD_STEP)
        async def record_step(input: c.RecordStepInput) -> None:
            self._log(Activities.RECORD_STEP, input)

        @activity.defn(name=Activities.COUNT_REPLACEMENTS)
        async def count_replacements(input: c.CountReplacementsInput) -> c.ReplacementCount:
            self._log(Activities.COUNT_REPLACEMENTS, input)
            return c.ReplacementCount(count=self.replaced_in_pool)

        @activity.defn(name=Activities.DELETE_NODE_CLAIM)
        async def delete_node_claim(input: c.DeleteNodeClaimInput) -> c.DeleteNodeClaimResult:
            self._log(Activities.DELETE_NODE_CLAIM, input)
            return c.DeleteNodeClaimResult(node_claim=f"claim-{input.node}", already_gone=False)

        @activity.defn(name=Activities.WAIT_FOR_REPLACEMENT)
        async def wait_for_replacement(input: c.WaitForReplacementInput) -> c.ReplacementResult:
            self._log(Activities.WAIT_FOR_REPLACEMENT, input)
            # Overlap is measured in real time: holders of a permit replace
            # concurrently, and the count must never pass the cap.
            self.replacing += 1
            self.max_replacing = max(self.max_replacing, self.replacing)
            try:
                await asyncio.sleep(self.replace_seconds)
                if self.replace_gate is not None:
                    await self.replace_gate.wait()
            finally:
                self.replacing -= 1
            return c.ReplacementResult(old_node_gone=True, new_node=f"{input.node}-new")

        @activity.defn(name=Activities.CHECK_BREAKER)
        async def check_breaker(input: c.CheckBreakerInput) -> c.PoolHealth:
            self._log(Activities.CHECK_BREAKER, input)
            unhealthy = (
                self.pool_unhealthy_then.pop(0) if self.pool_unhealthy_then else self.pool_unhealthy
            )
            return c.PoolHealth(
                node_pool=input.node_pool, total=self.pool_total, unhealthy=unhealthy
            )

        @activity.defn(name=Activities.ESCALATE)
        async def escalate(input: c.EscalateInput) -> c.EscalationResult:
            self._log(Activities.ESCALATE, input)
            return c.EscalationResult(reference=f"TICKET-{len(self.calls)}")

        @activity.defn(name=Activities.NOTIFY_WORKLOAD_OWNER)
        async def notify_workload_owner(input: c.NotifyWorkloadOwnerInput) -> None:
            self._log(Activities.NOTIFY_WORKLOAD_OWNER, input)

        @activity.defn(name=Activities.NOTIFY_HAND_OVER)
        async def notify_hand_over(input: c.NotifyHandOverInput) -> c.NotifyHandOverResult:
            self._log(Activities.NOTIFY_HAND_OVER, input)
            return c.NotifyHandOverResult(status=200, attempt=1)

        @activity.defn(name=Activities.FIND_NODE_JOBS)
        async def find_node_jobs(input: j.FindNodeJobsInput) -> j.NodeJobs:
            self._log(Activities.FIND_NODE_JOBS, input)
            return self.node_jobs.pop(0) if len(self.node_jobs) > 1 else self.node_jobs[0]

        @activity.defn(name=Activities.REQUEST_CHECKPOINT)
        async def request_checkpoint(input: j.RequestCheckpointInput) -> j.CheckpointRequestResult:
            self._log(Activities.REQUEST_CHECKPOINT, input)
            if self.request_gate is not None:
                await self.request_gate.wait()
            pods = [
                j.AskedPod(uid=self.pod_uid(pod), pod=pod, job=job.display)
                for job in input.jobs
                if job.checkpoint_supported
                for pod in (f"{job.namespace}/{job.name}-{i}" for i in range(job.pods))
            ]
            watched = sum(job.pods_on_node for job in input.jobs)
            return j.CheckpointRequestResult(
                requested_pods=len(pods), watched_pods=watched, asked=pods
            )

        @activity.defn(name=Activities.WITHDRAW_CHECKPOINT)
        async def withdraw_checkpoint(
            input: j.WithdrawCheckpointInput,
        ) -> j.CheckpointWithdrawResult:
            self._log(Activities.WITHDRAW_CHECKPOINT, input)
            return j.CheckpointWithdrawResult(cleared_pods=sum(job.pods for job in input.jobs))

        return [
            find_node_jobs,
            request_checkpoint,
            withdraw_checkpoint,
            read_node_health,
            quarantine_node,
            release_node,
            drain_gpu_pods,
            reset_gpus,
            reboot_node,
            run_diagnostic,
            run_efa_loopback,
            check_efa,
            record_step,
            delete_node_claim,
            count_replacements,
            wait_for_replacement,
            check_breaker,
            escalate,
            notify_workload_owner,
            notify_hand_over,
        ]
