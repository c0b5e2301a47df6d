"""What-if benchmark: 1,000 nodes x 30 simulated days x 4 policies (target: 20 min, < 2 GiB).

Runs ``remediate compare`` itself (``whatif.runner.CompareRun``: one dev server,
then per policy a fresh fleet, worker process and watcher, ``--parallel`` of them
at once in child processes) with the Llama 3 mix at 1x, and measures the wall
time per policy (and its phases) and in all, the CPU of this process and of its
children, the CPU split by role (Temporal server, simulator, worker; sampled from
/proc, ``bench/proctree.py``) and the peak memory of all processes together.
``--quick`` (and ``--nodes``, ``--days``, ``--time-factor``, ``--policies``) run a
reduced size; the scaling from a reduced run is what docs/benchmarks.md reports until a
full run is made.

``--factor-check`` runs the same comparison (same seed) at ``--time-factor F`` and at
F/4 and judges it strictly (``whatif/factor_check.py``: at least 100 incidents per
policy, availability within 0.01 points, every count within 5%, MTTR p50 on the
simulator's clock within 10%); ``--noise-run`` adds a third run at F whose
difference from the first is the measured noise a tolerance may widen to. It prints
the verdict's table on stderr and exits 1 when the check fails, 2 when it refuses
(bad input, too few incidents). ``--judge A.json B.json [NOISE.json]`` judges runs
already written. Every run warns on stderr when the system's own real latency adds
more than 1% of a policy's MTTR p50 (``whatif/latency.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from bench.proctree import sampled
from policies import BASELINES
from whatif.factor_check import (
    FACTOR_RATIO,
    FactorCheck,
    FactorCheckError,
    check_factors,
    check_incidents,
    judge,
    read_run,
    text_table,
)
from whatif.lane_files import LaneMergeError, code_commit, merge_lanes, write_lanes
from whatif.options import options_from
from whatif.results import comparison_json, latency_warnings
from whatif.runner import CompareRun, PolicyResult
from whatif.server_time import DEFAULT_STEP

TARGET_S = 1200.0
TARGET_RSS_MIB = 2048.0

FACTOR_10K = 375.0
"""Time factor of issue 23's 10,000-node week: at 750 the simulator fell behind
(447-659x achieved, events late 300-900 s at p95; docs/benchmarks.md, "compare_10k")."""


FACTOR_CHECK_NODES = 1000
FACTOR_CHECK_DAYS = 3.0
"""The factor check's size without --nodes and --days (issue 40's: with --multiplier 10,
more than 100 incidents per policy)."""


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
    seed: int = 0,
    clock: str = "paced",
    step: float = DEFAULT_STEP,
    step_phase: float = 0.0,
    lanes_out: Path | None = None,
) -> tuple[dict[str, Any], CompareRun, list[PolicyResult]]:
    """Run one comparison of every baseline; wall, CPU and RSS with the full JSON rows.

    ``parallel``: policies at once, each in a child process (None: as cores and
    memory allow, ``whatif.runner.lanes_for``; 1: one after another in this process).
    ``lanes_out``: also keep each policy's whole result there (``whatif.lane_files``).
    """
    # Before minutes of running: a lane file must name the code that made it.
    commit = code_commit() if lanes_out is not None else None
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
        seed=seed,
        clock=clock,
        step=step,
        step_phase=step_phase,
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
    measured = {
        **comparison_facts(compare, results),
        "parallel": compare.lanes,
        "wall_s": round(wall, 1),
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
    }
    if lanes_out is not None:
        assert commit is not None
        cost = {k: v for k, v in measured.items() if k != "comparison"}
        write_lanes(lanes_out, options, results, cost, commit)
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


def comparison_facts(compare: CompareRun, results: list[PolicyResult]) -> dict[str, Any]:
    """What a comparison computed (no measurement of its cost): the JSON's common part."""
    options = compare.options
    return {
        "nodes": options.nodes,
        "days": compare.duration.total_seconds() / 86_400,
        "time_factor": options.time_factor,
        # Clock-free (ADR 018) the factor plays no part; the step is what may not matter.
        "clock": options.clock,
        "step": options.step,
        "step_phase": options.step_phase,
        "multiplier": options.fault_multiplier,
        "new_node_fault_probability": options.new_node_fault_probability,
        "reboot_fault_probability": options.reboot_fault_probability,
        "seed": options.seed,
        # What two runs must share to be judged side by side (whatif/factor_check.py).
        "fleet": {
            "nodes": options.nodes,
            "pools": options.pools,
            "fault_mix": options.fault_mix,
            "multiplier": options.fault_multiplier,
            "duration_s": compare.duration.total_seconds(),
            "new_node_fault_probability": options.new_node_fault_probability,
            "reboot_fault_probability": options.reboot_fault_probability,
            "policies": [c.source for c in compare.choices],
        },
        "policies": len(results),
        "wall_per_policy_s": {r.name: round(r.summary.wall_seconds, 1) for r in results},
        "phases_per_policy_s": {r.name: r.timing for r in results},
        "achieved_factor": {r.name: r.clock.get("achieved_factor") for r in results},
        "latency_warnings": latency_warnings(results),
        "planned_faults": compare.timeline.planned,
        "digest": compare.timeline.digest,
        "comparison": comparison_json(results),
    }


