"""``remediate demo``: the whole system on a simulated fleet (see ``demo/run.py``)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

demo_app = typer.Typer()


@demo_app.command("demo")
def demo(
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
        typer.Option(
            "--scenario",
            exists=True,
            dir_okay=False,
            help="YAML file of scripted faults (default: demo/scenarios/default.yaml, unless "
            "--fault-mix is given).",
            show_default=False,
        ),
    ] = None,
    fault_mix: Annotated[
        str | None,
        typer.Option(
            "--fault-mix",
            help="Random faults: 'llama3' (Meta's Llama 3 table), 'none', or a YAML file.",
            show_default=False,
        ),
    ] = None,
    fault_multiplier: Annotated[
        float, typer.Option("--fault-multiplier", min=0, help="Scale every rate of the mix.")
    ] = 1.0,
    policy: Annotated[
        Path | None,
        typer.Option(
            "--policy",
            exists=True,
            dir_okay=False,
            help="Policy YAML merged over the defaults (durations in simulated time; the demo "
            "divides them by the time factor).",
            show_default=False,
        ),
    ] = None,
    time_factor: Annotated[
        float,
        typer.Option("--time-factor", min=0.001, help="Simulated seconds per real second."),
    ] = 20.0,
    duration: Annotated[
        str | None,
        typer.Option(
            "--duration",
            help="Simulated time to run, e.g. 30m, 24h (default: 18m for the default scenario, "
            "the last event + 15m for a scenario, 1h for a fault mix alone).",
            show_default=False,
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the fault choices.")] = 0,
    json_output: Annotated[
        bool,
        typer.Option(
            "--json", help="Print the summary as one JSON object on the last line of stdout."
        ),
    ] = False,
    summary_svg: Annotated[
        Path | None,
        typer.Option(
            "--summary-svg",
            help="Also write the summary as an SVG picture of the terminal to this file.",
            dir_okay=False,
            show_default=False,
        ),
    ] = None,
    keep_running: Annotated[
        bool,
        typer.Option("--keep-running", help="Leave everything up after the summary, until Ctrl-C."),
    ] = False,
    port: Annotated[
        int,
        typer.Option("--port", min=0, help="Temporal frontend port (a free one if taken)."),
    ] = 7233,
    ui_port: Annotated[
        int, typer.Option("--ui-port", min=0, help="Temporal UI port (a free one if taken).")
    ] = 8233,
    workloads: Annotated[
        bool, typer.Option("--workloads/--no-workloads", help="Run gang-scheduled training jobs.")
    ] = True,
    settle_timeout: Annotated[
        float,
        typer.Option(
            "--settle-timeout",
            min=0,
            help="Real seconds to wait after --duration for open incidents to end.",
        ),
    ] = 120.0,
    chaos: Annotated[
        bool,
        typer.Option(
            "--chaos",
            help="Kill and restart the system's own parts at times drawn from --seed, then "
            "check its invariants (exit 3 if one breaks).",
        ),
    ] = False,
    chaos_kinds: Annotated[
        str,
        typer.Option(
            "--chaos-kinds",
            help="With --chaos: 'all' or a comma-separated list of worker_kill, "
            "watcher_restart, server_restart, kube_api_429, kube_api_500, kube_api_410, "
            "ssm_throttle, receiver_kill, kube_api_latency, ec2_throttle.",
        ),
    ] = "all",
    chaos_faults: Annotated[
        int, typer.Option("--chaos-faults", min=1, help="With --chaos: faults of each kind.")
    ] = 2,
    nvsentinel: Annotated[
        bool,
        typer.Option(
            "--nvsentinel",
            help="Also run NVIDIA NVSentinel's path: a simulated NVSentinel hands each Xid "
            "fault over as an ExternalRemediationRequest, the watcher takes it and writes "
            "the outcome back (docs/nvsentinel.md).",
        ),
    ] = False,
) -> None:
    """Run the remediation end to end on a simulated GPU fleet, then summarize.

    Starts a Temporal dev server (UI on), the fleet simulator, a worker and the
    node-condition watcher; injects faults; shows live progress; prints a
    summary (incidents by fault class and outcome, rungs used, MTTR,
    replacements against the cap, availability, the Temporal UI address).
    Ctrl-C stops everything. With --chaos, the worker, the watcher, the
    Temporal server and the Kubernetes API fail during the run and the summary
    says which invariants held. Exits 2 on invalid input, 1 when a part fails,
    3 when a chaos invariant breaks, 130 when interrupted.
    """
    # Imported here: the simulator and the worker's dependencies load only for the demo.
    from demo.run import DemoError, DemoRun, options_from

    # soft_wrap: notes and status lines stay one line each in logs and pipes.
    err = Console(stderr=True, soft_wrap=True)
    try:
        options = options_from(
            nodes=nodes,
            pools=pools,
            scenario=scenario,
            fault_mix=fault_mix,
            fault_multiplier=fault_multiplier,
            policy=policy,
            time_factor=time_factor,
            duration=duration,
            seed=seed,
            json_output=json_output,
            summary_svg=summary_svg,
            keep_running=keep_running,
            port=port,
            ui_port=ui_port,
            workloads=workloads,
            settle_timeout=settle_timeout,
            chaos=chaos,
            chaos_kinds=chaos_kinds,
            chaos_faults=chaos_faults,
            nvsentinel=nvsentinel,
        )
        run = DemoRun(options, out=Console(soft_wrap=True), err=err)
    except DemoError as error:
        err.print(f"error: {error}", markup=False, highlight=False)
        raise typer.Exit(2) from error
    try:
        code = asyncio.run(run.run())
    except (DemoError, RuntimeError, TimeoutError, OSError) as error:
        err.print(f"error: {error}", markup=False, highlight=False)
        err.print(f"logs: {run.run_dir}", markup=False, highlight=False)
        raise typer.Exit(1) from error
    raise typer.Exit(code)
