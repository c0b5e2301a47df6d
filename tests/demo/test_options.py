"""What the demo runs by default, and bad input refused before anything starts."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from demo.run import DemoError, demo_policy, fleet_config, options_from
from gpu_remediation.models import Rung

runner = CliRunner(env={"COLUMNS": "200", "NO_COLOR": "1"})


def test_the_default_run_is_the_default_scenario_on_two_pools_for_18_simulated_minutes() -> None:
    options = options_from()
    config, duration = fleet_config(options)
    assert [(p.name, p.nodes, p.reset_supported) for p in config.pools] == [
        ("h100", 20, True),
        ("p5", 20, False),
    ]
    assert config.scenario is not None
    assert {e.fault.value for e in config.scenario.events} >= {
        "xid_reset",
        "fallen_off_bus",
        "application",
        "false_positive",
        "row_remap_failure",
    }
    assert config.fault_mix is None
    assert duration == timedelta(minutes=18)
    assert config.time_factor == 20
    # The policy runs at the fleet's speed: a 4-minute-or-so reboot rung budget, not 45.
    assert demo_policy(options).rung(Rung.REBOOT).timeout == timedelta(seconds=135)


def test_the_default_scenario_drains_a_handshake_job_whose_short_runs_finish_in_time() -> None:
    config, duration = fleet_config(options_from())
    jobs = config.workloads
    assert jobs is not None
    # Runs finish (several per job) within the scenario, checkpointing on the way.
    assert jobs.job_duration * 2 < duration
    assert jobs.checkpoint_interval < jobs.job_duration
    assert config.scenario is not None
    first = config.scenario.events[0]
    # h100-0001 runs h100-job-000, the first job of its pool, which speaks the handshake.
    assert (first.fault.value, first.node) == ("xid_reset", "h100-0001")
    assert jobs.handshake_share > 0
    # Other runs keep the fleet's long jobs.
    mix, _ = fleet_config(options_from(fault_mix="llama3"))
    assert mix.workloads is not None
    assert mix.workloads.job_duration == timedelta(hours=6)


def test_a_fault_mix_alone_replaces_the_default_scenario(tmp_path: Path) -> None:
    config, duration = fleet_config(options_from(fault_mix="llama3", fault_multiplier=5))
    assert config.scenario is None
    assert config.fault_mix is not None
    assert config.fault_mix.multiplier == 5
    assert duration == timedelta(hours=1)
    scenario = tmp_path / "s.yaml"
    scenario.write_text("events:\n  - {at: 10m, fault: host_hang}\n")
    _, duration = fleet_config(options_from(scenario=scenario))
    assert duration == timedelta(minutes=25)  # the last event + 15 minutes


def test_jobs_write_step_times_when_a_fault_of_the_run_can_slow_a_node(tmp_path: Path) -> None:
    # Issue 37: only the step times show a gpu_slow; without slow faults no job writes them.
    repo = Path(__file__).resolve().parents[2]
    slow, _ = fleet_config(options_from(fault_mix=str(repo / "bench/mixes/llama3-slow.yaml")))
    plain, _ = fleet_config(options_from(fault_mix="llama3"))
    assert slow.workloads is not None
    assert plain.workloads is not None
    assert (slow.workloads.step_times, plain.workloads.step_times) == (timedelta(minutes=5), None)
    scenario = tmp_path / "s.yaml"
    scenario.write_text("events:\n  - {at: 10m, fault: gpu_slow}\n")
    scripted, _ = fleet_config(options_from(scenario=scenario))
    assert scripted.workloads is not None
    assert scripted.workloads.step_times == timedelta(minutes=5)
    default, _ = fleet_config(options_from())
    assert default.workloads is not None
    assert default.workloads.step_times == timedelta(seconds=30)


def test_bad_options_are_refused_naming_the_problem(tmp_path: Path) -> None:
    with pytest.raises(DemoError, match="--duration"):
        options_from(duration="soon")
    with pytest.raises(DemoError, match="pool"):
        fleet_config(options_from(pools="Bad_Pool"))
    mix = tmp_path / "mix.yaml"
    mix.write_text("rates: {meteor: 1}\n")
    with pytest.raises(DemoError, match=r"rates\.meteor"):
        fleet_config(options_from(fault_mix=str(mix)))
    policy = tmp_path / "policy.yaml"
    policy.write_text("cooldown: often\n")
    with pytest.raises(DemoError, match="cooldown"):
        demo_policy(options_from(policy=policy))


def test_the_command_exits_2_on_bad_input_before_starting_anything() -> None:
    result = runner.invoke(app, ["demo", "--time-factor", "20", "--duration", "forever"])
    assert result.exit_code == 2
    assert "--duration" in result.stderr
