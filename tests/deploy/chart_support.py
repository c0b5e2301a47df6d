"""The Helm chart rendered by Helm's own engine (helm-python-sdk binds Helm's Go SDK).

deploy/ is rendered from the chart: ``RENDERED`` says which template becomes which
file, with the values of the chart's ci/deploy-values.yaml (make_manifests.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from helm_python import Chart

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "gpu-remediation"
DEPLOY = REPO / "deploy"
DEPLOY_VALUES = CHART / "ci" / "deploy-values.yaml"
DASHBOARD = "dashboards/gpu-remediation.json"
NAMESPACE = "gpu-remediation"

# Template -> file under deploy/. The chart's config.yaml and grafana-dashboard.yaml
# have no counterpart: the kustomization generates its ConfigMaps, and the
# dashboard is copied as the JSON Grafana imports.
RENDERED = {
    "namespace.yaml": "namespace.yaml",
    "agent-daemonset.yaml": "agent-daemonset.yaml",
    "rbac.yaml": "rbac.yaml",
    "worker-admission.yaml": "worker-admission.yaml",
    "network-policy.yaml": "network-policy.yaml",
    "worker.yaml": "worker.yaml",
    "receiver.yaml": "receiver.yaml",
    "watcher.yaml": "watcher.yaml",
    "job-executor-namespace.yaml": "job-executor/namespace.yaml",
    "job-executor-rbac.yaml": "job-executor/rbac.yaml",
    "temporal-network-policy.yaml": "temporal/network-policy.yaml",
    "prometheus-rule.yaml": "monitoring/prometheus-rule.yaml",
    "pod-monitor.yaml": "monitoring/pod-monitor.yaml",
}
COPIED = {DASHBOARD: "grafana/gpu-remediation.json"}


def render(values: dict[str, Any] | None = None, namespace: str = NAMESPACE) -> dict[str, str]:
    """Template name (``worker.yaml``) -> rendered text; empty renders left out.

    Raises helm_python.HelmValuesError for values the schema refuses and
    helm_python.HelmRenderError for a template that fails (a ``required`` value).
    """
    with Chart.load(str(CHART)) as chart:
        rendered = chart.render(values or {}, name="gpu-remediation", namespace=namespace)
    prefix = f"{CHART.name}/templates/"
    return {
        path.removeprefix(prefix): text
        for path, text in rendered.items()
        if path.startswith(prefix) and text.strip()
    }


def documents(rendered: dict[str, str]) -> list[dict[str, Any]]:
    """Every object of a render, in template order."""
    return [
        doc
        for name in sorted(rendered)
        for doc in yaml.safe_load_all(rendered[name])
        if doc is not None
    ]


def deploy_values() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load(DEPLOY_VALUES.read_text())
    return values


def deploy_files() -> dict[str, str]:
    """What deploy/ must hold, path under deploy/ -> text, from the chart."""
    rendered = render(deploy_values())
    missing = sorted(set(RENDERED) - set(rendered))
    if missing:
        raise AssertionError(f"ci/deploy-values.yaml renders no {missing}")
    header = (
        "# Rendered from charts/gpu-remediation (templates/{template}, values\n"
        "# ci/deploy-values.yaml): edit the template, then run\n"
        "# `python -m tests.deploy.make_manifests`.\n"
    )
    files = {
        target: header.format(template=template) + rendered[template].strip("\n") + "\n"
        for template, target in RENDERED.items()
    }
    for source, target in COPIED.items():
        files[target] = (CHART / source).read_text()
    return files
