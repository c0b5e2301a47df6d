"""The Helm chart renders, by Helm's own engine, valid manifests that follow its
values; its schema refuses bad values; deploy/ is its render.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from helm_python import HelmRenderError, HelmValuesError, lint

from gpu_remediation.policy import Rung
from gpu_remediation.policy_loader import parse_policy
from tests.deploy.chart_support import CHART, DEPLOY, deploy_files, documents, render
from tests.deploy.support import SCHEMAS
from tests.deploy.test_manifests import KUBERNETES_VERSIONS

# The least a user sets: the cluster's name (required).
MINIMAL = {"settings": {"GPU_REMEDIATION_CLUSTER": "prod-use1"}}
# Every optional piece on.
EVERYTHING = {
    **MINIMAL,
    "namespace": {"create": True},
    "jobExecutor": {"enabled": True},
    "temporal": {"networkPolicy": {"enabled": True}},
    "monitoring": {"enabled": True},
}
CRD_SCHEMAS = {
    "PrometheusRule": "prometheusrule-v1.json",
    "PodMonitor": "podmonitor-v1.json",
}


def _merged(*layers: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = _merged(out[key], value)
            else:
                out[key] = copy.deepcopy(value)
    return out


def _find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [doc] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def test_deploy_holds_the_charts_render() -> None:
    stale = [
        f"deploy/{target}"
        for target, text in deploy_files().items()
        if not (DEPLOY / target).exists() or (DEPLOY / target).read_text() != text
    ]
    assert not stale, f"{stale} differ from the chart: run `python -m tests.deploy.make_manifests`"


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_object_of_a_full_render_is_valid(version: str) -> None:
    docs = documents(render(EVERYTHING))
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "DaemonSet", "ConfigMap", "ValidatingAdmissionPolicy"} <= kinds
    for doc in docs:
        name = f"{doc['kind']}/{doc['metadata']['name']}"
        if doc["kind"] in CRD_SCHEMAS:
            schema = json.loads((SCHEMAS / CRD_SCHEMAS[doc["kind"]]).read_text())
            jsonschema.validate(doc, schema)
            continue
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{name} invalid for Kubernetes {version}: {err.message}")


def test_helm_lint_finds_no_error() -> None:
    report = lint(str(CHART), values=MINIMAL)
    assert report["errors"] == [], report


def test_the_defaults_install_the_services_and_the_agent_and_nothing_optional() -> None:
    rendered = render(MINIMAL)
    assert set(rendered) == {
        "agent-daemonset.yaml",
        "config.yaml",
        "network-policy.yaml",
        "rbac.yaml",
        "receiver.yaml",
        "watcher.yaml",
        "worker-admission.yaml",
        "worker.yaml",
    }


def test_a_render_without_the_cluster_name_is_refused_by_name() -> None:
    with pytest.raises(HelmRenderError, match="GPU_REMEDIATION_CLUSTER"):
        render({})


@pytest.mark.parametrize(
    "bad",
    [
        {"unknown": 1},
        {"worker": {"replicas": -1}},
        {"worker": {"replicas": "2"}},
        {"agent": {"namespace": "Not_A_Namespace"}},
        {"jobExecutor": {"namespace": "x" * 64}},
        {"settings": {"PATH": "/tmp"}},
        {"settings": {"GPU_REMEDIATION_JOB_NAMESPACE": "elsewhere"}},
        {"settings": {"GPU_REMEDIATION_LOG_FORMAT": 3}},
        {"image": {"tag": "latest; rm -rf /"}},
        {"temporal": {"port": 70000}},
        {"monitoring": {"dcgmExporter": {"job": 'x"} or vector(1) #'}}},
        {"policy": ["not", "a", "mapping"]},
    ],
)
def test_the_schema_refuses_bad_values(bad: dict[str, Any]) -> None:
    with pytest.raises(HelmValuesError):
        render(_merged(MINIMAL, bad))


def test_the_services_and_their_permissions_follow_the_release_namespace() -> None:
    docs = documents(
        render(
            _merged(EVERYTHING, {"jobExecutor": {"namespace": "gpu-ops-jobs"}}), namespace="gpu-ops"
        )
    )
    for doc in docs:
        if doc["kind"] in {"Deployment", "Service", "ConfigMap"} and doc["metadata"][
            "name"
        ].startswith("gpu-remediation"):
            assert doc["metadata"]["namespace"] == "gpu-ops", doc["metadata"]["name"]
    binding = _find(docs, "ClusterRoleBinding", "gpu-remediation-worker")
    assert binding["subjects"][0]["namespace"] == "gpu-ops"
    for policy in (d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"):
        if policy["metadata"]["name"].startswith("gpu-remediation-worker"):
            [condition] = policy["spec"]["matchConditions"]
            assert "system:serviceaccount:gpu-ops:gpu-remediation-worker" in condition["expression"]
    evictions = _find(docs, "ValidatingAdmissionPolicy", "gpu-remediation-worker-evictions")
    protected = next(v for v in evictions["spec"]["variables"] if v["name"] == "protected")
    for namespace in ("gpu-ops", "gpu-remediation-agent", "gpu-ops-jobs"):
        assert f"'{namespace}'" in protected["expression"]
    role = _find(docs, "Role", "gpu-remediation-job-executor")
    assert role["metadata"]["namespace"] == "gpu-ops-jobs"
    settings = _find(docs, "ConfigMap", "gpu-remediation-settings")
    assert settings["data"]["GPU_REMEDIATION_JOB_NAMESPACE"] == "gpu-ops-jobs"
    temporal = _find(docs, "NetworkPolicy", "temporal-frontend-clients")
    clients = temporal["spec"]["ingress"][0]["from"][1]["namespaceSelector"]["matchLabels"]
    assert clients == {"kubernetes.io/metadata.name": "gpu-ops"}


def test_the_policy_value_is_the_policy_the_services_load() -> None:
    docs = documents(
        render(_merged(MINIMAL, {"policy": {"rungs": {"gpu_reset": {"enabled": False}}}}))
    )
    text = _find(docs, "ConfigMap", "gpu-remediation-policy")["data"]["policy.yaml"]
    policy = parse_policy(text, source="chart")
    assert policy.rungs[Rung.GPU_RESET].enabled is False
    assert policy.admission.enabled is False
    assert yaml.safe_load(text)["admission"] == {"enabled": False}  # the chart's default stays


def test_a_changed_policy_or_setting_rolls_the_deployments() -> None:
    def checksums(values: dict[str, Any]) -> dict[str, str]:
        docs = documents(render(values))
        return {
            d["metadata"]["name"]: d["spec"]["template"]["metadata"]["annotations"][
                "checksum/config"
            ]
            for d in docs
            if d["kind"] == "Deployment"
        }

    before = checksums(MINIMAL)
    assert len(before) == 3
    assert checksums(MINIMAL) == before
    for change in (
        {"policy": {"admission": {"enabled": True}}},
        {"settings": {"GPU_REMEDIATION_LOG_FORMAT": "text"}},
    ):
        after = checksums(_merged(MINIMAL, change))
        assert all(after[name] != before[name] for name in before), change


def test_values_reach_images_replicas_resources_secrets_and_the_service_account() -> None:
    values = _merged(
        MINIMAL,
        {
            "image": {
                "repository": "123.dkr.ecr.us-east-1.amazonaws.com/gpu-remediation",
                "tag": "0.2.0",
            },
            "agent": {"image": {"tag": "0.2.0-npd"}},
            "worker": {
                "replicas": 3,
                "resources": {
                    "requests": {"cpu": "1", "memory": "1Gi"},
                    "limits": {"memory": "2Gi"},
                },
                "serviceAccount": {
                    "annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/r"}
                },
            },
            "receiver": {"tokenSecret": "alertmanager-token"},
            "temporal": {"apiKeySecret": "temporal-cloud"},
        },
    )
    docs = documents(render(values))
    worker = _find(docs, "Deployment", "gpu-remediation-worker")
    [container] = worker["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "123.dkr.ecr.us-east-1.amazonaws.com/gpu-remediation:0.2.0"
    assert worker["spec"]["replicas"] == 3
    assert container["resources"]["limits"] == {"memory": "2Gi"}
    api_key = next(e for e in container["env"] if e["name"] == "TEMPORAL_API_KEY")
    assert api_key["valueFrom"]["secretKeyRef"]["name"] == "temporal-cloud"
    agent = _find(docs, "DaemonSet", "gpu-health-agent")
    assert (
        agent["spec"]["template"]["spec"]["containers"][0]["image"]
        == "gpu-remediation/node-agent:0.2.0-npd"
    )
    receiver = _find(docs, "Deployment", "gpu-remediation-receiver")
    token = next(
        e
        for e in receiver["spec"]["template"]["spec"]["containers"][0]["env"]
        if e["name"] == "GPU_REMEDIATION_RECEIVER_TOKEN"
    )
    assert token["valueFrom"]["secretKeyRef"]["name"] == "alertmanager-token"
    account = _find(docs, "ServiceAccount", "gpu-remediation-worker")
    assert account["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/r"
    }
    settings = _find(docs, "ConfigMap", "gpu-remediation-settings")["data"]
    assert settings["GPU_REMEDIATION_CLUSTER"] == "prod-use1"


def test_the_alerts_read_the_configured_exporter_only_and_the_dashboard_ships() -> None:
    values = _merged(
        EVERYTHING, {"monitoring": {"dcgmExporter": {"job": "dcgm-exporter", "namespace": "dcgm"}}}
    )
    docs = documents(render(values))
    rule = _find(docs, "PrometheusRule", "gpu-remediation")
    [triggers] = [g for g in rule["spec"]["groups"] if g["name"] == "gpu-remediation-triggers"]
    for alert in triggers["rules"]:
        assert alert["expr"].count('job="dcgm-exporter", namespace="dcgm"') >= 1, alert["alert"]
        assert "nvidia-dcgm-exporter" not in alert["expr"]
    xid = next(a for a in triggers["rules"] if a["alert"] == "GpuXidError")
    assert xid["annotations"]["xid"] == "{{ $value }}"  # Prometheus' template, untouched by Helm
    dashboard = _find(docs, "ConfigMap", "gpu-remediation-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads((CHART / "dashboards" / "gpu-remediation.json").read_text())
    assert json.loads(dashboard["data"]["gpu-remediation.json"]) == shipped


def test_nvsentinel_adds_the_watchers_flag_and_only_the_rules_its_relay_needs() -> None:
    def watcher(values: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
        docs = documents(render(values))
        deployment = _find(docs, "Deployment", "gpu-remediation-watcher")
        role = _find(docs, "ClusterRole", "gpu-remediation-watcher")
        return deployment["spec"]["template"]["spec"]["containers"][0]["args"], role["rules"]

    args, rules = watcher(MINIMAL)
    assert "--nvsentinel" not in args
    assert all("nvsentinel.dgxc.nvidia.com" not in r["apiGroups"] for r in rules)
    args, rules = watcher(_merged(MINIMAL, {"nvsentinel": {"enabled": True}}))
    assert args[-1] == "--nvsentinel"
    granted = {
        (resource, verb)
        for r in rules
        if r["apiGroups"] == ["nvsentinel.dgxc.nvidia.com"]
        for resource in r["resources"]
        for verb in r["verbs"]
    }
    assert granted == {
        ("externalremediationrequests", "list"),
        ("externalremediationrequests", "watch"),
        ("externalremediationrequests", "patch"),
        ("externalremediationrequests/status", "patch"),
    }
