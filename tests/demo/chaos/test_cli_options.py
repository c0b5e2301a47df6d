"""``remediate demo --chaos`` options, refused before anything starts when wrong."""

from __future__ import annotations

from typer.testing import CliRunner

from cli.main import app

runner = CliRunner(env={"COLUMNS": "200", "NO_COLOR": "1"})


def test_an_unknown_chaos_kind_exits_2_naming_the_option_and_the_known_kinds() -> None:
    result = runner.invoke(app, ["demo", "--chaos", "--chaos-kinds", "worker_kill,meteor"])
    assert result.exit_code == 2
    assert "--chaos-kinds" in result.output
    assert "meteor" in result.output
    assert "watcher_restart" in result.output


def test_zero_chaos_faults_is_refused() -> None:
    result = runner.invoke(app, ["demo", "--chaos", "--chaos-faults", "0"])
    assert result.exit_code == 2
    assert "--chaos-faults" in result.output


def test_the_help_names_the_chaos_options_and_the_exit_code() -> None:
    result = runner.invoke(app, ["demo", "--help"])
    assert result.exit_code == 0
    for option in ("--chaos", "--chaos-kinds", "--chaos-faults"):
        assert option in result.output
    assert "3 when a chaos invariant breaks" in " ".join(result.output.split())
