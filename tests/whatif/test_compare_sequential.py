"""One policy in this process, its checkpoint relay in a process of its own."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from temporalio.testing import WorkflowEnvironment

from whatif.options import options_from
from whatif.results import comparison_json
from whatif.runner import CompareRun


async def test_a_policy_with_jobs_runs_here_with_its_relay_beside_it(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    mix = tmp_path / "mix.yaml"
    mix.write_text("rates: {gpu_hardware: 0.3}\nmultiplier: 1\n")
    options = options_from(
        nodes=8,
        pools="h100",
        fault_mix=str(mix),
        duration="1h",
        seed=5,
        time_factor=600,
        policies="graded",
        settle_timeout=20,
        refresh_interval=0.5,
        live=False,
        parallel=4,  # more than the policies: one lane, in this process
    )
    compare = CompareRun(options, ui=Console(quiet=True))
    assert compare.lanes == 1
    results = await compare.run(dev_env.client)
    row = comparison_json(results)["policies"]["graded"]

    assert row["timeline"]["planned"] > 0
    assert row["jobs"] is not None  # the graded policy coordinates with the jobs
    assert row["timing"]["relay_start"] > 0  # its relay ran, in a process of its own
    # MTTR on the simulator's clock: present whenever MTTR is.
    assert (row["mttr_clock_p50_s"] is None) == (row["mttr_p50_s"] is None)
    assert row["clock"]["requested_factor"] == 600
    assert row["timing"]["refreshes"] >= 1
