"""What operators see of a node incident: current details, search attributes, state.

The Temporal UI shows the markdown header kept by ``_update_details`` and the
search attributes upserted on each stage and rung; the CLI's ``status`` reads the
same state through the ``state`` query.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from gpu_remediation.incident_summary import summary_line
    from gpu_remediation.jobs import describe_jobs
    from gpu_remediation.models import Rung
    from gpu_remediation.search_attributes import SA_OUTCOME, SA_RUNG
    from gpu_remediation.workflow_models import NodeRemediationResult, NodeRemediationState
    from workflows import metrics

from workflows.node_incident import NodeIncident

OUTCOME_IN_COOLDOWN_PATCH = "outcome-in-cooldown"


class IncidentView(NodeIncident):
    """Keeps the incident readable: stage, rung, details, search attributes, result."""

    def _set_stage(self, stage: str) -> None:
        self._stage = stage
        self._update_details()

    def _set_rung(self, rung: Rung) -> None:
        self._rung = rung
        self._stage = rung.value
        workflow.upsert_search_attributes([SA_RUNG.value_set(rung.value)])
        self._update_details()

    def _headline(self) -> str:
        """The incident in one line: the words ``remediate status`` shows too."""
        return summary_line(
            self._input.node,
            self._pool,
            self._fault.value if self._fault else None,
            rung=self._rung.value if self._rung else None,
            outcome=self._outcome.value if self._outcome else None,
        )

    def _update_details(self) -> None:
        parts = [f"stage **{self._stage}**", f"rung **{self._rung or '-'}**"]
        if self._waiting_for:
            parts.append(f"waiting for **{self._waiting_for}**")
        if self._paused:
            parts.append("**PAUSED**")
        if self._dry_run:
            parts.append("dry run")
        if self._outcome:
            parts.append(f"outcome **{self._outcome}**")
        header = f"### {self._headline()}\n\n" + " · ".join(parts)
        if self._jobs:
            header += f"\n\njobs: {describe_jobs(self._jobs)}"
            if self._checkpoint:
                header += f" · checkpoint: **{self._checkpoint}**"
        workflow.set_current_details(header + "\n\n" + self._record.summary())

    async def _wait_while_paused(self) -> None:
        if not self._paused:
            return
        self._waiting_for = "resume (paused by an operator)"
        self._update_details()
        await workflow.wait_condition(lambda: not self._paused or self._abort is not None)
        self._waiting_for = None

    def _snapshot(self) -> NodeRemediationState:
        """The incident's full state, as the ``state`` query returns it."""
        return NodeRemediationState(
            cluster=self._input.cluster,
            node=self._input.node,
            node_pool=self._pool,
            fault_class=self._fault,
            rung=self._rung,
            stage=self._stage,
            waiting_for=self._waiting_for,
            awaiting_approval=self._awaiting_approval,
            paused=self._paused,
            dry_run=self._dry_run,
            evidence=list(self._record.evidence),
            active_evidence=self._record.active_evidence(),
            attempts=list(self._record.attempts),
            decisions=list(self._record.decisions),
            outcome=self._outcome,
            started_at=self._started_at,
            jobs=list(self._jobs),
            checkpoint=self._checkpoint,
        )

    def _show_outcome(self) -> None:
        """Put the outcome in the list while the run stays open (cooldown).

        Without it the UI's list shows no outcome for a repaired node until its
        cooldown ends. Behind a patch: it adds a command.
        """
        if self._outcome is not None and workflow.patched(OUTCOME_IN_COOLDOWN_PATCH):
            workflow.upsert_search_attributes([SA_OUTCOME.value_set(self._outcome.value)])

    def _withdraw_outcome(self) -> None:
        """The fault came back in cooldown: the incident has no outcome again."""
        if workflow.patched(OUTCOME_IN_COOLDOWN_PATCH):
            workflow.upsert_search_attributes([SA_OUTCOME.value_unset()])

    def _finish(self) -> NodeRemediationResult:
        assert self._outcome is not None
        self._set_stage("closed")
        metrics.incident_closed(self._fault_value, self._outcome, self._pool, self._started_at)
        workflow.upsert_search_attributes([SA_OUTCOME.value_set(self._outcome.value)])
        now = workflow.now()
        return NodeRemediationResult(
            node=self._input.node,
            outcome=self._outcome,
            fault_class=self._fault,
            rungs_tried=self._record.rungs_tried(),
            attempts=self._record.attempts,
            started_at=self._started_at,
            ended_at=now,
            duration_s=(now - self._started_at).total_seconds(),
            replaced_by=self._replaced_by,
            escalation_reference=self._escalation_reference,
        )
