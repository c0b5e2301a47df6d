"""The admission gate on and off, compared on the same faulty arrivals (issue 20)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from temporalio.testing import WorkflowEnvironment

from whatif.options import options_from
from whatif.results import admission_table, comparison_json
from whatif.runner import CompareRun

ROOT = Path(__file__).resolve().parents[2]


async def test_the_gate_catches_dead_on_arrival_nodes_that_the_gateless_policy_lets_in(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    mix = tmp_path / "mix.yaml"
    # Hardware faults only a replacement fixes: every replacement is a launch, and
    # every launch comes up faulty.
    mix.write_text("rates: {gpu_hardware: 0.3}\nmultiplier: 1\n")
    # Most of the 8 nodes are faulty at once here, which opens the breaker and
    # holds every incident (its job); this test is about the gate, so the
    # breaker is off for both.
    policies = []
    for name in ("graded", "graded-no-admission"):
        text = (ROOT / "policies" / f"{name}.yaml").read_text()
        path = tmp_path / f"{name}.yaml"
        path.write_text(text + "\nbreaker: {max_unhealthy_fraction: 1.0}\n")
        policies.append(str(path))
    options = options_from(
        nodes=8,
        pools="h100",
        fault_mix=str(mix),
        duration="3h",
        seed=3,
        time_factor=900,
        policies=",".join(policies),
        workloads=False,
        # Dead-on-arrival nodes keep being replaced by new dead ones: incidents stay
        # open at the end whatever the wait, so there is no point in waiting long.
        settle_timeout=3,
        refresh_interval=0.5,
        live=False,
        parallel=2,
        new_node_fault_probability=1.0,
    )
    compare = CompareRun(options, ui=Console(quiet=True))
    results = await compare.run(dev_env.client)
    data = comparison_json(results)["policies"]

    gated, open_door = data["graded"], data["graded-no-admission"]
    facts = {
        name: (row["timeline"]["planned"], row["replacements"], row["nodes_replaced"])
        for name, row in data.items()
    }
    assert gated["faulty_arrivals"].get("arrival", 0) > 0, facts
    assert open_door["faulty_arrivals"].get("arrival", 0) > 0
    assert gated["admission"]["dead_on_arrival"] > 0
    assert open_door["admission"] is None  # no gate: nothing to count, nothing held back
    assert admission_table(results) is not None

    from whatif.report import write_report

    write_report(tmp_path / "report.html", compare, results)
    page = (tmp_path / "report.html").read_text()
    assert "Node admission (burn-in before work)" in page
    assert "comes up faulty with probability 1" in page
