"""Bad ``remediate compare --chaos`` options are refused before anything starts, by name."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from cli.main import app
from whatif.options import CHAOS_KINDS, CompareError, options_from


def refused(**fields: object) -> str:
    with pytest.raises(CompareError) as caught:
        options_from(**fields)
    return str(caught.value)


def test_the_server_restart_is_refused_because_the_policies_share_the_server() -> None:
    message = refused(chaos=True, chaos_kinds="worker_kill,server_restart")
    assert message.startswith("--chaos-kinds:")
    assert "server_restart cannot be injected in a comparison" in message
    assert "share one Temporal server" in message


def test_the_receiver_kill_is_refused_because_a_comparison_runs_no_receiver() -> None:
    message = refused(chaos=True, chaos_kinds="receiver_kill")
    assert message.startswith("--chaos-kinds:")
    assert "receiver_kill cannot be injected" in message


def test_an_unknown_chaos_kind_is_named() -> None:
    message = refused(chaos=True, chaos_kinds="worker_kill,meteor")
    assert message.startswith("--chaos-kinds:")
    assert "meteor" in message


def test_chaos_faults_must_be_at_least_one() -> None:
    assert refused(chaos=True, chaos_faults=0).startswith("--chaos-faults:")


def test_chaos_options_without_chaos_are_refused() -> None:
    assert "only with --chaos" in refused(chaos_kinds="worker_kill")
    assert refused(chaos_faults=3).startswith("--chaos-faults:")


def test_all_means_every_kind_but_the_shared_ones() -> None:
    kinds, faults = options_from(chaos=True).chaos_plan
    assert kinds == CHAOS_KINDS
    assert "server_restart" not in kinds
    assert "receiver_kill" not in kinds
    assert faults == 2
    assert options_from(chaos=True, chaos_kinds="watcher_restart", chaos_faults=5).chaos_plan == (
        ("watcher_restart",),
        5,
    )


def test_the_command_exits_2_naming_the_bad_chaos_option() -> None:
    result = CliRunner().invoke(
        app, ["compare", "--chaos", "--chaos-kinds", "server_restart", "--nodes", "4"]
    )
    assert result.exit_code == 2
    assert "--chaos-kinds:" in result.output
    assert "server_restart" in result.output
