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
    """The pieces applied separately (Job executor RBAC)."""
    return yaml_documents(DEPLOY / "job-executor" / "rbac.yaml")


def monitoring() -> list[dict[str, Any]]:
    return [
        d for path in sorted((DEPLOY / "monitoring").glob("*.yaml")) for d in yaml_documents(path)
    ]


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [doc] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def deployments() -> list[dict[str, Any]]:
    return [d for d in built() if d["kind"] == "Deployment"]
