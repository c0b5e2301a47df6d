"""docker-compose.yml: valid against the Compose Specification, and the services wired
as the issue asks (pinned images, healthchecks gating start, required secrets,
read-only credentials, search attributes registered before any worker runs).
"""

from __future__ import annotations

import json
import re
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gpu_remediation.search_attributes import ALL_SEARCH_ATTRIBUTES
from tests.deploy.compose_support import (
    MissingVariableError,
    bind_mounts,
    interpolate,
    interpolated,
    raw,
    required_variables,
)
from tests.deploy.support import DEPLOY, REPO, SCHEMAS
from worker import GRACEFUL_SHUTDOWN

SCHEMA = json.loads((SCHEMAS / "compose-spec.json").read_text())
SERVICES = ("worker", "receiver", "watcher")
REQUIRED = {
    "POSTGRES_PASSWORD",
    "GPU_REMEDIATION_RECEIVER_TOKEN",
    "GPU_REMEDIATION_CLUSTER",
    "GPU_REMEDIATION_AWS_REGION",
    "WORKER_KUBECONFIG",
    "WATCHER_KUBECONFIG",
    "AWS_CONFIG_DIR",
}
EXAMPLE_ENV = DEPLOY / "compose" / "example.env"


def example_values() -> dict[str, str]:
    return {name: f"/srv/{name.lower()}" for name in REQUIRED} | {"HOME": "/home/me"}


def compose() -> dict[str, Any]:
    return interpolated(example_values())


def seconds(duration: str) -> float:
    match = re.fullmatch(r"(\d+)(s|m)", duration)
    assert match, duration
    return float(match.group(1)) * (60 if match.group(2) == "m" else 1)


def test_the_file_is_valid_against_the_compose_specification() -> None:
    jsonschema.validate(raw(), SCHEMA)
    jsonschema.validate(compose(), SCHEMA)


def test_the_schema_check_is_not_vacuous() -> None:
    broken = compose()
    broken["services"]["worker"]["healthcheck"]["intervall"] = "5s"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, SCHEMA)


def test_secrets_and_site_settings_are_required_variables_listed_in_the_example_env() -> None:
    assert required_variables() == REQUIRED
    listed = {
        line.split("=", 1)[0].lstrip("# ")
        for line in EXAMPLE_ENV.read_text().splitlines()
        if "=" in line
    }
    assert listed >= REQUIRED
    with pytest.raises(MissingVariableError, match="GPU_REMEDIATION_RECEIVER_TOKEN"):
        interpolate(
            raw()["services"]["receiver"]["environment"]["GPU_REMEDIATION_RECEIVER_TOKEN"], {}
        )


def test_interpolation_follows_the_compose_rules() -> None:
    env = {"SET": "a", "EMPTY": ""}
    assert interpolate("${SET:-b}|${EMPTY:-b}|${EMPTY-b}|${UNSET-b}", env) == "a|b||b"
    assert interpolate("${UNSET:-${SET}/x}|$$HOME|$SET", env) == "a/x|$HOME|a"
    with pytest.raises(MissingVariableError):
        interpolate("${EMPTY:?needed}", env)


def test_third_party_images_are_pinned_to_exact_versions() -> None:
    for name, service in compose()["services"].items():
        if "build" in service:
            continue
        image = service["image"]
        repo, _, tag = image.rpartition(":")
        assert repo, f"{name}: {image} has no tag"
        assert tag != "latest"
        assert re.fullmatch(r"\d+\.\d+(\.\d+)?(-[a-z0-9.]+)?", tag), f"{name}: {image}"


def test_the_services_are_built_from_the_projects_dockerfile_as_one_image() -> None:
    services = compose()["services"]
    images = {services[name]["image"] for name in SERVICES}
    assert len(images) == 1
    for name in SERVICES:
        assert services[name]["build"] == {"context": ".", "dockerfile": "Dockerfile"}
        assert services[name]["read_only"] is True
        assert services[name]["cap_drop"] == ["ALL"]
        assert services[name]["user"] != "0"


def test_every_dependency_waits_for_health_or_completion_of_what_it_needs() -> None:
    services = compose()["services"]
    for name, service in services.items():
        for target, condition in service.get("depends_on", {}).items():
            assert target in services, (name, target)
            if condition["condition"] == "service_healthy":
                assert "healthcheck" in services[target], (name, target)
            else:
                assert condition["condition"] == "service_completed_successfully"
                assert services[target]["restart"] == "no", target
    setup = services["temporal-setup"]
    assert setup["depends_on"]["temporal"]["condition"] == "service_healthy"
    for name in (*SERVICES, "temporal-ui"):
        needs = services[name]["depends_on"]["temporal-setup"]
        assert needs["condition"] == "service_completed_successfully", name
    assert services["temporal"]["depends_on"]["temporal-schema"] == {
        "condition": "service_completed_successfully"
    }


def test_long_running_services_have_healthchecks_on_their_own_endpoints() -> None:
    services = compose()["services"]
    for name in ("postgresql", "temporal", *SERVICES):
        assert "healthcheck" in services[name], name
    for name in SERVICES:
        check = " ".join(services[name]["healthcheck"]["test"])
        port = re.search(r"127\.0\.0\.1:(\d+)/healthz", check)
        assert port, check
        env = services[name]["environment"]
        binds = [env.get("GPU_REMEDIATION_HEALTH_BIND", ""), *services[name]["command"]]
        assert any(port.group(1) in str(b) for b in binds), (name, binds)


def test_the_worker_may_finish_its_graceful_shutdown_before_it_is_killed() -> None:
    worker = compose()["services"]["worker"]
    assert seconds(worker["stop_grace_period"]) > GRACEFUL_SHUTDOWN.total_seconds()


def test_kubeconfigs_aws_credentials_and_configs_are_mounted_read_only() -> None:
    services = compose()["services"]
    for name, service in services.items():
        for volume in service.get("volumes", []):
            # Short syntax would turn a path without a slash into a named volume.
            assert isinstance(volume, dict) or not volume.startswith(("$", ".", "/")), volume
        for source, target, read_only in bind_mounts(service):
            assert read_only, (name, source, target)
    worker_env = services["worker"]["environment"]
    mounted = {target for _, target, _ in bind_mounts(services["worker"])}
    assert worker_env["KUBECONFIG"] in mounted
    assert Path(worker_env["AWS_CONFIG_FILE"]).parent.as_posix() in mounted
    assert services["watcher"]["environment"]["KUBECONFIG"] in {
        t for _, t, _ in bind_mounts(services["watcher"])
    }


def test_files_the_compose_file_mounts_from_the_repository_exist() -> None:
    for service in compose()["services"].values():
        for source, _, _ in bind_mounts(service):
            if source.startswith("./"):
                assert (REPO / source).exists(), source


def test_published_ports_listen_on_loopback_by_default() -> None:
    for name, service in compose()["services"].items():
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), (name, port)


def test_the_setup_script_registers_exactly_the_projects_search_attributes() -> None:
    script = (DEPLOY / "compose" / "temporal-setup.sh").read_text()
    [listed] = re.findall(r'^attributes="([^"]+)"', script, flags=re.MULTILINE)
    assert set(listed.split()) == {key.name for key in ALL_SEARCH_ATTRIBUTES}


def test_the_shell_scripts_pass_shellcheck() -> None:
    shellcheck = Path(sysconfig.get_path("scripts")) / "shellcheck"
    scripts = sorted(str(p) for p in (DEPLOY / "compose").glob("*.sh"))
    assert scripts
    result = subprocess.run(
        [str(shellcheck), "--shell=sh", *scripts], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
