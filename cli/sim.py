"""``remediate sim``: run only the fleet simulator, and say how to point clients at it.

The simulator serves a Kubernetes API (the emulator) and an AWS API (moto: EC2
and SSM) on loopback ports. This command starts it, writes a kubeconfig and an
env file, prints how to point kubectl, the ``kubernetes`` client, boto3 and the
worker at it, prints a status line now and then, and runs until Ctrl-C (or
``--run-for`` simulated time), then stops cleanly and prints a summary.
"""

from __future__ import annotations

import logging
import signal
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import TypeAdapter, ValidationError

from gpu_remediation.policy import Duration

if TYPE_CHECKING:
    from simulator.fleet import Fleet, FleetConfig, FleetSnapshot

sim_app = typer.Typer()

_DURATION: TypeAdapter[timedelta] = TypeAdapter(Duration)


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


def _config(
    *,
    nodes: int,
    pools: str,
    scenario: Path | None,
    fault_mix: str | None,
    fault_multiplier: float,
    time_factor: float,
    seed: int,
    workloads: bool,
    job_nodes: int,
) -> FleetConfig:
    # The simulator needs moto (the [sim] extra): imported here, not at CLI start.
    from simulator.fleet import (
        FaultMix,
        FleetConfig,
        Scenario,
        ScenarioError,
        WorkloadConfig,
        parse_pools,
    )

    try:
        pool_specs = parse_pools(pools, nodes)
        loaded = Scenario.load(scenario) if scenario is not None else None
        mix_name = fault_mix or ("none" if loaded is not None else "llama3")
        if mix_name == "none":
            mix = None
        elif mix_name == "llama3":
            mix = FaultMix.llama3(fault_multiplier)
        else:
            base = FaultMix.load(Path(mix_name))
            mix = base.model_copy(update={"multiplier": base.multiplier * fault_multiplier})
        return FleetConfig(
            pools=pool_specs,
            time_factor=time_factor,
            seed=seed,
            scenario=loaded,
            fault_mix=mix,
            workloads=WorkloadConfig(job_nodes=job_nodes) if workloads else None,
        )
    except (ScenarioError, ValueError) as err:
        # pydantic's ValidationError is a ValueError: every bad option ends here.
        raise _fail(str(err)) from err


def instructions(fleet: Fleet, kubeconfig: Path, env_file: Path) -> str:
    """How to point kubectl, the Python clients, boto3 and the worker at ``fleet``."""
    env = fleet.env()
    exports = " ".join(f"{k}={v}" for k, v in env.items() if not k.startswith("GPU_"))
    return "\n".join(
        [
            f"Kubernetes API  {fleet.kube_url}  (no auth)",
            f"  kubectl:       KUBECONFIG={kubeconfig} kubectl get nodes",
            f"  Python:        kubernetes.config.load_kube_config({str(kubeconfig)!r})",
            "                 or kubernetes.client.ApiClient("
            f"kubernetes.client.Configuration(host={fleet.kube_url!r}))",
            f"AWS (moto)      {fleet.aws_endpoint_url}  region {fleet.region}  (EC2, SSM)",
            f"  shell:         export {exports}",
            f"  boto3:         boto3.client('ec2', endpoint_url={fleet.aws_endpoint_url!r}, "
            f"region_name={fleet.region!r}, aws_access_key_id='testing', "
            "aws_secret_access_key='testing')",
            "Worker          GPU_REMEDIATION_KUBE_API_URL="
            f"{env['GPU_REMEDIATION_KUBE_API_URL']} GPU_REMEDIATION_AWS_ENDPOINT_URL="
            f"{env['GPU_REMEDIATION_AWS_ENDPOINT_URL']} AWS_ACCESS_KEY_ID=testing "
            "AWS_SECRET_ACCESS_KEY=testing remediate worker",
            f"  all of these:  source {env_file}",
        ]
    )


def status_line(snapshot: FleetSnapshot) -> str:
    """One line of the fleet's true state."""
    hours = snapshot.sim_seconds / 3600
    faults = sum(v for k, v in snapshot.counters.items() if k.startswith("faults.from_"))
    parts = [
        f"t={hours:6.2f}h",
        f"nodes {snapshot.nodes_ready}/{snapshot.capacity} Ready",
        f"truly faulty {len(snapshot.truly_faulty)}",
        f"reported {len(snapshot.faulty_nodes)}",
        f"faults injected {faults}",
        f"reboots {snapshot.counters.get('reboots', 0)}",
        f"replaced {snapshot.counters.get('karpenter.terminations', 0)}",
        f"available {snapshot.availability['available']:.4%}",
    ]
    jobs = snapshot.jobs
    rate = None if jobs is None else jobs.get("success_rate")
    if jobs is not None and rate is not None:
        parts.append(f"job runs ok {rate:.2%}")
    elif jobs is not None:
        parts.append(f"jobs running {jobs['running']}/{jobs['jobs']}")
    return "  ".join(parts)


def _write_env(fleet: Fleet, path: Path) -> None:
    path.write_text("".join(f"export {k}={v}\n" for k, v in fleet.env().items()))