def merge(paths: list[Path], report: Path | None) -> dict[str, Any]:
    """``--merge``: one comparison from lane files (``whatif.lane_files``), its JSON.

    Raises:
        LaneMergeError: Files that are not one comparison's lanes.
    """
    options, lanes = merge_lanes(paths)
    results = [lane.result for lane in lanes]
    with tempfile.TemporaryDirectory(prefix="remediate-merge-") as run_dir:
        compare = CompareRun(options, ui=Console(quiet=True), run_dir=Path(run_dir))
        if report is not None:
            from whatif.report import write_report

            write_report(report, compare, results)
    return {
        **comparison_facts(compare, results),
        "commit": lanes[0].commit,
        # Each lane's own run: a merged comparison has no one wall time.
        "merged_from": [
            {
                "file": str(path),
                "policy": lane.result.name,
                "wall_s": lane.measured.get("wall_s"),
                "parallel": lane.measured.get("parallel"),
                "policies_in_run": lane.measured.get("policies"),
                "cpu_by_role_s": lane.measured.get("cpu_by_role_s"),
                "peak_rss_all_mib": lane.measured.get("peak_rss_all_mib"),
            }
            for path, lane in zip(paths, lanes, strict=True)
        ],
    }


def second_factor(first: float, asked: float | None) -> float:
    """The factor-check's second factor: ``asked``, or ``first`` / 4.

    Raises:
        FactorCheckError: One factor only, or not 4x apart.
    """
    second = first / FACTOR_RATIO if asked is None else asked
    check_factors(first, second)
    return second


