"""Issue 37: a job's straggler report is its own fault class, evidence and never a verdict.

It diagnoses an idle node at most; any other evidence names the incident; the
policy refuses a straggler class that could evict, reset, reboot or replace
(its evidence is written by a tenant), and the baselines do not read it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_remediation.classifier import classify
from gpu_remediation.models import FaultClass as FC
from gpu_remediation.models import Rung, Urgency
from gpu_remediation.policy import Policy
from gpu_remediation.policy_loader import PolicyError, load_policy, parse_policy
from tests.gpu_remediation.evidence_factories import condition, straggler

POLICIES = Path(__file__).parents[2] / "policies"


@pytest.fixture
def policy() -> Policy:
    return parse_policy("{}")


def test_alone_it_diagnoses_an_idle_node_and_goes_no_further(policy: Policy) -> None:
    result = classify([straggler()], policy)
    assert (result.fault_class, result.start_rung, result.max_rung) == (
        FC.STRAGGLER,
        Rung.DIAGNOSE,
        Rung.DIAGNOSE,
    )
    assert policy.fault_class(FC.STRAGGLER).urgency == Urgency.IDLE_ONLY
    assert policy.fault_class(FC.STRAGGLER).diag_level == 3
    assert "job ml/llm reports the node 30% slower than its gang's median" in result.reasons[0]


def test_beside_any_other_evidence_the_other_names_the_incident(policy: Policy) -> None:
    unknown = condition("SomethingOdd", "True", "Odd", "")
    slow = condition("GpuDegraded", "True", "GpuDegradationDetected", "PCIe x8 of x16")
    assert classify([straggler(), unknown], policy).fault_class == FC.UNKNOWN
    assert classify([straggler(), slow], policy).fault_class == FC.GPU_DEGRADED


def test_a_cleared_report_is_not_a_problem(policy: Policy) -> None:
    assert classify([straggler(cleared=True)], policy).start_rung is None


@pytest.mark.parametrize(
    "shape",
    [
        "{start_rung: gpu_reset, max_rung: gpu_reset, urgency: idle_only}",
        "{start_rung: diagnose, max_rung: replace, urgency: idle_only}",
        "{start_rung: diagnose, max_rung: diagnose, urgency: when_idle}",
        "{start_rung: diagnose, max_rung: diagnose, urgency: immediate}",
        "{start_rung: replace, max_rung: escalate}",
    ],
)
def test_the_policy_refuses_a_straggler_class_that_could_disrupt_work(shape: str) -> None:
    with pytest.raises(PolicyError, match="a job's straggler report is a tenant's word"):
        parse_policy(f"fault_classes: {{straggler: {shape}}}")


def test_a_pool_override_cannot_make_it_disruptive_either() -> None:
    text = "pools: {p5: {fault_classes: {straggler: {start_rung: reboot, max_rung: reboot}}}}"
    with pytest.raises(PolicyError, match="a tenant's word"):
        parse_policy(text)


@pytest.mark.parametrize(
    "shape",
    [
        "{start_rung: null}",
        "{start_rung: escalate, max_rung: escalate}",
        "{start_rung: diagnose, max_rung: diagnose, urgency: idle_only}",
    ],
)
def test_the_safe_shapes_are_accepted(shape: str) -> None:
    parse_policy(f"fault_classes: {{straggler: {shape}}}")


@pytest.mark.parametrize("baseline", ["replace-always", "reboot-then-replace"])
def test_the_karpenter_like_baselines_read_no_step_times(baseline: str) -> None:
    pol = load_policy(POLICIES / f"{baseline}.yaml")
    assert not pol.triggers.stragglers.enabled
    assert pol.fault_class(FC.STRAGGLER).start_rung is None


def test_the_idle_only_urgency_asks_no_job_to_checkpoint() -> None:
    assert not Urgency.IDLE_ONLY.asks_jobs
    assert all(u.asks_jobs for u in Urgency if u != Urgency.IDLE_ONLY)
