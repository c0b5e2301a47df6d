"""``remediate compare --chaos``: each policy survives the same seeded chaos, judged per policy."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console
from temporalio.testing import WorkflowEnvironment

from demo.chaos.driver import plan
from demo.chaos.session import InvariantView
from whatif.chaos import violations
from whatif.options import options_from
from whatif.report import render
from whatif.results import comparison_json, table
from whatif.runner import CompareRun

KINDS = ("worker_kill", "watcher_restart", "kube_api_429", "ec2_throttle")
INVARIANTS = {
    "incidents_lost",
    "duplicate_incidents",
    "reboots_per_decision",
    "resets_done_twice",
    "replacements_done_twice",
    "replacements_within_cap",
    "permits_leaked",
    "nodes_left_quarantined",
    "workflows_failed_or_stuck",
    "steps_within_budget",
    "actions_on_pinned_machine",
}

pytestmark = pytest.mark.timeout(180)


async def test_two_baselines_each_survive_the_same_chaos_plan_with_every_invariant_held(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    mix = tmp_path / "mix.yaml"
    # Hardware faults only a replacement fixes, and resettable ones: a few in the hour.
    mix.write_text("rates: {gpu_hardware: 0.2, xid_reset: 0.2}\nmultiplier: 1\n")
    options = options_from(
        nodes=8,
        pools="h100",
        fault_mix=str(mix),
        duration="1h",
        seed=5,
        time_factor=600,
        policies="no-automation,replace-always",
        workloads=False,
        settle_timeout=30,
        refresh_interval=0.5,
        live=False,
        parallel=2,
        chaos=True,
        chaos_kinds=",".join(KINDS),
        chaos_faults=1,
    )
    compare = CompareRun(options, ui=Console(quiet=True))
    results = await compare.run(dev_env.client)
    data = comparison_json(results)["policies"]

    planned = dict((kind, at) for at, kind in plan(5, KINDS, 1, 3600.0))
    for name, row in data.items():
        chaos = row["chaos"]
        assert chaos["faults_injected"] == dict.fromkeys(KINDS, 1), name
        assert set(chaos["invariants"]) == INVARIANTS
        assert chaos["violations"] == [], (name, chaos["violations"])
        # Planned on the simulated clock: no fault before its simulated time.
        for fault in chaos["faults"]:
            assert fault["sim_s"] >= planned[fault["kind"]] - 1.0, (name, fault)
    assert violations(results) == []

    console = Console(record=True, width=250)
    console.print(table(results, title="t"))
    text = console.export_text()
    assert "chaos viol." in text
    assert "0 (4 faults)" in text
    page = render(compare, results)
    assert "Chaos: the system's own parts killed during each run" in page
    assert "Not the Temporal server restart" in page

    # A broken invariant is reported naming the policy and what the checker named.
    broken = results[1].chaos
    assert broken is not None
    named = "duplicate_incidents: node gpu-0003: incidents whatif-x-gpu-0003-1, -2"
    views = dict(broken.invariants)
    views["duplicate_incidents"] = InvariantView(checked="c", violations=[named[21:]])
    results[1] = results[1].model_copy(
        update={"chaos": broken.model_copy(update={"violations": [named], "invariants": views})}
    )
    assert violations(results) == [f"replace-always: {named}"]
    assert "<b>FAIL</b> duplicate_incidents" in render(compare, results)
