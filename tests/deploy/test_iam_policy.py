"""The worker's IAM policy: only this cluster's GPU instances, only the project's document.

deploy/aws/iam-policy.json, read as IAM would: every statement that reaches an
EC2 instance is conditioned on the cluster's and the GPU NodePool's tags, SSM
commands run only through the project's Command document (an explicit deny
covers every other, AWS-RunShellScript included), and the policy grants exactly
the AWS calls the code makes.
"""

from __future__ import annotations

import json
import re
from typing import Any

from gpu_remediation.host_command import HOST_COMMAND_DOCUMENT
from gpu_remediation.settings import Settings
from tests.deploy.support import DEPLOY, REPO

POLICY = json.loads((DEPLOY / "aws" / "iam-policy.json").read_text())
README = (DEPLOY / "aws" / "README.md").read_text()
INSTANCE_ARN = "arn:aws:ec2:<region>:<account-id>:instance/*"
DOCUMENT_ARN = f"arn:aws:ssm:<region>:<account-id>:document/{HOST_COMMAND_DOCUMENT}"
CLUSTER_TAG = "ResourceTag/kubernetes.io/cluster/<cluster-name>"
POOL_TAG = "ResourceTag/karpenter.sh/nodepool"
AWS_CALL = re.compile(r"self\._(ssm|ec2)\.(\w+)\b")


def listed(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def statements(effect: str) -> list[dict[str, Any]]:
    return [s for s in POLICY["Statement"] if s["Effect"] == effect]


def condition_keys(statement: dict[str, Any]) -> dict[str, Any]:
    """Condition key (lower-cased) -> expected values, over every operator."""
    return {
        key.lower(): values
        for operator in statement.get("Condition", {}).values()
        for key, values in operator.items()
    }


def test_no_statement_names_aws_run_shell_script_or_any_document_but_the_projects() -> None:
    text = json.dumps(POLICY)
    assert "AWS-RunShellScript" not in text
    for statement in statements("Allow"):
        for resource in listed(statement["Resource"]):
            if ":document/" in resource:
                assert resource == DOCUMENT_ARN
    assert Settings().ssm_document == HOST_COMMAND_DOCUMENT


def test_every_other_document_is_denied_even_if_another_policy_allows_it() -> None:
    [deny] = statements("Deny")
    assert listed(deny["Action"]) == ["ssm:SendCommand"]
    assert "Resource" not in deny
    assert set(deny["NotResource"]) == {DOCUMENT_ARN, INSTANCE_ARN}


def test_every_instance_action_is_conditioned_on_the_clusters_gpu_node_tags() -> None:
    reaching_instances = [
        s
        for s in statements("Allow")
        if any(":instance/" in r or r == "*" for r in listed(s["Resource"]))
        and any(a in ("ec2:RebootInstances", "ssm:SendCommand") for a in listed(s["Action"]))
    ]
    assert {a for s in reaching_instances for a in listed(s["Action"])} == {
        "ec2:RebootInstances",
        "ssm:SendCommand",
    }
    for statement in reaching_instances:
        assert listed(statement["Resource"]) == [INSTANCE_ARN], statement["Sid"]
        keys = condition_keys(statement)
        prefix = "aws:" if listed(statement["Action"]) == ["ec2:RebootInstances"] else "ssm:"
        assert keys[(prefix + CLUSTER_TAG).lower()] == "owned", statement["Sid"]
        assert keys[(prefix + POOL_TAG).lower()] == ["<gpu-nodepool>"], statement["Sid"]
        assert statement["Condition"]["StringEquals"], statement["Sid"]


def test_no_write_is_granted_on_every_resource_or_in_every_region() -> None:
    for statement in statements("Allow"):
        for action in listed(statement["Action"]):
            assert "*" not in action, action
        resources = listed(statement["Resource"])
        if "*" in resources:
            # Only the two reads that support no resource-level scoping.
            assert set(listed(statement["Action"])) <= {
                "ssm:GetCommandInvocation",
                "ssm:ListCommands",
            }
        for resource in resources:
            assert ":*:" not in resource, resource  # no wildcard region or account


def test_the_policy_grants_exactly_the_aws_calls_the_code_makes() -> None:
    called = set()
    for path in (REPO / "activities").glob("*.py"):
        for service, method in AWS_CALL.findall(path.read_text()):
            called.add(f"{service}:" + "".join(part.title() for part in method.split("_")))
    assert called, "no AWS call found (has the pattern gone stale?)"
    granted = {a for s in statements("Allow") for a in listed(s["Action"])}
    assert granted == called


def test_every_placeholder_is_documented_beside_the_policy() -> None:
    placeholders = set(re.findall(r"<[a-z-]+>", json.dumps(POLICY)))
    assert placeholders == {"<region>", "<account-id>", "<cluster-name>", "<gpu-nodepool>"}
    for placeholder in placeholders:
        assert f"`{placeholder}`" in README, placeholder
    assert "aws ssm create-document" in README
    assert "gpu-remediation-host-command.json" in README
