"""deploy/'s side of node admission: the NodePool's startup taint, the deployed gate's switch."""

from __future__ import annotations

from gpu_remediation.ids import STARTUP_TAINT_KEY
from gpu_remediation.policy_loader import load_policy
from tests.deploy.support import DEPLOY, yaml_documents


def test_the_example_nodepool_registers_nodes_behind_the_startup_taint() -> None:
    (pool,) = yaml_documents(DEPLOY / "karpenter" / "nodepool-gpu.yaml")
    assert (pool["apiVersion"], pool["kind"]) == ("karpenter.sh/v1", "NodePool")
    taints = pool["spec"]["template"]["spec"]["startupTaints"]
    assert {"key": STARTUP_TAINT_KEY, "effect": "NoSchedule"} in taints
    # Not a regular taint: Karpenter would then expect it to stay.
    assert "taints" not in pool["spec"]["template"]["spec"]


def test_the_deployed_policy_keeps_the_gate_off_until_the_nodepools_carry_the_taint() -> None:
    policy = load_policy(DEPLOY / "config" / "policy.yaml")
    assert not policy.admission.enabled
    assert not policy.admission.nccl.enabled


def test_the_nodepool_example_is_not_applied_with_the_rest() -> None:
    (kustomization,) = yaml_documents(DEPLOY / "kustomization.yaml")
    assert not any("karpenter" in r for r in kustomization["resources"])
