"""deploy/'s Kubernetes objects are valid for the supported Kubernetes releases and
hang together: probes, resources, graceful termination, references, images.
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from typer.testing import CliRunner

from cli.main import app
from tests.deploy.manifests import KUSTOMIZATION, built, deployments, find, optional
from tests.deploy.support import DEPLOY
from worker import GRACEFUL_SHUTDOWN

# The oldest Kubernetes release still supported on EKS when written, and the newest schemas.
KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")
# Created by the operator (docs/getting-started.md, "On Kubernetes"), never shipped with a value.
OPERATOR_SECRETS = {"gpu-remediation-receiver", "gpu-remediation-temporal"}


def _name(doc: dict[str, Any]) -> str:
    return f"{doc['kind']}/{doc['metadata']['name']}"


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_object_is_valid_against_the_kubernetes_schemas(version: str) -> None:
    for doc in built() + optional():
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{_name(doc)} invalid for Kubernetes {version}: {err.message}")


def test_the_kustomization_lists_every_manifest_in_deploy() -> None:
    top_level = {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(KUSTOMIZATION["resources"]) == top_level
    names = [_name(d) + "/" + d["metadata"].get("namespace", "") for d in built()]
    assert len(names) == len(set(names)), "an object is declared twice"
    assert any(d["kind"] == "Namespace" for d in built())


def test_containers_have_probes_resources_and_a_locked_down_security_context() -> None:
    for deployment in deployments():
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, _name(deployment)
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        for container in pod["containers"]:
            ports = {p["name"] for p in container["ports"]}
            for probe in ("livenessProbe", "readinessProbe"):
                assert container[probe]["httpGet"]["port"] in ports, (_name(deployment), probe)
            assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
            assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
            resources = container["resources"]
            assert {"cpu", "memory"} <= resources["requests"].keys()
            assert "memory" in resources["limits"]
            security = container["securityContext"]
            assert security["allowPrivilegeEscalation"] is False
            assert security["readOnlyRootFilesystem"] is True
            assert security["capabilities"]["drop"] == ["ALL"]


def test_the_worker_gets_longer_to_stop_than_its_graceful_shutdown() -> None:
    pod = find(deployments(), "Deployment", "gpu-remediation-worker")["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > GRACEFUL_SHUTDOWN.total_seconds()
    # A rollout never takes the last worker away.
    strategy = find(deployments(), "Deployment", "gpu-remediation-worker")["spec"]["strategy"]
    assert strategy["rollingUpdate"]["maxUnavailable"] == 0


def test_every_reference_resolves_to_an_object_of_deploy_or_a_documented_secret() -> None:
    docs = built()
    accounts = {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"}
    config_maps = {d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"}
    for deployment in deployments():
        pod = deployment["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] in accounts
        for volume in pod.get("volumes", []):
            if "configMap" in volume:
                assert volume["configMap"]["name"] in config_maps
        for container in pod["containers"]:
            for source in container.get("envFrom", []):
                assert source["configMapRef"]["name"] in config_maps
            for env in container.get("env", []):
                secret = env.get("valueFrom", {}).get("secretKeyRef")
                if secret is not None:
                    assert secret["name"] in OPERATOR_SECRETS, env
    for binding in [d for d in docs + optional() if d["kind"].endswith("RoleBinding")]:
        for subject in binding["subjects"]:
            assert subject["name"] in accounts


def test_the_receiver_service_reaches_the_receiver_pods() -> None:
    docs = built()
    service = find(docs, "Service", "gpu-remediation-receiver")
    pod = find(docs, "Deployment", "gpu-remediation-receiver")["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    [container] = pod["spec"]["containers"]
    named = {p["name"] for p in container["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= named
    # The token is required: the pods do not start without the Secret.
    [token] = [e for e in container["env"] if e["name"] == "GPU_REMEDIATION_RECEIVER_TOKEN"]
    assert "optional" not in token["valueFrom"]["secretKeyRef"]


def test_every_service_runs_the_image_the_kustomization_sets() -> None:
    [image] = KUSTOMIZATION["images"]
    for deployment in deployments():
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            assert container["image"] == f"{image['name']}:{image['newTag']}"


@pytest.mark.parametrize(
    "deployment", ["gpu-remediation-worker", "gpu-remediation-receiver", "gpu-remediation-watcher"]
)
def test_each_container_command_is_a_valid_remediate_command(deployment: str) -> None:
    [container] = find(deployments(), "Deployment", deployment)["spec"]["template"]["spec"][
        "containers"
    ]
    # Unknown options and commands fail while parsing, before --help answers.
    result = CliRunner().invoke(app, [*container["args"], "--help"])
    assert result.exit_code == 0, result.output


def test_the_settings_the_pods_read_name_only_known_variables() -> None:
    from gpu_remediation.settings import PREFIX, Settings

    settings = find(built(), "ConfigMap", "gpu-remediation-settings")["data"]
    known = {PREFIX + field.upper() for field in Settings.model_fields} | {
        "GPU_REMEDIATION_TASK_QUEUE",
        "TEMPORAL_ADDRESS",
        "TEMPORAL_NAMESPACE",
    }
    assert settings.keys() <= known
    assert settings["GPU_REMEDIATION_LOG_FORMAT"] == "json"


def test_every_object_lives_in_a_namespace_deploy_declares() -> None:
    docs = built() + optional()
    declared = {d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"}
    used = {d["metadata"]["namespace"] for d in docs if "namespace" in d["metadata"]}
    # Temporal's namespace is the operator's (deploy/temporal/ only adds a policy to it).
    assert used - declared == {"temporal"}
    assert declared == {"gpu-remediation", "gpu-remediation-agent", "gpu-remediation-jobs"}
