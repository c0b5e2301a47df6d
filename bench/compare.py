"""What-if benchmark: 1,000 nodes x 30 simulated days x 4 policies (target: 20 min, < 2 GiB).

Runs ``remediate compare`` itself (``whatif.runner.CompareRun``: one dev server,
then per policy a fresh fleet, worker process and watcher, ``--parallel`` of them
at once in child processes) with the Llama 3 mix at 1x, and measures the wall
time per policy (and its phases) and in all, the CPU of this process and of its
children, the CPU split by role (Temporal server, simulator, worker; sampled from
/proc, ``bench/proctree.py``) and the peak memory of all processes together.
``--quick`` (and ``--nodes``, ``--days``, ``--time-factor``, ``--policies``) run a
reduced size; the scaling from a reduced run is what the README reports until a
full run is made.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from bench.proctree import sampled
from policies import BASELINES
from whatif.factor_check import judge
from whatif.options import options_from
from whatif.results import comparison_json
from whatif.runner import CompareRun, PolicyResult

TARGET_S = 1200.0
TARGET_RSS_MIB = 2048.0

FACTOR_10K = 375.0
"""Time factor of issue 23's 10,000-node week: at 750 the simulator fell behind
(447-659x achieved, events late 300-900 s at p95; README, "At 10,000 nodes")."""


def _cpu() -> tuple[float, float]:
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


async def run(**size: Any) -> dict[str, Any]:
    """Measure one comparison (see ``measure``) and return the measurements."""
    return (await measure(**size))[0]


async def measure(
    *,
    quick: bool = False,
    nodes: int | None = None,
    days: float | None = None,
    time_factor: float | None = None,
    multiplier: float = 1.0,
    report: Path | None = None,
    policies: str | None = None,
    parallel: int | None = None,
    new_node_fault_probability: float = 0.0,
    reboot_fault_probability: float = 0.0,
) -> tuple[dict[str, Any], CompareRun, list[PolicyResult]]:
    """Run one comparison of every baseline; wall, CPU and RSS with the full JSON rows.

    ``parallel``: policies at once, each in a child process (None: as cores and
    memory allow, ``whatif.runner.lanes_for``; 1: one after another in this process).
    """
    nodes = nodes or (100 if quick else 1000)
    days = days or (1.0 if quick else 30.0)
    # With two policies side by side (ADR 015) each simulator keeps about 5,600 of
    # 6,000 at 1,000 nodes (6,500 of 7,200; 4,500 of 4,800): 6,000 fits the 20
    # minutes with room while stretching real latency as little as that allows.
    time_factor = time_factor or (2000.0 if quick else 6000.0)
    options = options_from(
        nodes=nodes,
        pools="h100,p5:no-reset",
        fault_mix="llama3",
        fault_multiplier=multiplier,
        duration=f"{days * 24:g}h",
        time_factor=time_factor,
        policies=policies or ",".join(BASELINES),
        settle_timeout=60,
        refresh_interval=2.0,
        live=False,
        parallel=parallel,
        new_node_fault_probability=new_node_fault_probability,
        reboot_fault_probability=reboot_fault_probability,
    )
    compare = CompareRun(options, ui=Console(quiet=True))
    cpu0, started = _cpu(), time.monotonic()
    async with sampled() as tree:
        results = await compare.run()
    wall = time.monotonic() - started
    cpu1 = _cpu()
    rss_self = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rss_kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    if report is not None:
        from whatif.report import write_report

        write_report(report, compare, results)
    per_policy = {r.name: round(r.summary.wall_seconds, 1) for r in results}
    measured = {
        "nodes": nodes,
        "days": days,
        "time_factor": time_factor,
        "multiplier": multiplier,
        "new_node_fault_probability": new_node_fault_probability,
        "reboot_fault_probability": reboot_fault_probability,
        "policies": len(results),
        "parallel": compare.lanes,
        "wall_s": round(wall, 1),
        "wall_per_policy_s": per_policy,
        "phases_per_policy_s": {r.name: r.timing for r in results},
        "achieved_factor": {r.name: r.clock.get("achieved_factor") for r in results},
        "cpu_self_s": round(cpu1[0] - cpu0[0], 1),
        "cpu_children_s": round(cpu1[1] - cpu0[1], 1),
        "peak_rss_self_mib": round(rss_self, 1),
        "peak_rss_largest_child_mib": round(rss_kids, 1),
        # Sampled from /proc each second (bench/proctree.py): CPU by role (the bench
        # process holds the simulator when the policies run in it) and the memory of
        # every process at once.
        "cpu_by_role_s": tree.cpu_by_role(),
        "processes_by_role": tree.processes(),
        "peak_rss_all_mib": round(tree.peak_rss_mib, 1),
        "peak_rss_by_role_mib": {k: round(v, 1) for k, v in tree.peak_rss_by_role_mib.items()},
        "target_s": TARGET_S,
        "target_rss_mib": TARGET_RSS_MIB,
        "planned_faults": compare.timeline.planned,
        "digest": compare.timeline.digest,
        "comparison": comparison_json(results),
    }
    return measured, compare, results


async def run_10k(*, quick: bool = False) -> dict[str, Any]:
    """Issue 23's size: 10,000 nodes x 7 days x 4 policies, llama3 mix at 1x.

    There is no target at this size: the result is its time and memory, and
    whether every incident settled (``ok``). Quick: 1,000 nodes x 1 day.
    """
    if quick:
        result = await run(nodes=1000, days=1.0, time_factor=1500.0)
    else:
        result = await run(nodes=10_000, days=7.0, time_factor=FACTOR_10K)
    result["ok"] = all(p["settled"] for p in result["comparison"]["policies"].values())
    return result


def summary_rows_10k(r: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """The 10,000-node week's rows: time, memory, and how well the simulator kept up."""
    size = f"{r['nodes']} nodes x {r['days']:g} d x {r['policies']} policies"
    clocks = [p["clock"] for p in r["comparison"]["policies"].values()]
    achieved = [c["achieved_factor"] for c in clocks]
    late = max(c["late_p95_s"] for c in clocks)
    return [
        ("compare_10k", f"wall, {size}", f"{r['wall_s']:.0f} s", ""),
        ("compare_10k", "peak RSS in all (sampled)", f"{r['peak_rss_all_mib']:.0f} MiB", ""),
        (
            "compare_10k",
            f"factor achieved (asked {r['time_factor']:g}), late p95",
            f"{min(achieved):.0f}-{max(achieved):.0f}, {late:.0f} s",
            "",
        ),
    ]


