"""The decision-log wording the summaries count by: each recogniser accepts its maker."""

from __future__ import annotations

from gpu_remediation import decision_log as words
from gpu_remediation.models import Urgency


def test_an_asked_to_checkpoint_action_is_recognised_and_a_waiting_one_is_not() -> None:
    assert words.is_asked_to_checkpoint(words.asked_to_checkpoint("training/llm (4 nodes)"))
    assert not words.is_asked_to_checkpoint(words.WAITING_FOR_JOBS)


def test_only_the_when_idle_urgency_reads_as_deferred() -> None:
    assert words.is_deferred(words.urgency_reason(Urgency.WHEN_IDLE, "row_remap_pending") + "; x")
    for urgency in (Urgency.IMMEDIATE, Urgency.CHECKPOINT_FIRST):
        assert not words.is_deferred(words.urgency_reason(urgency, "gpu_reset_required"))


def test_a_deleted_node_claim_action_is_recognised_whatever_the_claim_is_called() -> None:
    assert words.is_deleted_node_claim(words.deleted_node_claim("h100-0007"))
    assert words.is_deleted_node_claim(words.deleted_node_claim(None))
    assert not words.is_deleted_node_claim(words.REPLACED)


def test_a_hand_over_is_recognised_whatever_its_ticket() -> None:
    assert words.is_handed_over(words.handed_over("needs-human label and event"))
    assert not words.is_handed_over("would escalate to a human")
