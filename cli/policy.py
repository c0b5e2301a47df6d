"""``remediate policy``: check a policy file and show the packaged defaults."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from gpu_remediation.models import FaultClass
from gpu_remediation.policy import Policy
from gpu_remediation.policy_loader import (
    LadderStep,
    PolicyError,
    default_policy_text,
    effective_ladder,
    load_policy,
)

policy_app = typer.Typer(
    help="Check remediation policies and show the packaged defaults.", no_args_is_help=True
)

NOTIFY_ONLY = "notify only, node untouched"


def _duration(value: timedelta) -> str:
    """Render a duration the way policies write it ("90s", "10m", "7d")."""
    seconds = value.total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        # "24h" reads better than "1d"; whole days from two on.
        if unit == "d" and seconds < 2 * size:
            continue
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def _ladder_text(steps: list[LadderStep]) -> str:
    if not steps:
        return NOTIFY_ONLY
    parts = []
    for step in steps:
        if step.runs:
            parts.append(step.rung.value + (" (approval)" if step.requires_approval else ""))
        elif not step.enabled:
            parts.append(f"[dim strike]{step.rung.value}[/] (skipped)")
        else:
            parts.append(f"[dim]{step.rung.value} (not run)[/]")
    return " → ".join(parts)


def _override_paths(override: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The dotted paths an override sets, e.g. ``rungs.gpu_reset.enabled``."""
    paths = []
    for key, value in override.items():
        if isinstance(value, Mapping) and value:
            paths += _override_paths(value, f"{prefix}{key}.")
        else:
            paths.append(f"{prefix}{key}")
    return paths


def _pool_line(policy: Policy, pool: str | None) -> str:
    """What the tables below show: the base policy or a pool's effective one."""
    named = ", ".join(sorted(policy.pools))
    if pool is None:
        return f"per-pool overrides: {named} (see --pool NAME)" if named else ""
    if pool not in policy.pools:
        others = f" (pools with one: {named})" if named else ""
        return f"[yellow]pool {pool} has no override[/]: the base policy applies{others}"
    paths = _override_paths(policy.pools[pool].model_dump(mode="json"))
    return f"pool {pool}: its override merged in ({', '.join(paths)})"


def _print_tables(console: Console, file: Path, policy: Policy, pool_line: str = "") -> None:
    console.print(f"[green]OK[/]: {file} is a valid policy")
    if pool_line:
        console.print(pool_line)
    console.print(
        f"dry_run={policy.dry_run}  cooldown={_duration(policy.cooldown)}  "
        f"verification=level {policy.verification.diag_level}"
        f"{'' if policy.verification.enabled else ' (disabled)'}  "
        f"max concurrent replacements={policy.replacement.max_concurrent}  "
        f"breaker={policy.breaker.max_unhealthy_fraction:g} "
        f"(min {policy.breaker.min_unhealthy_nodes} nodes)  "
        f"repeat offender={policy.repeat_offender.incidents} in "
        f"{_duration(policy.repeat_offender.window)} → {policy.repeat_offender.start_rung}"
        f"{'' if policy.repeat_offender.enabled else ' (disabled)'}"
    )
    classes = Table(title="Effective ladder per fault class")
    classes.add_column("fault class", no_wrap=True)
    classes.add_column("start", no_wrap=True)
    classes.add_column("max", no_wrap=True)
    classes.add_column("grace", no_wrap=True)
    classes.add_column("ladder")
    for fault_class in FaultClass:
        fc = policy.fault_class(fault_class)
        classes.add_row(
            fault_class.value,
            fc.start_rung.value if fc.start_rung else "-",
            fc.max_rung.value,
            _duration(fc.grace),
            _ladder_text(effective_ladder(policy, fault_class)),
        )
    console.print(classes)
    rungs = Table(title="Rungs")
    for name in ("rung", "enabled", "timeout", "budget", "retries", "approval"):
        rungs.add_column(name, no_wrap=True)
    for rung, rp in policy.rungs.items():
        rungs.add_row(
            rung.value,
            "yes" if rp.enabled else "no",
            _duration(rp.timeout),
            f"{rp.max_attempts} per {_duration(rp.window)}",
            str(rp.retry.max_attempts),
            "required" if rp.requires_approval else "-",
        )
    console.print(rungs)


def _as_json(file: Path, policy: Policy) -> dict[str, Any]:
    ladders = {}
    for fault_class in FaultClass:
        fc = policy.fault_class(fault_class)
        steps = effective_ladder(policy, fault_class)
        ladders[fault_class.value] = {
            "start_rung": fc.start_rung.value if fc.start_rung else None,
            "max_rung": fc.max_rung.value,
            "grace_s": fc.grace.total_seconds(),
            "notify_only": not steps,
            "steps": [step.model_dump(mode="json") for step in steps],
        }
    return {
        "file": str(file),
        "valid": True,
        "ladders": ladders,
        "policy": policy.model_dump(mode="json"),
    }


@policy_app.command("check")
def check(
    file: Annotated[
        Path,
        typer.Argument(
            exists=True,
            dir_okay=False,
            metavar="FILE",
            help="Policy YAML, merged over the packaged defaults.",
        ),
    ],
    json_output: Annotated[
        bool, typer.Option("--json", help="Print one JSON object instead of tables.")
    ] = False,
    pool: Annotated[
        str | None,
        typer.Option(
            "--pool",
            metavar="NAME",
            help="Show node pool NAME's effective policy (its override under pools merged in).",
        ),
    ] = None,
) -> None:
    """Validate FILE and print the ladder each fault class would climb.

    With --pool NAME, the ladders and rungs are node pool NAME's: the policy
    with NAME's override (under pools) merged in, as its incidents run.
    Exits 1 when the policy is invalid (each problem is named by its dotted
    path) and 2 when FILE does not exist.
    """
    try:
        policy = load_policy(file)
    except PolicyError as err:
        typer.echo(str(err), err=True)
        raise typer.Exit(1) from err
    effective = policy.for_pool(pool)
    if json_output:
        data = _as_json(file, effective)
        if pool is not None:
            data["pool"] = {"name": pool, "has_override": pool in policy.pools}
        typer.echo(json.dumps(data, indent=2))
    else:
        _print_tables(Console(), file, effective, _pool_line(policy, pool))


@policy_app.command("show-defaults")
def show_defaults() -> None:
    """Print the packaged default policy (commented YAML); copy it to start your own."""
    typer.echo(default_policy_text(), nl=False)