@sim_app.command("sim")
def sim(
    nodes: Annotated[
        int, typer.Option("--nodes", min=0, help="Nodes in all, split over pools without a count.")
    ] = 16,
    pools: Annotated[
        str,
        typer.Option(
            "--pools",
            help="Comma-separated NAME[:COUNT][:no-reset] (no-reset: EC2 blocks nvidia-smi -r).",
        ),
    ] = "gpu",
    scenario: Annotated[
        Path | None,
        typer.Option("--scenario", help="YAML file of scripted faults (events: at, fault, ...)."),
    ] = None,
    fault_mix: Annotated[
        str | None,
        typer.Option(
            "--fault-mix",
            help="Random faults: 'llama3' (default without --scenario), 'none', or a YAML file.",
            show_default=False,
        ),
    ] = None,
    fault_multiplier: Annotated[
        float, typer.Option("--fault-multiplier", min=0, help="Scale every rate of the mix.")
    ] = 1.0,
    time_factor: Annotated[
        float,
        typer.Option("--time-factor", min=0.001, help="Simulated seconds per real second."),
    ] = 1.0,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the fault mix.")] = 0,
    workloads: Annotated[
        bool, typer.Option("--workloads/--no-workloads", help="Run gang-scheduled training jobs.")
    ] = True,
    job_nodes: Annotated[int, typer.Option("--job-nodes", min=1, help="Nodes per job.")] = 4,
    kube_port: Annotated[
        int, typer.Option("--kube-port", min=0, help="Kubernetes API port (0: a free one).")
    ] = 0,
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out-dir", help="Where to write kubeconfig and sim.env (default: a temp dir)."
        ),
    ] = None,
    status_every: Annotated[
        float,
        typer.Option("--status-every", min=0, help="Real seconds between status lines (0: none)."),
    ] = 30.0,
    run_for: Annotated[
        str | None,
        typer.Option(
            "--run-for", help="Stop after this much simulated time (e.g. 24h).", show_default=False
        ),
    ] = None,
    verbose: Annotated[
        bool, typer.Option("-v", "--verbose", help="Log the simulator's events.")
    ] = False,
) -> None:
    """Run the fleet simulator (Kubernetes API + EC2/SSM) until Ctrl-C."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING)
    # moto's server logs every request at INFO.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    limit = None
    if run_for is not None:
        try:
            limit = _DURATION.validate_python(run_for).total_seconds()
        except ValidationError as err:
            raise _fail(f"--run-for {run_for!r}: not a duration (e.g. 90s, 30m, 24h)") from err
    config = _config(
        nodes=nodes,
        pools=pools,
        scenario=scenario,
        fault_mix=fault_mix,
        fault_multiplier=fault_multiplier,
        time_factor=time_factor,
        seed=seed,
        workloads=workloads,
        job_nodes=job_nodes,
    )
    from simulator.fleet import Fleet

    directory = out_dir or Path(tempfile.mkdtemp(prefix="remediate-sim-"))
    directory.mkdir(parents=True, exist_ok=True)
    typer.echo(f"starting {config.total_nodes} simulated GPU nodes ...")
    fleet = Fleet(config, kube_port=kube_port)
    try:
        fleet.start()
    except OSError as err:  # e.g. the --kube-port is taken
        raise _fail(f"cannot start the simulator: {err}") from err
    try:
        kubeconfig = fleet.write_kubeconfig(directory / "kubeconfig")
        env_file = directory / "sim.env"
        _write_env(fleet, env_file)
        pool_text = ", ".join(
            f"{p.name} ({p.nodes}{', no GPU reset' if not p.reset_supported else ''})"
            for p in config.pools
        )
        typer.echo(
            f"Fleet simulator up: pools {pool_text}; time factor {time_factor:g} "
            f"(1 real second = {time_factor:g} simulated seconds); seed {seed}"
        )
        typer.echo(instructions(fleet, kubeconfig, env_file))
        typer.echo(
            "Ctrl-C stops the simulator." if limit is None else f"Running for {run_for} simulated."
        )
        _serve(fleet, status_every, limit)
    finally:
        snapshot = fleet.snapshot()
        fleet.stop()
    typer.echo(f"stopped. {status_line(snapshot)}")


def _serve(fleet: Fleet, status_every: float, limit: float | None) -> None:
    done = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        del signum, frame
        done.set()

    previous: dict[signal.Signals, Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, on_signal)
    try:
        next_status = time.monotonic() + status_every if status_every else None
        while not done.is_set():
            waits = [1.0]
            if next_status is not None:
                waits.append(max(0.0, next_status - time.monotonic()))
            if limit is not None:
                waits.append(fleet.clock.to_real(limit - fleet.clock.now()))
            done.wait(max(0.0, min(waits)))
            if limit is not None and fleet.clock.now() >= limit:
                return
            if next_status is not None and time.monotonic() >= next_status:
                typer.echo(status_line(fleet.snapshot()))
                next_status = time.monotonic() + status_every
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
