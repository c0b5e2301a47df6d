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


POOLS = """\
pools:
  p5:
    rungs: {gpu_reset: {enabled: false}}
  p4d:
    verification: {diag_level: 3}
"""


def ladder_row(stdout: str, fault_class: str) -> str:
    return next(line for line in stdout.splitlines() if f" {fault_class} " in line)


def test_pool_prints_that_pools_effective_ladder(policy_file: Path) -> None:
    policy_file.write_text(POOLS)
    result = runner.invoke(app, ["policy", "check", str(policy_file), "--pool", "p5"])
    assert result.exit_code == 0, result.stderr
    assert "pool p5: its override merged in (rungs.gpu_reset.enabled)" in result.stdout
    assert "gpu_reset (skipped)" in ladder_row(result.stdout, "gpu_reset_required")
    rung_row = next(line for line in result.stdout.splitlines() if line.startswith("│ gpu_reset "))
    assert "│ no " in rung_row


def test_without_pool_the_base_ladder_is_printed_and_the_pools_named(policy_file: Path) -> None:
    policy_file.write_text(POOLS)
    result = runner.invoke(app, ["policy", "check", str(policy_file)])
    assert result.exit_code == 0, result.stderr
    assert "per-pool overrides: p4d, p5 (see --pool NAME)" in result.stdout
    assert "gpu_reset (skipped)" not in result.stdout
    assert "verification=level 2" in result.stdout


def test_a_pool_without_an_override_is_said_to_get_the_base_policy(policy_file: Path) -> None:
    policy_file.write_text(POOLS)
    base = runner.invoke(app, ["policy", "check", str(policy_file)])
    result = runner.invoke(app, ["policy", "check", str(policy_file), "--pool", "h100"])
    assert result.exit_code == 0, result.stderr
    assert "pool h100 has no override: the base policy applies (pools with one: p4d, p5)" in (
        result.stdout
    )
    # Everything below that line is the base policy's.
    assert result.stdout.splitlines()[2:] == base.stdout.splitlines()[2:]


def test_pool_with_json_reports_the_pool_and_its_effective_policy(policy_file: Path) -> None:
    policy_file.write_text(POOLS)
    result = runner.invoke(app, ["policy", "check", "--json", str(policy_file), "--pool", "p4d"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["pool"] == {"name": "p4d", "has_override": True}
    assert data["policy"]["verification"]["diag_level"] == 3
    steps = data["ladders"]["gpu_reset_required"]["steps"]
    reset = next(s for s in steps if s["rung"] == "gpu_reset")
    assert "DCGM diag level 3" in reset["note"]


def test_an_invalid_pool_override_exits_1_naming_its_path(policy_file: Path) -> None:
    policy_file.write_text("pools: {p5: {rungs: {gpu_reset: {enabled: maybe}}}}\n")
    result = runner.invoke(app, ["policy", "check", str(policy_file), "--pool", "p5"])
    assert result.exit_code == 1
    assert "pools.p5.rungs.gpu_reset.enabled: Input should be a valid boolean" in result.stderr