async def factor_check(
    factors: tuple[float, float],
    *,
    nodes: int,
    days: float,
    multiplier: float,
    report: Path | None = None,
) -> dict[str, Any]:
    """The same comparison at two time factors: same fault digest, outcomes within noise."""
    runs = [
        await run(nodes=nodes, days=days, time_factor=f, multiplier=multiplier) for f in factors
    ]
    verdict = judge(factors, runs[0]["comparison"]["policies"], runs[1]["comparison"]["policies"])
    return {
        "nodes": nodes,
        "days": days,
        "multiplier": multiplier,
        "wall_s": [r["wall_s"] for r in runs],
        "factor_check": verdict.as_json(),
    }


def summary_rows(r: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    size = f"{r['nodes']} nodes x {r['days']:g} d x {r['policies']} policies"
    return [
        ("compare", f"wall, {size}", f"{r['wall_s']:.0f} s", "<= 1200 s at full size"),
        (
            "compare",
            "CPU self / children",
            f"{r['cpu_self_s']:.0f} / {r['cpu_children_s']:.0f} s",
            "",
        ),
        (
            "compare",
            "CPU by role",
            ", ".join(f"{k} {v:.0f} s" for k, v in r.get("cpu_by_role_s", {}).items()),
            "",
        ),
        (
            "compare",
            "peak RSS in all (sampled)",
            f"{r.get('peak_rss_all_mib', 0):.0f} MiB",
            "< 2048 MiB in all",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--days", type=float)
    parser.add_argument("--time-factor", type=float)
    parser.add_argument("--multiplier", type=float, default=1.0)
    parser.add_argument("--report", type=Path, help="also write the HTML report here")
    parser.add_argument(
        "--policies", help="comma-separated baseline names or policy files (default: all four)"
    )
    parser.add_argument(
        "--parallel",
        type=int,
        help="policies at once, each in a child process (default: as cores and memory allow; "
        "1: one after another in this process)",
    )
    parser.add_argument(
        "--new-node-fault-probability",
        type=float,
        default=0.0,
        help="chance a launched node comes up faulty (an assumption: no public figure)",
    )
    parser.add_argument(
        "--reboot-fault-probability",
        type=float,
        default=0.0,
        help="chance a rebooted node comes back faulty (an assumption: no public figure)",
    )
    parser.add_argument("--out", type=Path, help="also write the JSON result here")
    parser.add_argument(
        "--factor-check",
        type=float,
        metavar="FACTOR",
        help="run twice, at --time-factor and at FACTOR, and judge (same digest, within noise)",
    )
    args = parser.parse_args()
    if args.factor_check is not None:
        if args.time_factor is None:
            parser.error("--factor-check needs --time-factor (the first factor)")
        result = asyncio.run(
            factor_check(
                (args.time_factor, args.factor_check),
                nodes=args.nodes or 200,
                days=args.days or 2.0,
                multiplier=args.multiplier,
                report=args.report,
            )
        )
        text = json.dumps(result, indent=2)
        if args.out is not None:
            args.out.write_text(text + "\n", encoding="utf-8")
        print(text)
        return
    result = asyncio.run(
        run(
            quick=args.quick,
            nodes=args.nodes,
            days=args.days,
            time_factor=args.time_factor,
            multiplier=args.multiplier,
            report=args.report,
            policies=args.policies,
            parallel=args.parallel,
            new_node_fault_probability=args.new_node_fault_probability,
            reboot_fault_probability=args.reboot_fault_probability,
        )
    )
    text = json.dumps(result, indent=2)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
