"""An incident's record: evidence, decisions and attempts.

Kept apart from the workflow's control flow so that the workflow file reads as
the ladder, and so the bookkeeping rules (evidence dedup, what counts as
cleared, bounded logs) live in one place. Runs inside the workflow: the clock
is ``workflow.now()``.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from gpu_remediation.models import Evidence, EvidenceReport, ManualEvidence, Rung
    from gpu_remediation.workflow_models import Decision, RungAttempt

# Bounded so a flood of evidence or a long incident cannot outgrow the
# workflow's payload limits.
MAX_EVIDENCE = 200
MAX_DECISIONS = 500
MAX_REPORT_IDS = 1000


class IncidentRecord:
    """What the incident knows and what it has done."""

    def __init__(self, node: str) -> None:
        """Start an empty record for ``node``."""
        self.node = node
        self.evidence: list[Evidence] = []
        self.active: dict[str, Evidence] = {}
        self.decisions: list[Decision] = []
        self.attempts: list[RungAttempt] = []
        self.version = 0
        self._seen: set[tuple[str, str, bool]] = set()
        self._report_ids: list[str] = []

    def add(self, report: EvidenceReport) -> bool:
        """Add a report's new evidence; return whether anything was new.

        A repeated report id, or evidence already seen (same key, time and
        polarity), is ignored: triggers may send the same thing many times.
        """
        if report.report_id:
            if report.report_id in self._report_ids:
                return False
            self._report_ids.append(report.report_id)
            del self._report_ids[:-MAX_REPORT_IDS]
        new = False
        for item in report.evidence:
            identity = (item.key, item.observed_at.isoformat(), item.cleared)
            if identity in self._seen:
                continue
            self._seen.add(identity)
            self.evidence.append(item)
            if item.cleared:
                self.active.pop(item.key, None)
            else:
                self.active[item.key] = item
            new = True
        if new:
            self.version += 1
            del self.evidence[:-MAX_EVIDENCE]
        return new

    @property
    def cleared(self) -> bool:
        """True when every signal that was raised has been reported cleared."""
        return not self.active

    def active_evidence(self) -> list[Evidence]:
        """The evidence still in force, oldest first."""
        return list(self.active.values())

    def manual_request(self) -> ManualEvidence | None:
        """The latest operator runbook request in force, if any."""
        for item in reversed(self.active_evidence()):
            if isinstance(item, ManualEvidence) and item.runbook != "auto":
                return item
        return None

    def decide(self, stage: str, action: str, reason: str = "", rung: Rung | None = None) -> None:
        """Append a decision (what and why) to the log."""
        self.decisions.append(
            Decision(at=workflow.now(), stage=stage, action=action, reason=reason, rung=rung)
        )
        del self.decisions[:-MAX_DECISIONS]
        workflow.logger.info("%s %s: %s (%s)", self.node, stage, action, reason)

    @property
    def last_reason(self) -> str:
        """The reason of the latest decision."""
        return self.decisions[-1].reason if self.decisions else ""

    def begin(self, rung: Rung) -> int:
        """Record the start of a rung attempt; return its index."""
        self.attempts.append(RungAttempt(rung=rung, started_at=workflow.now()))
        return len(self.attempts) - 1

    def end(self, index: int, result: str) -> None:
        """Record how attempt ``index`` ended."""
        self.attempts[index] = self.attempts[index].model_copy(
            update={"ended_at": workflow.now(), "result": result}
        )

    def rungs_tried(self) -> list[Rung]:
        """Distinct rungs attempted, in first-attempt order."""
        rungs: list[Rung] = []
        for attempt in self.attempts:
            if attempt.rung not in rungs:
                rungs.append(attempt.rung)
        return rungs

    def summary(self, last: int = 20) -> str:
        """The latest decisions as markdown lines."""
        return "\n".join(
            f"- {d.at:%H:%M:%S} **{d.stage}** {d.action}" + (f": {d.reason}" if d.reason else "")
            for d in self.decisions[-last:]
        )
