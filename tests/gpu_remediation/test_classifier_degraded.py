"""Issue 37: a slow GPU (the agent's GpuDegraded condition) is its own fault class.

It starts at a GPU reset, waits for the job to be idle or checkpoint (a slow
node still works), and never names an incident that also has a fault: the
fault's class does. The baselines modelled on Karpenter's node repair do not
watch the condition at all.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_remediation.classifier import classify
from gpu_remediation.models import FaultClass as FC
from gpu_remediation.models import Rung, Urgency
from gpu_remediation.policy import Policy
from gpu_remediation.policy_loader import load_policy, parse_policy
from gpu_remediation.rungs import ComponentCheck, check_for
from tests.gpu_remediation.evidence_factories import condition

POLICIES = Path(__file__).parents[2] / "policies"
SLOW = "degraded on GPU 2 (0000:53:00.0): PCIe link width x8 of x16"


@pytest.fixture
def policy() -> Policy:
    return parse_policy("{}")


def test_a_degraded_gpu_starts_at_a_reset_when_the_job_is_idle(policy: Policy) -> None:
    result = classify([condition("GpuDegraded", "True", "GpuDegradationDetected", SLOW)], policy)
    assert (result.fault_class, result.start_rung) == (FC.GPU_DEGRADED, Rung.GPU_RESET)
    assert policy.fault_class(FC.GPU_DEGRADED).urgency == Urgency.WHEN_IDLE
    assert "PCIe link width x8 of x16" in result.reasons[0]


def test_a_cleared_degradation_is_not_a_problem(policy: Policy) -> None:
    result = classify([condition("GpuDegraded", "False", "GpuNotDegraded", "")], policy)
    assert result.start_rung is None


def test_a_fault_beside_a_slowdown_names_the_incident(policy: Policy) -> None:
    slow = condition("GpuDegraded", "True", "GpuDegradationDetected", SLOW)
    xid = condition("GpuHealthProblem", "True", "GpuXidError", "Xid 48 on GPU 2: double-bit ECC")
    assert classify([slow, xid], policy).fault_class == FC.GPU_RESET_REQUIRED


def test_the_watcher_reports_the_condition_by_default(policy: Policy) -> None:
    watched = {c.type: c for c in policy.triggers.conditions}
    assert watched["GpuDegraded"].problem_statuses == ["True"]


@pytest.mark.parametrize("baseline", ["replace-always", "reboot-then-replace"])
def test_the_karpenter_like_baselines_never_see_a_slow_node(baseline: str) -> None:
    pol = load_policy(POLICIES / f"{baseline}.yaml")
    assert "GpuDegraded" not in {c.type for c in pol.triggers.conditions}
    assert pol.fault_class(FC.GPU_DEGRADED).start_rung is None


def test_no_automation_hands_a_slow_node_to_a_person() -> None:
    pol = load_policy(POLICIES / "no-automation.yaml")
    assert pol.fault_class(FC.GPU_DEGRADED).start_rung == Rung.ESCALATE


def test_a_degraded_efa_port_starts_at_a_reboot_when_the_job_is_idle(policy: Policy) -> None:
    message = (
        "Degraded on EFA rdmap129s0/1 [efa_counter:retrans_timeout_events]: 60+/min, "
        "expected under 60/min (over 300+ s)"
    )
    evidence = condition("EfaDegraded", "True", "EfaDegradationDetected", message)
    result = classify([evidence], policy)
    assert (result.fault_class, result.start_rung) == (FC.EFA_DEGRADED, Rung.REBOOT)
    assert policy.fault_class(FC.EFA_DEGRADED).urgency == Urgency.WHEN_IDLE
    assert check_for(FC.EFA_DEGRADED) == ComponentCheck.EFA_CHECK


@pytest.mark.parametrize("baseline", ["replace-always", "reboot-then-replace"])
def test_the_karpenter_like_baselines_never_see_a_degraded_efa_port(baseline: str) -> None:
    pol = load_policy(POLICIES / f"{baseline}.yaml")
    assert "EfaDegraded" not in {c.type for c in pol.triggers.conditions}
    assert pol.fault_class(FC.EFA_DEGRADED).start_rung is None
