"""``remediate compare --sweep``: the comparison at each value of one input (issue 36)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from cli.main import app
from whatif.options import CompareError, options_from
from whatif.sweep import MAX_VALUES, parse_sweep, render, run_sweep, series, sweep_json, tables


@pytest.mark.unit
def test_a_launch_time_sweep_makes_one_comparison_per_value_differing_only_there() -> None:
    base = options_from(nodes=8, pools="h100", report=None, seed=3)
    sweep = parse_sweep("node-launch=5m, 20m,1h", base)
    assert sweep.values == ("5m", "20m", "1h")
    assert [o.node_launch for o in sweep.options] == [
        timedelta(minutes=5),
        timedelta(minutes=20),
        timedelta(hours=1),
    ]
    assert sweep.xs == [5.0, 20.0, 60.0]
    for options in sweep.options:
        assert options.model_dump(exclude={"node_launch"}) == base.model_dump(
            exclude={"node_launch"}
        )


@pytest.mark.unit
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("node-launch", "expected NAME=V1,V2"),
        ("launch=5m,10m", "unknown name 'launch'; one of node-launch, fault-multiplier"),
        ("node-launch=5m", "at least two values"),
        ("node-launch=5m,,10m", "at least two values"),
        ("fault-multiplier=" + ",".join(str(i) for i in range(MAX_VALUES + 1)), "at most 8"),
        ("node-launch=5m,0s", r"--sweep node-launch=0s: --node-launch: Value error, must be more"),
        ("fault-multiplier=1,-2", r"--sweep fault-multiplier=-2: --fault-multiplier"),
        ("job-nodes=4,four", r"--sweep job-nodes=four: --job-nodes"),
        ("node-launch=5m,300s", r"each value once \(repeated: 300s, 5m\)"),
        (
            "capacity-shortage=0,1.5",
            r"--sweep capacity-shortage=1\.5: --capacity-shortage: .*from 0 to 1, got 1\.5",
        ),
        ("capacity-shortage=0,some", r"--sweep capacity-shortage=some: --capacity-shortage"),
        ("capacity-shortage=0.1,.1", r"each value once \(repeated: \.1, 0\.1\)"),
    ],
)
def test_a_bad_sweep_is_refused_naming_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(CompareError, match=message):
        parse_sweep(text, options_from(nodes=8, pools="h100"))


@pytest.mark.unit
def test_a_capacity_shortage_sweep_sets_the_fleets_shortage_at_each_value() -> None:
    from whatif.options import compare_fleet

    base = options_from(nodes=8, pools="h100", seed=3)
    sweep = parse_sweep("capacity-shortage=0, 0.05,0.2", base)
    assert [o.capacity_shortage for o in sweep.options] == [0.0, 0.05, 0.2]
    assert sweep.xs == [0.0, 0.05, 0.2]
    assert sweep.axis.field == "capacity_shortage"
    fleets = [compare_fleet(o)[0] for o in sweep.options]
    assert [f.capacity.insufficient_capacity_probability for f in fleets] == [0.0, 0.05, 0.2]
    # Only the shortage moves: the rest of the capacity model is the same at every value.
    assert {
        f.capacity.model_copy(update={"insufficient_capacity_probability": 0}) for f in fleets
    } == {fleets[0].capacity}


@pytest.mark.unit
def test_a_sweep_is_refused_with_chaos() -> None:
    with pytest.raises(CompareError, match="not with --chaos"):
        parse_sweep("job-nodes=2,4", options_from(nodes=8, pools="h100", chaos=True))


@pytest.mark.unit
def test_each_values_comparison_writes_no_report_of_its_own(tmp_path: Path) -> None:
    base = options_from(nodes=8, pools="h100", report=tmp_path / "r.html", json_output=True)
    sweep = parse_sweep("fault-multiplier=1,10", base)
    assert all(o.report is None and not o.json_output for o in sweep.options)


@pytest.mark.unit
def test_a_launch_time_out_of_range_is_refused_as_an_option() -> None:
    with pytest.raises(CompareError, match="--node-launch"):
        options_from(node_launch="2d")
    assert options_from(node_launch="20m").node_launch == timedelta(minutes=20)


@pytest.mark.unit
@pytest.mark.parametrize("value", [1.5, -0.1])
def test_a_capacity_shortage_outside_0_to_1_is_refused_as_an_option(value: float) -> None:
    with pytest.raises(CompareError, match=r"--capacity-shortage: .*a probability from 0 to 1"):
        options_from(capacity_shortage=value)
    assert options_from(capacity_shortage=0.25).capacity_shortage == 0.25
    assert options_from().capacity_shortage is None


@pytest.mark.unit
def test_the_command_refuses_a_bad_capacity_shortage_with_exit_2() -> None:
    result = CliRunner().invoke(app, ["compare", "--nodes", "4", "--capacity-shortage", "2"])
    assert result.exit_code == 2
    assert "--capacity-shortage: Value error, a probability from 0 to 1, got 2" in result.output


@pytest.mark.unit
def test_the_command_refuses_a_bad_sweep_with_exit_2_and_starts_nothing() -> None:
    result = CliRunner().invoke(app, ["compare", "--nodes", "4", "--sweep", "gangs=1,2"])
    assert result.exit_code == 2
    assert "--sweep: unknown name 'gangs'" in result.output
    assert "Sweeping" not in result.output


# One node dies for good half an hour in: replace-always replaces it, and how long the
# new node takes to come up is all that differs between the values.
SCENARIO = "events:\n  - {at: 30m, fault: gpu_hardware, node: h100-0002}\n"


@pytest.mark.e2e
async def test_a_longer_launch_costs_a_replacing_policy_availability_and_nothing_else(
    tmp_path: Path,
) -> None:
    scenario = tmp_path / "dead.yaml"
    scenario.write_text(SCENARIO)
    base = options_from(
        nodes=8,
        pools="h100",
        scenario=scenario,
        fault_mix="none",
        duration="4h",
        policies="no-automation,replace-always",
        clock="server",
        workloads=False,
        operator=False,
        settle_timeout=60,
        refresh_interval=0.5,
        live=False,
        parallel=2,
    )
    sweep = parse_sweep("node-launch=5m,65m", base)
    points = await run_sweep(sweep, ui=Console(quiet=True))

    assert [p.value for p in points] == ["5m", "65m"]
    assert len({p.timeline for p in points}) == 1  # the same faults at both values
    availability = series(points, "availability")
    replace_short, replace_long = availability["replace-always"]
    no_auto_short, no_auto_long = availability["no-automation"]
    assert replace_short is not None
    assert replace_long is not None
    # One node of 8 for 4 hours, out 60 minutes longer: 60 / (8 x 240) = 3.1 points.
    assert replace_short - replace_long == pytest.approx(60 / (8 * 240) * 100, abs=0.3)
    # Nothing is launched without automation: the launch time changes nothing.
    assert no_auto_short == no_auto_long
    for point in points:
        replace = {r.name: r for r in point.results}["replace-always"]
        assert replace.summary.replacements == 1

    data = sweep_json(sweep, points)
    assert data["sweep"] == {"name": "node-launch", "field": "node_launch", "values": ["5m", "65m"]}
    assert [p["x"] for p in data["points"]] == [5.0, 65.0]
    assert set(data["points"][0]["policies"]) == {"no-automation", "replace-always"}
    json.dumps(data)  # all of it serialisable
    assert len(tables(sweep, points)) == 3
    page = render(sweep, points)
    assert page.count("<svg") == 3
    assert "node launch to Ready (minutes)" in page
    assert "Swept: <code>node-launch</code> over 5m, 65m" in page


@pytest.mark.unit
def test_a_model_file_reaches_the_fleet_and_an_explicit_option_wins_over_it(
    tmp_path: Path,
) -> None:
    from rich.console import Console

    from whatif.options import compare_fleet
    from whatif.report import _model_section
    from whatif.runner import CompareRun

    model = tmp_path / "model.yaml"
    model.write_text("durations: {node_launch: 20m, reboot: 8m}\noperator: {staff: 1}\n")
    fleet, _ = compare_fleet(options_from(nodes=8, pools="h100", model=model))
    assert fleet.durations.node_launch == timedelta(minutes=20)
    assert fleet.durations.reboot == timedelta(minutes=8)
    assert fleet.operator is not None
    assert fleet.operator.staff == 1

    options = options_from(nodes=8, pools="h100", model=model, node_launch="45m")
    compare = CompareRun(options, ui=Console(quiet=True))
    assert compare.fleet_config.durations.node_launch == timedelta(minutes=45)
    page = _model_section(compare)
    assert "<tr><td>durations.node_launch</td><td>45m 00s</td><td>--node-launch</td>" in page
    assert "<tr><td>durations.reboot</td><td>8m 00s</td><td>--model</td>" in page
    assert "<tr><td>durations.gpu_reset</td><td>20s</td><td>default</td>" in page
    assert "<tr><td>operator.staff</td><td>1</td><td>--model</td>" in page


@pytest.mark.unit
def test_the_capacity_figures_are_listed_with_who_set_them(tmp_path: Path) -> None:
    from rich.console import Console

    from whatif.report import _model_section
    from whatif.runner import CompareRun

    model = tmp_path / "model.yaml"
    model.write_text(
        "capacity: {launch_sigma: 0.4, insufficient_capacity_probability: 0.5, "
        "capacity_block_relaunch: 8m}\n"
    )
    options = options_from(nodes=8, pools="h100", model=model, capacity_shortage=0.1)
    compare = CompareRun(options, ui=Console(quiet=True))
    capacity = compare.fleet_config.capacity
    assert capacity.insufficient_capacity_probability == 0.1  # the option wins
    assert capacity.launch_sigma == 0.4
    page = _model_section(compare)
    assert (
        "<tr><td>capacity.insufficient_capacity_probability</td><td>0.1</td>"
        "<td>--capacity-shortage</td>"
    ) in page
    assert "<tr><td>capacity.launch_sigma</td><td>0.4</td><td>--model</td>" in page
    assert "<tr><td>capacity.capacity_block_relaunch</td><td>8m 00s</td><td>--model</td>" in page
    assert "<tr><td>capacity.capacity_retry</td><td>3m 00s</td><td>default</td>" in page
    # Each figure says where it comes from, or that it is an assumption.
    assert "pkg/cache/cache.go" in page
    assert page.count("Assumption") >= 2


@pytest.mark.unit
def test_a_bad_model_file_is_refused_naming_the_option(tmp_path: Path) -> None:
    from whatif.options import compare_fleet

    model = tmp_path / "model.yaml"
    model.write_text("durations: {reboot: soon}\n")
    with pytest.raises(CompareError, match=r"--model: .*model\.yaml: durations\.reboot"):
        compare_fleet(options_from(nodes=8, pools="h100", model=model))
    model.write_text("workloads: {restart_delay: 1m}\n")
    with pytest.raises(CompareError, match=r"--model: workloads: .*\(--no-workloads\)"):
        compare_fleet(options_from(nodes=8, pools="h100", model=model, workloads=False))
    with pytest.raises(CompareError, match="--sweep job-nodes=2: --model"):
        parse_sweep(
            "job-nodes=2,4", options_from(nodes=8, pools="h100", model=model, workloads=False)
        )
