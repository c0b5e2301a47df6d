"""The evidence reports a node incident's run received, read from its history.

A report reaches an incident in one of two ways (``triggers.starter``): in the
input of the start that opened it, or as an ``add_evidence`` signal. Tests,
benchmarks and the chaos invariants that ask "did this report arrive, and
when" read both through :func:`received_reports`, so none of them misses the
first report of an incident by looking only at signals.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from temporalio.api.history.v1 import HistoryEvent

from gpu_remediation.ids import NODE_WORKFLOW_TYPE, Signals
from gpu_remediation.models import EvidenceReport
from gpu_remediation.workflow_models import NodeRemediationInput


def received_reports(events: Iterable[HistoryEvent]) -> list[tuple[EvidenceReport, datetime]]:
    """Each evidence report of a run, in order, with when the server recorded it.

    Args:
        events: The run's history events (``WorkflowHandle.fetch_history``);
            a run of another workflow type yields only its evidence signals.

    Returns:
        The report its start carried, if any, then each ``add_evidence``
        signal's report, each with the server's event time.

    Raises:
        pydantic.ValidationError: If a payload is not a valid input or report
            (the pydantic data converter writes them as JSON).
    """
    found: list[tuple[EvidenceReport, datetime]] = []
    for event in events:
        at = event.event_time.ToDatetime(tzinfo=UTC)
        if event.HasField("workflow_execution_started_event_attributes"):
            started_attrs = event.workflow_execution_started_event_attributes
            payloads = started_attrs.input.payloads
            # Other workflows under a node's id prefix (its permit guards) start
            # with other inputs: only an incident's start can carry evidence.
            if payloads and started_attrs.workflow_type.name == NODE_WORKFLOW_TYPE:
                started = NodeRemediationInput.model_validate_json(payloads[0].data)
                if started.evidence is not None:
                    found.append((started.evidence, at))
        elif event.HasField("workflow_execution_signaled_event_attributes"):
            signal = event.workflow_execution_signaled_event_attributes
            if signal.signal_name == Signals.EVIDENCE and signal.input.payloads:
                report = EvidenceReport.model_validate_json(signal.input.payloads[0].data)
                found.append((report, at))
    return found
