"""Each fault is given the urgency NVIDIA's guidance implies (issue 16's defaults)."""

from __future__ import annotations

import pytest

from gpu_remediation.classifier import classify
from gpu_remediation.models import Evidence, Urgency
from gpu_remediation.policy import Policy
from gpu_remediation.policy_loader import load_policy
from tests.gpu_remediation.evidence_factories import condition, dcgm, xid


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy()


def urgency(policy: Policy, evidence: Evidence) -> Urgency:
    return policy.fault_class(classify([evidence], policy).fault_class).urgency


@pytest.mark.parametrize(
    ("what", "evidence"),
    [
        ("Xid 79, the GPU fell off the bus", xid(79)),
        ("Xid 95, an uncontained memory error", xid(95)),
        ("DCGM 81, an uncontained error", dcgm(81)),
        ("the node is NotReady", condition("Ready", "False", "KubeletNotReady")),
    ],
)
def test_a_gone_or_corrupting_gpu_or_a_dead_node_does_not_wait(
    policy: Policy, what: str, evidence: Evidence
) -> None:
    assert urgency(policy, evidence) == Urgency.IMMEDIATE, what


@pytest.mark.parametrize(
    ("what", "evidence"),
    [("Xid 63, row remap pending", xid(63)), ("DCGM 85, pending row remap", dcgm(85))],
)
def test_a_pending_row_remap_waits_until_the_job_is_idle(
    policy: Policy, what: str, evidence: Evidence
) -> None:
    assert urgency(policy, evidence) == Urgency.WHEN_IDLE, what


def test_a_contained_double_bit_error_asks_the_job_to_checkpoint_first(policy: Policy) -> None:
    assert urgency(policy, xid(48)) == Urgency.CHECKPOINT_FIRST
