"""`remediate policy check FILE` and `remediate policy show-defaults`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from gpu_remediation.models import FaultClass
from gpu_remediation.policy_loader import default_policy_text

# Wide enough that rich neither wraps class names nor error messages.
runner = CliRunner(env={"COLUMNS": "200", "NO_COLOR": "1"})


@pytest.fixture
def policy_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return Path("policy.yaml")


def test_valid_file_prints_the_ladder_of_every_class(policy_file: Path) -> None:
    policy_file.write_text("rungs:\n  gpu_reset: {enabled: false}\n")
    result = runner.invoke(app, ["policy", "check", str(policy_file)])
    assert result.exit_code == 0, result.stderr
    assert "is a valid policy" in result.stdout
    for fault_class in FaultClass:
        assert fault_class.value in result.stdout
    assert "notify only, node untouched" in result.stdout
    assert "gpu_reset (skipped)" in result.stdout


def test_json_prints_one_object_with_every_ladder(policy_file: Path) -> None:
    policy_file.write_text("dry_run: true\n")
    result = runner.invoke(app, ["policy", "check", "--json", str(policy_file)])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["valid"] is True
    assert data["policy"]["dry_run"] is True
    assert set(data["ladders"]) == {fc.value for fc in FaultClass}
    assert data["ladders"]["application"]["notify_only"] is True
    fallen = data["ladders"]["gpu_fallen_off_bus"]
    assert fallen["start_rung"] == "reboot"
    assert [s["rung"] for s in fallen["steps"]][:3] == ["quarantine", "stop_gpu_work", "reboot"]


def test_invalid_file_exits_1_naming_each_bad_field(policy_file: Path) -> None:
    policy_file.write_text("rungs:\n  reboot:\n    max_attempts: 0\n    timout: 5m\n")
    result = runner.invoke(app, ["policy", "check", str(policy_file)])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert "policy.yaml" in result.stderr
    assert "rungs.reboot.max_attempts: Input should be greater than or equal to 1" in result.stderr
    assert "rungs.reboot.timout: Extra inputs are not permitted" in result.stderr


def test_yaml_syntax_error_exits_1_with_the_line(policy_file: Path) -> None:
    policy_file.write_text("rungs: [\n")
    result = runner.invoke(app, ["policy", "check", str(policy_file)])
    assert result.exit_code == 1
    assert "line 2" in result.stderr


def test_missing_file_exits_2(policy_file: Path) -> None:
    result = runner.invoke(app, ["policy", "check", "absent.yaml"])
    assert result.exit_code == 2
    assert "does not exist" in result.stderr


def test_show_defaults_prints_the_packaged_yaml() -> None:
    result = runner.invoke(app, ["policy", "show-defaults"])
    assert result.exit_code == 0
    assert result.stdout == default_policy_text()


def test_installed_entry_point_checks_the_packaged_defaults(tmp_path: Path) -> None:
    defaults = tmp_path / "defaults.yaml"
    defaults.write_text(default_policy_text())
    remediate = Path(sys.executable).parent / "remediate"
    done = subprocess.run(
        [str(remediate), "policy", "check", "--json", str(defaults)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["ladders"]["unknown"]["max_rung"] == "reboot"