async def factor_check(
    factors: tuple[float, float],
    *,
    noise_runs: int = 0,
    report: Path | None = None,
    **size: Any,
) -> tuple[dict[str, Any], FactorCheck | None, str | None]:
    """The same comparison (same seed) at two factors 4x apart, judged strictly.

    The higher factor runs first (it is the faster): a policy with fewer than 100
    incidents there is refused before the slower run. ``noise_runs`` more runs
    repeat the first factor; clock-free, run k of N moves the step grid by k/(N+1)
    of a step (a repeat on the same grid replays the same run, so it measures no
    noise). ``size``: ``measure``'s keywords.

    Returns:
        The JSON (the verdict and every run), the verdict (None when refused) and
        the refusal (None when judged).
    """
    check_factors(*factors)
    clock = str(size.get("clock", "paced"))
    setting = "step" if clock == "server" else "time_factor"
    order = sorted(range(2), key=lambda i: -factors[i])
    runs: dict[str, dict[str, Any]] = {}
    first_compare: tuple[CompareRun, list[PolicyResult]] | None = None
    # "f": factor or step; each entry (key, factor, step phase).
    plan = [(f"f{factors[i]:g}", factors[i], 0.0) for i in order]
    for k in range(1, noise_runs + 1):
        key = f"f{factors[0]:g}-noise" + (str(k) if noise_runs > 1 else "")
        plan.append((key, factors[0], k / (noise_runs + 1) if clock == "server" else 0.0))
    refusal: str | None = None
    for key, factor, phase in plan:
        varied: dict[str, Any] = {setting: factor}
        if phase:
            varied["step_phase"] = phase
        measured, compare, results = await measure(**varied, **size)
        runs[key] = measured
        for warning in latency_warnings(results):
            print(warning, file=sys.stderr)
        if factor == factors[0] and first_compare is None:
            first_compare = compare, results
        try:
            word = "step" if clock == "server" else "factor"
            check_incidents(read_run(measured, f"the run at {word} {factor:g}"))
        except FactorCheckError as err:
            refusal = str(err)
            break
    verdict: FactorCheck | None = None
    if refusal is None:
        try:
            verdict = judge(
                runs[f"f{factors[0]:g}"],
                runs[f"f{factors[1]:g}"],
                *(runs[key] for key, _, _ in plan[2:]),
            )
        except FactorCheckError as err:
            refusal = str(err)
    if report is not None and first_compare is not None:
        from whatif.report import write_report

        write_report(report, *first_compare, verdict, refusal)
    result = {
        "factor_check": verdict.as_json() if verdict is not None else None,
        "refused": refusal,
        "runs": runs,
    }
    return result, verdict, refusal


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
    parser.add_argument("--seed", type=int, default=0, help="the comparison's seed")
    parser.add_argument(
        "--clock",
        choices=("paced", "server"),
        default="paced",
        help="paced: the fleet at --time-factor beside a dev server; server: clock-free "
        "(ADR 018), each policy on a time-skipping test server the fleet follows",
    )
    parser.add_argument(
        "--step",
        type=float,
        default=DEFAULT_STEP,
        help="with --clock server: the fleet clock's step, simulated seconds; with "
        "--factor-check the check runs at this step and at a quarter of it",
    )
    parser.add_argument(
        "--step-phase",
        type=float,
        default=0.0,
        help="with --clock server: move the step grid by this fraction of a step, 0 to <1 "
        "(what the factor check's noise runs vary)",
    )
    parser.add_argument(
        "--factor-check",
        type=float,
        nargs="?",
        const=0.0,
        metavar="FACTOR",
        help="run at --time-factor F and at F/4 (or at FACTOR, 4x apart), the same seed, and "
        "judge strictly (whatif/factor_check.py); exit 1 when it fails, 2 when it refuses "
        "(default size 1,000 nodes x 3 days: give --multiplier 10 for 100 incidents a policy)",
    )
    parser.add_argument(
        "--noise-run",
        action="store_const",
        const=1,
        default=0,
        dest="noise_runs",
        help="with --factor-check: one more run at F (--noise-runs 1)",
    )
    parser.add_argument(
        "--noise-runs",
        type=int,
        default=0,
        metavar="N",
        help="with --factor-check: N more runs at F (clock-free: the step grid moved by "
        "k/(N+1) of a step); the largest difference from the first is the measured noise a "
        "tolerance may widen to (no further)",
    )
    parser.add_argument(
        "--judge",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="judge two results already written (and any more, noise runs), no run",
    )
    parser.add_argument(
        "--lanes-out",
        type=Path,
        metavar="DIR",
        help="also keep each policy's whole result in DIR (<policy>.json), for --merge",
    )
    parser.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="one comparison (--out, --report) from lane files of separate runs, no run",
    )
    args = parser.parse_args()
    for option, path in (("--report", args.report), ("--out", args.out)):
        if path is not None and not path.parent.is_dir():
            parser.error(f"{option}: no directory {path.parent}")  # before minutes of runs
    if args.lanes_out is not None and not args.lanes_out.is_dir():
        parser.error(f"--lanes-out: no directory {args.lanes_out}")
    if args.judge is not None:
        sys.exit(_judge_files(args.judge, args.out))
    if args.merge is not None:
        sys.exit(_merge_files(args.merge, args.out, args.report))
    if not 0 <= args.step_phase < 1:
        parser.error(f"--step-phase: a fraction of a step, 0 to below 1, not {args.step_phase:g}")
    if args.step_phase and args.factor_check is not None:
        parser.error("--step-phase: not with --factor-check (its noise runs set it)")
    if args.noise_runs and args.factor_check is None:
        parser.error("--noise-run(s): only with --factor-check")
    if not 0 <= args.noise_runs <= 8:
        parser.error(f"--noise-runs: 0 to 8, not {args.noise_runs}")
    if args.factor_check is not None:
        sys.exit(_factor_check(args))
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
            seed=args.seed,
            clock=args.clock,
            step=args.step,
            step_phase=args.step_phase,
            lanes_out=args.lanes_out,
        )
    )
    for warning in result["latency_warnings"]:
        print(warning, file=sys.stderr)
    text = json.dumps(result, indent=2)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)


