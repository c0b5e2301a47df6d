"""``remediate compare``: the same faults under several policies (see ``whatif/``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

if TYPE_CHECKING:
    from whatif.options import CompareOptions

compare_app = typer.Typer()


@compare_app.command("compare")
def compare(
    nodes: Annotated[
        int, typer.Option("--nodes", min=1, help="Simulated GPU nodes, split over the pools.")
    ] = 40,
    pools: Annotated[
        str,
        typer.Option(
            "--pools",
            help="Comma-separated NAME[:COUNT][:no-reset] (no-reset: EC2 blocks nvidia-smi -r).",
        ),
    ] = "h100,p5:no-reset",
    scenario: Annotated[
        Path | None,
        typer.Option("--scenario", help="YAML file of scripted faults.", show_default=False),
    ] = None,
    fault_mix: Annotated[
        str,
        typer.Option(
            "--fault-mix",
            help="Random faults: 'llama3' (Meta's Llama 3 table, its published rate), 'none', "
            "or a mix file (rates per node-hour; simulator/README.md).",
        ),
    ] = "llama3",
    fault_multiplier: Annotated[
        float, typer.Option("--fault-multiplier", help="Scale every rate of the mix.")
    ] = 1.0,
    policies: Annotated[
        str,
        typer.Option(
            "--policies",
            help="Comma-separated built-in policies (the baselines no-automation, "
            "replace-always, reboot-then-replace, graded; also graded-no-admission, graded "
            "with the burn-in gate off) or policy files.",
        ),
    ] = "no-automation,replace-always,reboot-then-replace,graded",
    time_factor: Annotated[
        float,
        typer.Option(
            "--time-factor", help="Simulated seconds per real second (--clock paced only)."
        ),
    ] = 600.0,
    clock: Annotated[
        str,
        typer.Option(
            "--clock",
            help="'paced': the fleet runs --time-factor times real time beside a Temporal dev "
            "server. 'server' (clock-free, docs/adr/018): each policy on a Temporal "
            "time-skipping test server whose clock the fleet follows, so the system's own "
            "latency adds no simulated time and no factor is needed.",
        ),
    ] = "paced",
    step: Annotated[
        float,
        typer.Option(
            "--step",
            help="With --clock server: simulated seconds the fleet's clock moves at most at "
            "once (an event between two steps runs at the later one).",
        ),
    ] = 15.0,
    duration: Annotated[
        str | None,
        typer.Option(
            "--duration",
            help="Simulated time per policy, e.g. 24h, 30d (default 6h; a scenario: its last "
            "event + 15m).",
            show_default=False,
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the fault timeline.")] = 0,
    json_output: Annotated[
        bool,
        typer.Option("--json", help='Print {"policies": {NAME: {...}}} as the last stdout line.'),
    ] = False,
    report: Annotated[
        Path | None,
        typer.Option(
            "--report", help="Write a self-contained HTML report here.", show_default=False
        ),
    ] = None,
    workloads: Annotated[
        bool, typer.Option("--workloads/--no-workloads", help="Run gang-scheduled training jobs.")
    ] = True,
    operator: Annotated[
        bool,
        typer.Option(
            "--operator/--no-operator", help="Simulate the people who answer escalations."
        ),
    ] = True,
    settle_timeout: Annotated[
        float,
        typer.Option(
            "--settle-timeout", help="Real seconds per policy to wait for open incidents."
        ),
    ] = 60.0,
    parallel: Annotated[
        int | None,
        typer.Option(
            "--parallel",
            min=1,
            help="Policies run at once, each in a process of its own (default: as many as "
            "cores and memory allow; 1: one after another).",
            show_default=False,
        ),
    ] = None,
    new_node_fault_probability: Annotated[
        float,
        typer.Option(
            "--new-node-fault-probability",
            help="Chance a node Karpenter launches comes up faulty (dead on arrival; default "
            "0: no public figure, so any value is an assumption the report states).",
        ),
    ] = 0.0,
    reboot_fault_probability: Annotated[
        float,
        typer.Option(
            "--reboot-fault-probability",
            help="Chance a node comes back from a reboot faulty (default 0, as above).",
        ),
    ] = 0.0,
    model: Annotated[
        Path | None,
        typer.Option(
            "--model",
            help="YAML file of the simulator's assumptions to replace: durations, workloads, "
            "operator, each holding only what it changes (docs/what-if.md).",
            show_default=False,
        ),
    ] = None,
    job_nodes: Annotated[
        int | None,
        typer.Option(
            "--job-nodes",
            min=1,
            help="Nodes of every gang-scheduled training job (default: a large fleet's mix "
            "of 128-, 32-, 8- and 1-node gangs with no retry budget; docs/what-if.md).",
            show_default=False,
        ),
    ] = None,
    node_launch: Annotated[
        str | None,
        typer.Option(
            "--node-launch",
            help="How long a node Karpenter launches takes to be Ready, e.g. 5m, 20m "
            "(default: the simulator's 5m).",
            show_default=False,
        ),
    ] = None,
    capacity_shortage: Annotated[
        float | None,
        typer.Option(
            "--capacity-shortage",
            help="Chance a launch attempt of Karpenter's finds no capacity (EC2 "
            "InsufficientInstanceCapacity), 0 to 1; the next attempt is 3 minutes later "
            "(default 0: no public rate, so any value is an assumption the report states).",
            show_default=False,
        ),
    ] = None,
    slow_fault_multiplier: Annotated[
        float | None,
        typer.Option(
            "--slow-fault-multiplier",
            min=0,
            help="Times the fault mix's rate of its slow faults (its extra_rates, e.g. "
            "bench/mixes/llama3-slow.yaml); the hard faults stay the same.",
            show_default=False,
        ),
    ] = None,
    lemon_share: Annotated[
        float | None,
        typer.Option(
            "--lemon-share",
            help="Share of the fleet's hosts that are lemons, 0 to 1: each faults 226 times "
            "as often as the mix says (or the mix file's lemons factor), until a "
            "replacement brings a fresh host (default: the mix's own; llama3 has none).",
            show_default=False,
        ),
    ] = None,
    sweep: Annotated[
        str | None,
        typer.Option(
            "--sweep",
            help="NAME=V1,V2,...: run the whole comparison at each value and draw each "
            "policy's availability, GPU-hours lost and job success against it. NAME: "
            "node-launch, fault-multiplier, job-nodes, new-node-fault-probability, "
            "reboot-fault-probability, capacity-shortage, lemon-share, slow-fault-multiplier. "
            "--report writes "
            "the sweep's page; "
            '--json prints {"sweep": ..., "points": [...]}.',
            show_default=False,
        ),
    ] = None,
    chaos: Annotated[
        bool,
        typer.Option(
            "--chaos",
            help="During each policy's run, kill the system's own parts (the same seeded plan "
            "at the same simulated times for every policy), then check its invariants. Not "
            "the Temporal server restart of 'remediate demo --chaos': the policies share one "
            "server, side by side; nor the alert receiver: a comparison runs none.",
        ),
    ] = False,
    chaos_kinds: Annotated[
        str | None,
        typer.Option(
            "--chaos-kinds",
            help="With --chaos: 'all' (default) or a comma-separated list of worker_kill, "
            "watcher_restart, kube_api_429, kube_api_500, kube_api_410, kube_api_latency, "
            "ssm_throttle, ec2_throttle.",
            show_default=False,
        ),
    ] = None,
    chaos_faults: Annotated[
        int | None,
        typer.Option(
            "--chaos-faults",
            help="With --chaos: faults of each kind per policy (default 2).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run one fault timeline under several policies, each through the real system.

    Per policy a fresh simulated fleet (same seed: same faults at the same times on the
    same node slots), the worker, the workflows and the watcher, on one Temporal dev
    server; then a table (and --json, --report). Exits 2 on invalid input (nothing
    starts), 1 when a part fails, 3 when a --chaos invariant breaks (naming the policy
    and the incident).
    """
    from whatif.options import CompareError, options_from

    err = Console(stderr=True, soft_wrap=True)
    try:
        options = options_from(
            nodes=nodes,
            pools=pools,
            scenario=scenario,
            fault_mix=fault_mix,
            fault_multiplier=fault_multiplier,
            policies=policies,
            time_factor=time_factor,
            clock=clock,
            step=step,
            duration=duration,
            seed=seed,
            json_output=json_output,
            report=report,
            workloads=workloads,
            operator=operator,
            settle_timeout=settle_timeout,
            parallel=parallel,
            new_node_fault_probability=new_node_fault_probability,
            reboot_fault_probability=reboot_fault_probability,
            model=model,
            job_nodes=job_nodes,
            node_launch=node_launch,
            capacity_shortage=capacity_shortage,
            lemon_share=lemon_share,
            slow_fault_multiplier=slow_fault_multiplier,
            chaos=chaos,
            chaos_kinds=chaos_kinds,
            chaos_faults=chaos_faults,
        )
        if sweep is not None:
            _sweep(sweep, options, err)
            return
        # Imported here: the simulator and the worker's dependencies load only now.
        from whatif.cli_run import CliCompare

        run = CliCompare(options, out=Console(soft_wrap=True), err=err)
    except CompareError as error:
        err.print(f"error: {error}", markup=False, highlight=False)
        raise typer.Exit(2) from error
    try:
        results = asyncio.run(run.run())
    except (CompareError, RuntimeError, TimeoutError, OSError) as error:
        err.print(f"error: {error}", markup=False, highlight=False)
        err.print(f"logs: {run.compare.run_dir}", markup=False, highlight=False)
        raise typer.Exit(1) from error
    if json_output:
        from whatif.results import comparison_json

        out = Console(soft_wrap=True)
        out.file.write(json.dumps(comparison_json(results)) + "\n")
        out.file.flush()
    from whatif.chaos import CHAOS_VIOLATED, violations

    broken = violations(results)
    if broken:
        for line in broken:
            err.print(f"chaos invariant broken: {line}", markup=False, highlight=False)
        raise typer.Exit(CHAOS_VIOLATED)


def _sweep(text: str, options: CompareOptions, err: Console) -> None:
    """``--sweep``: the comparison at each value (exits 1 when a part fails).

    Raises:
        CompareError: Bad input, before anything runs.
    """
    from whatif.cli_run import CliSweep
    from whatif.options import CompareError
    from whatif.sweep import parse_sweep, sweep_json

    parsed = parse_sweep(text, options)
    run = CliSweep(
        parsed,
        report=options.report,
        json_output=options.json_output,
        out=Console(soft_wrap=True),
        err=err,
    )
    try:
        points = asyncio.run(run.run())
    except (CompareError, RuntimeError, TimeoutError, OSError) as error:
        err.print(f"error: {error}", markup=False, highlight=False)
        raise typer.Exit(1) from error
    if options.json_output:
        out = Console(soft_wrap=True)
        out.file.write(json.dumps(sweep_json(parsed, points)) + "\n")
        out.file.flush()
