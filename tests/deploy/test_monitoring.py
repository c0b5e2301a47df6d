"""The PrometheusRule, the PodMonitor and the Grafana dashboard: valid, and built on
metric names the code really exports.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import promql_parser
import pytest

from gpu_remediation import catalog
from gpu_remediation.models import FaultClass
from tests.deploy.manifests import deployments, monitoring
from tests.deploy.support import DEPLOY, REPO, SCHEMAS
from triggers import metrics as trigger_metrics
from workflows import admission_metrics
from workflows import metrics as workflow_metrics

DASHBOARD = json.loads((DEPLOY / "grafana" / "gpu-remediation.json").read_text())
RULES = [d for d in monitoring() if d["kind"] == "PrometheusRule"]
ALERTS = [rule for doc in RULES for group in doc["spec"]["groups"] for rule in group["rules"]]

# The Temporal SDK's metrics the dashboard and alerts use (names as exported by the
# worker; test_metrics_ladder.py sees those a normal run emits on a real scrape).
SDK_METRICS = {
    "temporal_workflow_task_execution_latency_bucket",
    "temporal_activity_execution_latency_bucket",
    "temporal_activity_execution_failed",
    "temporal_workflow_task_execution_failed",
    "temporal_worker_task_slots_available",
    "temporal_workflow_completed",
    "temporal_sticky_cache_size",
}
DCGM_METRICS = {
    catalog.XID_METRIC,
    catalog.ROW_REMAP_FAILURE_METRIC,
    catalog.UNCORRECTABLE_REMAPPED_ROWS_METRIC,
}


def _with_series(names: set[str]) -> set[str]:
    return names | {n + suffix for n in names for suffix in ("_bucket", "_sum", "_count")}


OUR_METRICS = _with_series(
    set(workflow_metrics.WORKFLOW_METRICS)
    | set(admission_metrics.ADMISSION_METRICS)
    | {
        getattr(trigger_metrics, name)
        for name in dir(trigger_metrics)
        if name.isupper()
        and name not in ("PREFIX",)
        and isinstance(getattr(trigger_metrics, name), str)
    }
)


def selectors(node: Any) -> set[str]:
    """Metric names selected anywhere in a parsed PromQL expression."""
    if isinstance(node, promql_parser.VectorSelector):
        return {node.name}
    found: set[str] = set()
    for attr in ("args", "expr", "lhs", "rhs", "vector_selector", "param"):
        child = getattr(node, attr, None)
        for item in child if isinstance(child, list) else [child]:
            if item is not None and not isinstance(item, str | int | float):
                found |= selectors(item)
    return found


def dashboard_exprs() -> list[str]:
    return [target["expr"] for panel in DASHBOARD["panels"] for target in panel.get("targets", [])]


def test_the_rules_and_the_pod_monitor_match_the_prometheus_operator_crds() -> None:
    schemas = {
        "PrometheusRule": json.loads((SCHEMAS / "prometheusrule-v1.json").read_text()),
        "PodMonitor": json.loads((SCHEMAS / "podmonitor-v1.json").read_text()),
    }
    docs = monitoring()
    assert {d["kind"] for d in docs} == set(schemas)
    for doc in docs:
        jsonschema.validate(doc, schemas[doc["kind"]])


def test_every_expression_parses_as_promql() -> None:
    for expr in [a["expr"] for a in ALERTS] + dashboard_exprs():
        try:
            promql_parser.parse(expr)
        except ValueError as err:
            pytest.fail(f"{expr!r}: {err}")


def test_the_dashboard_and_alerts_use_only_metrics_that_exist() -> None:
    known = OUR_METRICS | SDK_METRICS | DCGM_METRICS | {"up"}
    for expr in [a["expr"] for a in ALERTS] + dashboard_exprs():
        unknown = selectors(promql_parser.parse(expr)) - known
        assert not unknown, f"{expr!r} uses unknown metrics {unknown}"


def test_the_dashboard_shows_each_of_the_projects_metrics() -> None:
    used = set().union(*(selectors(promql_parser.parse(e)) for e in dashboard_exprs()))
    for name in [*workflow_metrics.WORKFLOW_METRICS, *admission_metrics.ADMISSION_METRICS]:
        assert name in used or name + "_bucket" in used or name + "_count" in used, name
    assert DASHBOARD["uid"] == "gpu-remediation"
    ids = [p["id"] for p in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids))


def test_dcgm_alerts_carry_what_the_receiver_and_classifier_read() -> None:
    routed = [a for a in ALERTS if a["labels"].get("remediate") == "true"]
    assert {a["labels"]["metric"] for a in routed} == DCGM_METRICS
    for alert in routed:
        assert selectors(promql_parser.parse(alert["expr"])) == {alert["labels"]["metric"]}
    [xid] = [a for a in routed if a["labels"]["metric"] == catalog.XID_METRIC]
    assert xid["annotations"]["xid"] == "{{ $value }}"
    # Non-Xid DCGM alerts name a metric the catalog classifies (not "unknown").
    for metric, (fault_class, _) in catalog.ALERT_METRIC_CLASSES.items():
        assert metric in DCGM_METRICS
        assert fault_class != FaultClass.UNKNOWN


def test_health_alerts_select_the_jobs_the_pod_monitor_creates() -> None:
    [monitor] = [d for d in monitoring() if d["kind"] == "PodMonitor"]
    assert monitor["spec"]["jobLabel"] == "app.kubernetes.io/name"
    scraped = set(monitor["spec"]["selector"]["matchExpressions"][0]["values"])
    apps = {
        d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] for d in deployments()
    }
    assert scraped == apps
    endpoint_ports = {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]}
    for deployment in deployments():
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        assert endpoint_ports & {p["name"] for p in container["ports"]}, deployment["metadata"]
    for alert in ALERTS:
        if "up{" in alert["expr"]:
            job = alert["expr"].split('job="', 1)[1].split('"', 1)[0]
            assert job in apps


def test_every_alert_is_explained_in_the_operations_guide() -> None:
    guide = (REPO / "docs" / "operations.md").read_text()
    section = guide.split("## Alerts", 1)[1].split("\n## ", 1)[0]
    for alert in ALERTS:
        assert f"`{alert['alert']}`" in section, alert["alert"]
        assert alert["labels"]["severity"] in ("critical", "warning")
        assert alert["annotations"]["summary"]
