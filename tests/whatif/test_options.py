"""Bad input to ``remediate compare`` is refused before anything starts, naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from whatif.options import CompareError, options_from
from whatif.runner import CompareRun


def refused(tmp_path: Path, **fields: object) -> str:
    with pytest.raises(CompareError) as caught:
        CompareRun(options_from(**fields), ui=None)  # type: ignore[arg-type]
    return str(caught.value)


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_an_unknown_policy_name_lists_the_baselines(tmp_path: Path) -> None:
    message = refused(tmp_path, policies="graded,karpenterish")
    assert message.startswith("--policies: 'karpenterish' is neither a built-in policy")
    assert "replace-always" in message


def test_an_invalid_policy_file_names_its_field(tmp_path: Path) -> None:
    bad = write(tmp_path, "bad.yaml", "rungs: {reboot: {max_attempts: -1}}\n")
    message = refused(tmp_path, policies=f"graded,{bad}")
    assert message.startswith("--policies:")
    assert "rungs.reboot.max_attempts" in message


def test_a_policy_given_twice_is_refused(tmp_path: Path) -> None:
    assert "repeated: graded" in refused(tmp_path, policies="graded,graded")


def test_a_mix_with_a_negative_rate_names_the_kind(tmp_path: Path) -> None:
    mix = write(tmp_path, "mix.yaml", "rates: {fallen_off_bus: -0.5}\n")
    message = refused(tmp_path, fault_mix=mix)
    assert message.startswith("--fault-mix:")
    assert "fallen_off_bus" in message
    assert ">= 0" in message


def test_a_mix_with_an_unknown_fault_kind_names_it(tmp_path: Path) -> None:
    mix = write(tmp_path, "mix.yaml", "rates: {melted_gpu: 0.1}\n")
    message = refused(tmp_path, fault_mix=mix)
    assert message.startswith("--fault-mix:")
    assert "rates.melted_gpu" in message


def test_a_mix_that_is_not_a_file_is_refused(tmp_path: Path) -> None:
    message = refused(tmp_path, fault_mix=str(tmp_path / "nope.yaml"))
    assert message.startswith("--fault-mix:")
    assert "cannot read" in message


def test_bad_pools_and_report_directory_are_named(tmp_path: Path) -> None:
    assert refused(tmp_path, pools="h100:x").startswith("--pools:")
    assert refused(tmp_path, report=tmp_path / "no" / "r.html").startswith("--report:")


def test_negative_multiplier_is_refused_by_option_validation() -> None:
    with pytest.raises(CompareError, match="--fault-multiplier"):
        options_from(fault_multiplier=-1)


def test_the_command_exits_2_and_starts_nothing_on_bad_input(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["compare", "--policies", "nope", "--nodes", "4"])
    assert result.exit_code == 2
    assert "--policies: 'nope'" in result.output
    assert "Comparing" not in result.output
