"""Helpers for the node workflow tests: worker, policy, evidence, starters."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.testing import WorkflowEnvironment

from gpu_remediation.ids import Queries, Signals, node_workflow_id, step_semaphore_id
from gpu_remediation.models import (
    ConditionEvidence,
    Evidence,
    EvidenceReport,
    ManualEvidence,
    Rung,
    XidEvidence,
)
from gpu_remediation.policy import Policy
from gpu_remediation.policy_loader import load_policy
from gpu_remediation.workflow_models import (
    HISTORY_LIMIT,
    NodeRemediationInput,
    NodeRemediationResult,
    NodeRemediationState,
    RungAttempt,
)
from tests.conftest import assert_eventually
from tests.doubles import FakeFleet
from tests.workflows.semaphore_support import child_workflow_ids, terminate_if_running
from worker import build_worker
from workflows.node_remediation import NodeRemediationWorkflow

NodeHandle = WorkflowHandle[NodeRemediationWorkflow, NodeRemediationResult]


def policy(**changes: Any) -> Policy:
    """The shipped defaults with no cooldown (so runs end right after a repair), plus changes."""
    base = load_policy()
    return base.model_copy(update={"cooldown": timedelta(0), **changes})


def xid(code: int, gpu: int | None = 0, *, recovery_action: int | None = None) -> XidEvidence:
    """An Xid seen now."""
    return XidEvidence(
        observed_at=datetime.now(UTC),
        source="test",
        xid=code,
        gpu_index=gpu,
        recovery_action=recovery_action,
    )


def condition(
    type_: str, status: str, *, cleared: bool = False, reason: str = ""
) -> ConditionEvidence:
    """A node condition seen now (cleared=True reports it went away)."""
    return ConditionEvidence(
        observed_at=datetime.now(UTC),
        source="watcher",
        type=type_,
        status=status,  # type: ignore[arg-type]
        reason=reason,
        cleared=cleared,
    )


def manual(runbook: str, *, force: bool = False, by: str = "alice") -> ManualEvidence:
    """An operator's runbook request."""
    return ManualEvidence(
        observed_at=datetime.now(UTC),
        source="cli",
        runbook=runbook,  # type: ignore[arg-type]
        requested_by=by,
        force=force,
        message="test request",
    )


