"""Run the benchmarks, print a summary and write bench/results/latest.json.

``make bench`` runs them all at full size;
``--quick`` is a smoke run (about a minute); ``--only NAME`` (repeatable) picks
benchmarks; ``--strict`` exits with 1 when a target is missed. A quick or
partial run writes ``latest-quick.json`` / ``latest-partial.json`` instead, so
the full run's ``latest.json`` stays.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from bench import (
    agent,
    alert_storm,
    chaos_soak,
    ladder,
    memory,
    semaphore,
    simulator,
    watcher,
    workers,
)
from bench import compare as compare_bench
from bench import demo as demo_bench
from bench.common import RESULTS_DIR, machine_notes

BENCHMARKS: dict[str, Callable[[bool], Awaitable[dict[str, Any]]]] = {
    "ladder": lambda quick: ladder.run(quick=quick),
    "semaphore": lambda quick: semaphore.run(quick=quick),
    "semaphore_1000": lambda quick: semaphore.run_1000(quick=quick),
    "workers": lambda quick: workers.run(quick=quick),
    "memory": lambda quick: memory.run(quick=quick),
    "simulator": lambda quick: simulator.run(quick=quick),
    "alert_storm": lambda quick: alert_storm.run(quick=quick),
    # Issue 23's 10,000-node sizes (quick: 1,000 nodes).
    "simulator_10k": lambda quick: simulator.run_10k(quick=quick),
    "watcher_10k": lambda quick: watcher.run_10k(quick=quick),
    "alert_storm_10k": lambda quick: alert_storm.run_10k(quick=quick),
    "compare_10k": lambda quick: compare_bench.run_10k(quick=quick),
    "agent": lambda quick: agent.run(quick=quick),
    "demo": lambda quick: demo_bench.run(quick=quick),
    "compare": lambda quick: compare_bench.run(quick=quick),
    "chaos_soak": lambda quick: chaos_soak.run(quick=quick),
}


def _summary_rows(results: dict[str, dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    rows: list[tuple[str, str, str, str]] = []
    if "ladder" in results:
        r = results["ladder"]
        n, k = r["ladder"]["workflows"], r["activities_per_incident"]
        rows += [
            ("ladder", f"{n} incidents, full ladder", f"{r['ladder']['seconds']:.1f} s", ""),
            (
                "ladder",
                f"baseline {n} x {k} no-op activities",
                f"{r['baseline']['seconds']:.1f} s",
                "",
            ),
            ("ladder", "ratio ladder / baseline (wall)", f"{r['ratio']:.2f}", "<= 1.5"),
            ("ladder", "ratio ladder / baseline (CPU)", f"{r['cpu_ratio']:.2f}", ""),
        ]
    for name in ("semaphore", "semaphore_1000"):
        if name in results:
            rows += semaphore.summary_rows(results[name])
    if "workers" in results:
        rows += workers.summary_rows(results["workers"])
    if "memory" in results:
        r = results["memory"]
        rows += [
            (
                "memory",
                f"worker RSS, {r['workflows']} open incidents",
                f"{r['rss_loaded_mb']:.0f} MiB",
                "< 500 MiB",
            ),
            ("memory", "per incident (above idle worker)", f"{r['per_workflow_kb']:.0f} KiB", ""),
        ]
    for name in ("simulator", "simulator_10k"):
        if name in results:
            rows += simulator.summary_rows(results[name])
    if "watcher_10k" in results:
        rows += watcher.summary_rows(results["watcher_10k"])
    for name in ("alert_storm", "alert_storm_10k"):
        if name in results:
            rows += alert_storm.summary_rows(results[name])
    if "agent" in results:
        rows += agent.summary_rows(results["agent"])
    if "demo" in results:
        rows += demo_bench.summary_rows(results["demo"])
    if "compare" in results:
        rows += compare_bench.summary_rows(results["compare"])
    if "compare_10k" in results:
        rows += compare_bench.summary_rows_10k(results["compare_10k"])
    if "chaos_soak" in results:
        rows += chaos_soak.summary_rows(results["chaos_soak"])
    return rows


def _print_summary(results: dict[str, dict[str, Any]]) -> None:
    rows = [("bench", "measure", "value", "target"), *_summary_rows(results)]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    print()
    for index, row in enumerate(rows):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
        if index == 0:
            print("  ".join("-" * width for width in widths))
    for name, result in results.items():
        print(f"{name}: {'OK' if result.get('ok') else 'MISSED TARGET'}")


async def main_async(names: list[str], quick: bool) -> dict[str, Any]:
    """Run the named benchmarks one after the other."""
    results: dict[str, dict[str, Any]] = {}
    started = time.perf_counter()
    for name in names:
        results[name] = await BENCHMARKS[name](quick)
    return {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": quick,
        "seconds": round(time.perf_counter() - started, 1),
        "machine": machine_notes(),
        "results": results,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    parser.add_argument(
        "--only", action="append", choices=sorted(BENCHMARKS), help="run only this (repeatable)"
    )
    parser.add_argument(
        "--strict", action="store_true", help="exit with 1 when a benchmark misses its target"
    )
    args = parser.parse_args()
    names = args.only or list(BENCHMARKS)
    report = asyncio.run(main_async(names, args.quick))
    _print_summary(report["results"])
    full = not args.quick and names == list(BENCHMARKS)
    name = "latest.json" if full else ("latest-quick.json" if args.quick else "latest-partial.json")
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / name
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written {path}")
    missed = not all(r.get("ok") for r in report["results"].values())
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())
