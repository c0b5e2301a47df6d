"""deploy/ as kubectl would apply it: the kustomization's resources and generated ConfigMaps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.deploy.support import DEPLOY, yaml_documents

KUSTOMIZATION = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())


def _env_file(path: Path) -> dict[str, str]:
    data: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            data[key] = value
    return data


def generated_config_maps() -> list[dict[str, Any]]:
    """The kustomization's configMapGenerator output (names without the hash suffix)."""
    maps = []
    for gen in KUSTOMIZATION.get("configMapGenerator", []):
        data: dict[str, str] = {}
        for env in gen.get("envs", []):
            data.update(_env_file(DEPLOY / env))
        for entry in gen.get("files", []):
            key, _, source = entry.rpartition("=")
            data[key or Path(source).name] = (DEPLOY / source).read_text()
        maps.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": gen["name"], "namespace": gen["namespace"]},
                "data": data,
            }
        )
    return maps


def built() -> list[dict[str, Any]]:
    """Every object ``kubectl apply -k deploy/`` creates."""
    docs = [d for name in KUSTOMIZATION["resources"] for d in yaml_documents(DEPLOY / name)]
    return docs + generated_config_maps()


def optional() -> list[dict[str, Any]]:
    """The pieces applied separately: the Job executor's namespace and RBAC, and the
    NetworkPolicy that goes into Temporal's namespace."""
    return job_executor() + yaml_documents(DEPLOY / "temporal" / "network-policy.yaml")


def job_executor() -> list[dict[str, Any]]:
    """``kubectl apply -f deploy/job-executor/``: its namespace, then its RBAC."""
    return [
        d
        for name in ("namespace.yaml", "rbac.yaml")
        for d in yaml_documents(DEPLOY / "job-executor" / name)
    ]


def monitoring() -> list[dict[str, Any]]:
    """The objects ``kubectl apply -k deploy/monitoring/`` creates, as written in the files.

    The kustomization's replacements write exporter.env's values over the same
    values in the files (tests/deploy/test_alert_rule_trust.py holds them equal).
    """
    folder = DEPLOY / "monitoring"
    (kustomization,) = yaml_documents(folder / "kustomization.yaml")
    return [d for name in kustomization["resources"] for d in yaml_documents(folder / name)]


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [doc] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def deployments() -> list[dict[str, Any]]:
    return [d for d in built() if d["kind"] == "Deployment"]