class Cluster:
    """One test's view: a client, a task queue, a fake fleet and a semaphore of its own."""

    def __init__(self, env: WorkflowEnvironment, task_queue: str, fleet: FakeFleet) -> None:
        self.env = env
        self.client = env.client
        self.task_queue = task_queue
        self.fleet = fleet
        self.name = f"c{uuid.uuid4().hex[:8]}"
        self.semaphore_id = f"test-semaphore/{uuid.uuid4()}"
        self.history_limit = HISTORY_LIMIT
        """Events after which a waiting incident continues as new (its input's)."""
        self._incidents: list[NodeHandle] = []

    async def end(self) -> None:
        """Terminate the permit guards and the semaphore the test left running.

        A replaced node's incident leaves its permit to the guard, which the
        incident's close cancels; the time-skipping server applies no parent
        close policy, so there the guard stays open and the permit held. The
        semaphore's lease expiry timer (or a late cancellation of the guard)
        would then fire during a later test's time skip with no worker to run
        it, which stops the shared server's clock. For the same reason a test
        must not leave an incident held by the breaker (it looks at the pool on
        a timer): abort it. Incidents are not terminated here, so that a test
        can stop one worker and go on with another.
        """
        for incident in self._incidents:
            for guard_id in await child_workflow_ids(incident):
                await terminate_if_running(self.client, guard_id)
        await terminate_if_running(self.client, self.semaphore_id)
        for step in (Rung.STOP_GPU_WORK, Rung.GPU_RESET, Rung.REBOOT):
            step_semaphore = step_semaphore_id(self.semaphore_id, step.value)
            await terminate_if_running(self.client, step_semaphore)

    async def report(
        self,
        node: str,
        *evidence: Evidence,
        pol: Policy | None = None,
        prior_incidents: int | None = 0,
        prior_attempts: Sequence[RungAttempt] | None = (),
        report_id: str = "",
        stamp: bool = True,
    ) -> NodeHandle:
        """Signal-with-start the node's workflow with evidence, as triggers do.

        With ``stamp`` the evidence is observed "now" on the server's clock;
        without it the evidence is sent exactly as given (repeats of an alert).
        """
        if stamp:
            evidence = await self.stamped(evidence)
        try:
            return await self._signal_with_start(
                node, evidence, pol, report_id, prior_incidents, prior_attempts
            )
        except WorkflowAlreadyStartedError:
            # The time-skipping server sometimes answers one of many concurrent
            # signal-with-starts so; the run exists now, and triggers retry too.
            return await self._signal_with_start(
                node, evidence, pol, report_id, prior_incidents, prior_attempts
            )

    async def _signal_with_start(
        self,
        node: str,
        evidence: Sequence[Evidence],
        pol: Policy | None,
        report_id: str | None,
        prior_incidents: int | None,
        prior_attempts: Sequence[Any] | None,
    ) -> NodeHandle:
        handle = await self.client.start_workflow(
            NodeRemediationWorkflow.run,
            self._input(node, pol, prior_incidents, prior_attempts),
            id=node_workflow_id(self.name, node),
            task_queue=self.task_queue,
            start_signal=Signals.EVIDENCE,
            start_signal_args=[
                EvidenceReport(node=node, evidence=list(evidence), report_id=report_id)
            ],
        )
        self._incidents.append(handle)
        return handle

    async def start_carrying(
        self, node: str, report: EvidenceReport, pol: Policy | None = None
    ) -> NodeHandle:
        """Plain-start the node's workflow with ``report`` in its input, as the starter does."""
        handle = await self.client.start_workflow(
            NodeRemediationWorkflow.run,
            self._input(node, pol, 0, (), evidence=report),
            id=node_workflow_id(self.name, node),
            task_queue=self.task_queue,
        )
        self._incidents.append(handle)
        return handle

    def _input(
        self,
        node: str,
        pol: Policy | None,
        prior_incidents: int | None,
        prior_attempts: Sequence[Any] | None,
        *,
        evidence: EvidenceReport | None = None,
    ) -> NodeRemediationInput:
        return NodeRemediationInput(
            cluster=self.name,
            node=node,
            policy=pol or policy(),
            prior_incidents=prior_incidents,
            prior_attempts=None if prior_attempts is None else list(prior_attempts),
            semaphore_workflow_id=self.semaphore_id,
            evidence=evidence,
            history_limit=self.history_limit,
        )

    async def holder_and_waiter(
        self, holder_node: str, waiter_node: str, pol: Policy
    ) -> tuple[NodeHandle, NodeHandle]:
        """Two repeat offenders: the first replacing (held by the fleet's gate), the second in line.

        Needs a ``FakeFleet(replace_gate=...)`` and a policy with one permit.
        """
        holder = await self.report(holder_node, xid(79), pol=pol, prior_incidents=5)
        await assert_eventually(lambda: self.state(holder), lambda s: self.fleet.replacing == 1)
        waiter = await self.report(waiter_node, xid(79), pol=pol, prior_incidents=5)
        await assert_eventually(
            lambda: self.state(waiter), lambda s: s.waiting_for == "a replacement permit"
        )
        return holder, waiter

    async def stamped(self, evidence: Sequence[Evidence]) -> tuple[Evidence, ...]:
        """The evidence as observed now by the server's clock (time skipping moves it)."""
        now = await self.env.get_current_time()
        return tuple(e.model_copy(update={"observed_at": now}) for e in evidence)

    async def signal(self, handle: NodeHandle, node: str, *evidence: Evidence) -> None:
        """Send more evidence to a running incident."""
        report = EvidenceReport(node=node, evidence=list(await self.stamped(evidence)))
        await handle.signal(Signals.EVIDENCE, report)

    async def state(self, handle: NodeHandle) -> NodeRemediationState:
        """Query the incident's state."""
        return await handle.query(Queries.STATE, result_type=NodeRemediationState)


@asynccontextmanager
async def cluster(
    env: WorkflowEnvironment, task_queue: str, fleet: FakeFleet | None = None
) -> AsyncIterator[Cluster]:
    """Run the project's real worker wiring with the fake fleet's activities."""
    fleet = fleet or FakeFleet()
    worker = build_worker(
        env.client, fleet.activities(), task_queue, max_concurrent_workflow_tasks=100
    )
    async with worker:
        c = Cluster(env, task_queue, fleet)
        try:
            yield c
        finally:
            await c.end()


def with_rung(pol: Policy, rung: Any, **changes: Any) -> Policy:
    """``pol`` with one rung's settings changed."""
    rungs = dict(pol.rungs)
    rungs[rung] = rungs[rung].model_copy(update=changes)
    return pol.model_copy(update={"rungs": rungs})


def with_fault_class(pol: Policy, fault_class: Any, **changes: Any) -> Policy:
    """``pol`` with one fault class's settings changed."""
    classes = dict(pol.fault_classes)
    classes[fault_class] = classes[fault_class].model_copy(update=changes)
    return pol.model_copy(update={"fault_classes": classes})


async def refusal(handle: NodeHandle, update: str, arg: Any) -> str:
    """Send an update that must be refused; return the validator's message."""
    try:
        await handle.execute_update(update, arg, result_type=NodeRemediationState)
    except WorkflowUpdateFailedError as err:
        return str(err.cause)
    raise AssertionError(f"update {update} was accepted")
