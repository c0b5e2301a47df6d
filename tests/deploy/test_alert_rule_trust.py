"""The shipped alert rules fire on dcgm-exporter's series only and set what the receiver trusts.

An alert routed to the receiver can reboot or replace a node. Each of its
selectors must therefore name the exporter's job and namespace (set in
deploy/monitoring/exporter.env and written into every selector by the
kustomization's replacements), and every label the receiver's classifier reads
as a verdict must be set or cleared by the rule itself, never left to the
series (docs/security.md, "Alerts").
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml

from gpu_remediation import catalog
from tests.deploy.manifests import monitoring
from tests.deploy.support import DEPLOY, REPO, yaml_documents

MONITORING = DEPLOY / "monitoring"
EXPORTER_ENV = MONITORING / "exporter.env"
# Labels Prometheus itself controls on every alert: alertname is the rule's
# name, and __name__ is dropped from alerting rules' results.
SET_BY_PROMETHEUS = {"alertname", "__name__"}
# Labels whose value the classifier takes as (part of) its verdict.
VERDICT_LABELS = (
    {catalog.ALERT_FAULT_CLASS_LABEL, *catalog.ALERT_XID_LABELS, *catalog.ALERT_METRIC_LABELS}
) - SET_BY_PROMETHEUS
# Set by the rule to a fixed value, or cleared (Prometheus drops an empty label).
MUST_BE_CLEARED = {catalog.ALERT_FAULT_CLASS_LABEL, *catalog.ALERT_XID_LABELS}


def exporter_env(path: Path = EXPORTER_ENV) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            values[key] = value
    return values


def routed(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The alerting rules routed to the receiver (label remediate="true")."""
    return [
        rule
        for doc in docs
        if doc["kind"] == "PrometheusRule"
        for group in doc["spec"]["groups"]
        for rule in group["rules"]
        if rule.get("labels", {}).get("remediate") == "true"
    ]


def vector_selectors(node: Any) -> list[Any]:
    """Every vector selector of a parsed expression (those inside range selectors too)."""
    if isinstance(node, promql_parser.VectorSelector):
        return [node]
    found: list[Any] = []
    for attr in ("args", "expr", "lhs", "rhs", "vector_selector", "param"):
        child = getattr(node, attr, None)
        for item in child if isinstance(child, list) else [child]:
            if item is not None and not isinstance(item, str | int | float):
                found += vector_selectors(item)
    return found


def assert_selects_only(rules: list[dict[str, Any]], job: str, namespace: str) -> None:
    assert rules, "no alert is routed to the receiver"
    for rule in rules:
        selectors = vector_selectors(promql_parser.parse(rule["expr"]))
        assert selectors, rule["alert"]
        for selector in selectors:
            matchers = selector.matchers
            assert not matchers.or_matchers, f"{rule['alert']}: an 'or' matcher widens it"
            equal = {
                m.name: m.value for m in matchers.matchers if m.op == promql_parser.MatchOp.Equal
            }
            assert equal.get("job") == job, f"{rule['alert']}: {selector.prettify()}"
            assert equal.get("namespace") == namespace, f"{rule['alert']}: {selector.prettify()}"


def test_every_selector_of_a_routed_alert_names_the_exporters_job_and_namespace() -> None:
    env = exporter_env()
    assert_selects_only(
        routed(monitoring()), env["DCGM_EXPORTER_JOB"], env["DCGM_EXPORTER_NAMESPACE"]
    )


def test_every_label_the_classifier_trusts_is_set_or_cleared_by_the_rule() -> None:
    assert {"fault_class", "xid", "value", "metric"} <= VERDICT_LABELS
    for rule in routed(monitoring()):
        labels = rule["labels"]
        missing = VERDICT_LABELS - labels.keys()
        assert not missing, f"{rule['alert']} leaves {sorted(missing)} to the series"
        for name in MUST_BE_CLEARED:
            assert labels[name] == "", f"{rule['alert']} must clear {name}"
        # The metric label is the rule's own constant, never a template of the series.
        assert labels["metric"] in (catalog.XID_METRIC, *catalog.ALERT_METRIC_CLASSES)
        assert "{{" not in "".join(labels.values()), rule["alert"]


def test_the_xid_reaches_the_receiver_only_through_the_rules_annotation() -> None:
    [xid] = [r for r in routed(monitoring()) if r["labels"]["metric"] == catalog.XID_METRIC]
    assert xid["annotations"]["xid"] == "{{ $value }}"
    assert xid["labels"]["xid"] == ""
    assert xid["labels"]["value"] == ""