def _merge_files(paths: list[Path], out: Path | None, report: Path | None) -> int:
    """``--merge FILE...``: the merged comparison's JSON (and report); the exit code."""
    try:
        result = merge(paths, report)
    except LaneMergeError as err:
        print(f"merge refused: {err}", file=sys.stderr)
        return 2
    for warning in result["latency_warnings"]:
        print(warning, file=sys.stderr)
    text = json.dumps(result, indent=2)
    if out is not None:
        out.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


def _refused(message: str) -> int:
    print(f"factor check refused: {message}", file=sys.stderr)
    return 2


def _judged(verdict: FactorCheck) -> int:
    print(text_table(verdict), file=sys.stderr)
    return 0 if verdict.passed else 1


def _factor_check(args: argparse.Namespace) -> int:
    """``--factor-check``: refuse bad factors before running, run, judge; the exit code."""
    # Clock-free there is no factor: what must not matter is the step.
    if args.clock == "server":
        first = args.step
    else:
        first = args.time_factor or (2000.0 if args.quick else 6000.0)
    try:
        second = second_factor(first, args.factor_check or None)
    except FactorCheckError as err:
        return _refused(str(err))
    result, verdict, refusal = asyncio.run(
        factor_check(
            (first, second),
            noise_runs=args.noise_runs,
            report=args.report,
            quick=args.quick,
            nodes=args.nodes or (100 if args.quick else FACTOR_CHECK_NODES),
            days=args.days or (1.0 if args.quick else FACTOR_CHECK_DAYS),
            multiplier=args.multiplier,
            policies=args.policies,
            parallel=args.parallel,
            new_node_fault_probability=args.new_node_fault_probability,
            reboot_fault_probability=args.reboot_fault_probability,
            seed=args.seed,
            clock=args.clock,
        )
    )
    text = json.dumps(result, indent=2)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")
        for key, run in result["runs"].items():
            path = args.out.with_name(f"{args.out.stem}-{key}.json")
            path.write_text(json.dumps(run, indent=2) + "\n", encoding="utf-8")
    print(text)
    if refusal is not None:
        return _refused(refusal)
    assert verdict is not None
    return _judged(verdict)


def _judge_files(paths: list[Path], out: Path | None) -> int:
    """``--judge A B [NOISE...]``: the verdict over results already written; the exit code."""
    if len(paths) < 2:
        return _refused(f"--judge takes two result files and any noise runs, not {len(paths)}")
    docs = []
    for path in paths:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            return _refused(f"{path}: {err}")
        try:
            docs.append(read_run(doc, str(path)))
        except FactorCheckError as err:
            return _refused(str(err))
    try:
        verdict = judge(*docs)
    except FactorCheckError as err:
        return _refused(str(err))
    text = json.dumps({"factor_check": verdict.as_json()}, indent=2)
    if out is not None:
        out.write_text(text + "\n", encoding="utf-8")
    print(text)
    return _judged(verdict)


if __name__ == "__main__":
    main()
