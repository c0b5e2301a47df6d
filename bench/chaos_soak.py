"""Chaos soak: a 500-node simulated day, dozens of kills of every kind, every invariant checked.

Runs ``remediate demo --chaos`` itself (``demo.run.DemoRun``: dev server, fleet
simulator, ``remediate worker``, the watcher, the Alertmanager receiver and the
simulated Alertmanager) on 500 nodes with a simulated day of the Llama 3 fault
mix times ``MULTIPLIER``, and ``PER_KIND`` faults of every chaos kind
(``demo.chaos.driver.KINDS``) at seeded times. Reports the faults injected by
kind, the incidents, every invariant's violations (the target: none), the wall
time and the peak resident memory of the whole process tree (``bench.proctree``).

Restarts are injected one after another (a part must be back before the next
is killed), so a plan of many restarts can outlast the simulated day: the run
waits for it, then for the incidents to settle.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import time
from datetime import timedelta
from typing import Any

from rich.console import Console

from bench.proctree import sampled
from demo.run import CHAOS_VIOLATED, DemoOptions, DemoRun

NODES = 500
DURATION = timedelta(hours=24)
MULTIPLIER = 20.0
TIME_FACTOR = 240.0
PER_KIND = 24
SETTLE_TIMEOUT_S = 300.0


async def run(quick: bool = False) -> dict[str, Any]:
    """Run the soak (``quick``: 60 nodes, 2 simulated hours, 3 faults of each kind)."""
    quick_size = (60, timedelta(hours=2), 3)
    nodes, duration, per_kind = quick_size if quick else (NODES, DURATION, PER_KIND)
    options = DemoOptions(
        nodes=nodes,
        fault_mix="llama3",
        fault_multiplier=MULTIPLIER,
        duration=duration,
        time_factor=TIME_FACTOR,
        port=0,
        ui_port=0,
        refresh_interval=2.0,
        settle_timeout=SETTLE_TIMEOUT_S,
        chaos=True,
        chaos_faults=per_kind,
        seed=21,
        live=False,
    )
    demo = DemoRun(options, out=Console(file=io.StringIO()), err=Console(file=io.StringIO()))
    started = time.monotonic()
    async with sampled(interval=2.0) as usage:
        code = await demo.run()
    wall = time.monotonic() - started
    report, summary = demo.chaos_report, demo.summary
    if report is None or summary is None or code not in (0, CHAOS_VIOLATED):
        raise RuntimeError(f"the chaos soak ended with {code} and no chaos report")
    return {
        "nodes": nodes,
        "simulated_hours": duration.total_seconds() / 3600,
        "fault_multiplier": MULTIPLIER,
        "time_factor": TIME_FACTOR,
        "per_kind": per_kind,
        "faults_injected": report.faults_injected,
        "faults_total": sum(report.faults_injected.values()),
        "incidents": summary.incidents,
        "violations": report.violations,
        "invariants": {name: len(view.violations) for name, view in report.invariants.items()},
        "wall_s": round(wall, 1),
        "peak_rss_mib": round(usage.peak_rss_mib),
        "peak_rss_by_role_mib": {k: round(v) for k, v in usage.peak_rss_by_role_mib.items()},
        "ok": code == 0 and not report.violations,
    }


def summary_rows(r: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Rows for ``bench.run_all``'s summary table."""
    kinds = ", ".join(f"{k} {v}" for k, v in r["faults_injected"].items())
    return [
        (
            "chaos_soak",
            f"{r['nodes']} nodes, {r['simulated_hours']:.0f} h, {r['faults_total']} faults "
            f"({kinds}): invariant violations",
            str(len(r["violations"])),
            "0",
        ),
        (
            "chaos_soak",
            "incidents / wall time / peak RSS of the process tree",
            f"{r['incidents']} / {r['wall_s']:.0f} s / {r['peak_rss_mib']} MiB",
            "",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="60 nodes, 2 h, 3 of each kind")
    args = parser.parse_args()
    result = asyncio.run(run(quick=args.quick))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