# ------------------------------------------------------- settable matchers


def _field(doc: Any, path: str) -> tuple[Any, str | int]:
    """The container and key of a kustomize field path such as ``a.[k=v].b``."""
    *parents, last = path.split(".")
    for part in parents:
        if part.startswith("[") and part.endswith("]"):
            key, _, value = part[1:-1].partition("=")
            (doc,) = [item for item in doc if item.get(key) == value]
        else:
            doc = doc[part]
    return doc, last


def apply_replacements(
    kustomization: dict[str, Any], docs: list[dict[str, Any]], values: dict[str, str]
) -> list[dict[str, Any]]:
    """Kustomize's replacements (the options deploy/monitoring uses) with ``values`` as the
    generated ConfigMap's data.
    """
    [generator] = kustomization["configMapGenerator"]
    assert generator["options"]["annotations"]["config.kubernetes.io/local-config"] == "true"
    docs = copy.deepcopy(docs)
    for replacement in kustomization["replacements"]:
        source = replacement["source"]
        assert (source["kind"], source["name"]) == ("ConfigMap", generator["name"])
        value = values[source["fieldPath"].removeprefix("data.")]
        for target in replacement["targets"]:
            select = target["select"]
            [doc] = [
                d
                for d in docs
                if d["kind"] == select["kind"] and d["metadata"]["name"] == select["name"]
            ]
            options = target["options"]
            for path in target["fieldPaths"]:
                container, key = _field(doc, path)
                parts = container[key].split(options["delimiter"])
                parts[options["index"]] = value
                container[key] = options["delimiter"].join(parts)
    return docs


def _monitoring_kustomization() -> dict[str, Any]:
    (kustomization,) = yaml_documents(MONITORING / "kustomization.yaml")
    return kustomization


def test_the_shipped_matchers_are_exporter_env_s_values() -> None:
    # What kustomize writes equals what the file says: applying the rule file
    # alone, or the kustomization with exporter.env unchanged, is the same rule.
    kustomization = _monitoring_kustomization()
    assert kustomization["resources"] == ["prometheus-rule.yaml", "pod-monitor.yaml"]
    [generator] = kustomization["configMapGenerator"]
    assert generator["envs"] == [EXPORTER_ENV.name]
    docs = monitoring()
    assert apply_replacements(kustomization, docs, exporter_env()) == docs


def test_exporter_env_s_job_and_namespace_reach_every_selector_of_the_routed_alerts() -> None:
    values = {"DCGM_EXPORTER_JOB": "job-sentinel", "DCGM_EXPORTER_NAMESPACE": "ns-sentinel"}
    built = apply_replacements(_monitoring_kustomization(), monitoring(), values)
    assert_selects_only(routed(built), "job-sentinel", "ns-sentinel")

    # Nothing else changed: the health alerts keep their own jobs.
    def health(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        groups = [g for d in docs if d["kind"] == "PrometheusRule" for g in d["spec"]["groups"]]
        return [g for g in groups if g["name"] != "gpu-remediation-triggers"]

    assert health(built) == health(monitoring())


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (kustomize) not installed")
def test_kubectl_kustomize_writes_exporter_env_into_every_selector(tmp_path: Path) -> None:
    folder = tmp_path / "monitoring"
    shutil.copytree(MONITORING, folder)
    (folder / EXPORTER_ENV.name).write_text(
        "DCGM_EXPORTER_JOB=job-sentinel\nDCGM_EXPORTER_NAMESPACE=ns-sentinel\n"
    )
    kubectl = shutil.which("kubectl")
    assert kubectl is not None
    out = subprocess.run(
        [kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    built = [d for d in yaml.safe_load_all(out) if d]
    assert {d["kind"] for d in built} == {"PrometheusRule", "PodMonitor"}  # no ConfigMap applied
    assert_selects_only(routed(built), "job-sentinel", "ns-sentinel")


def test_the_docs_say_how_to_set_the_exporter_selector() -> None:
    security = (REPO / "docs" / "security.md").read_text()
    alerts = security.split("## Alerts", 1)[1].split("\n## ", 1)[0]
    assert "exporter.env" in alerts
    assert "monitoring.dcgmExporter.job" in alerts  # the chart's way
    readme = (REPO / "README.md").read_text()
    assert "kubectl apply -k deploy/monitoring/" in readme
    assert "monitoring.dcgmExporter.job=" in readme
