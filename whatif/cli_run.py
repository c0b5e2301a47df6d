"""The command's run: progress while the policies run, then the table and the report."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn

from demo.summary import duration_text
from whatif.chaos import render as render_chaos
from whatif.options import CompareError, CompareOptions
from whatif.results import admission_table, capacity_table, latency_warnings, table
from whatif.runner import CompareRun, PolicyResult
from whatif.runner import Progress as RunProgress
from whatif.sweep import Sweep, SweepPoint, run_sweep, tables


class CliCompare:
    """``remediate compare`` around :class:`CompareRun`.

    Args:
        options: What to run.
        out: Where the table goes (stdout; with --json only the JSON goes there).
        err: Where progress goes.

    Raises:
        CompareError: Bad input (before anything starts).
    """

    def __init__(self, options: CompareOptions, *, out: Console, err: Console) -> None:
        self.options = options
        self.ui = err if options.json_output else out
        self.err = err
        self.compare = CompareRun(options, ui=self.ui, on_progress=self._on_progress)
        self._bar = Progress(
            TextColumn("{task.description:<22}"),
            BarColumn(),
            TextColumn("{task.fields[sim]:>10} simulated"),
            TextColumn("{task.fields[incidents]:>5} incidents, {task.fields[open]:>4} open"),
            TextColumn("{task.fields[phase]}"),
            console=self.ui,
            disable=not options.live,
        )
        self._tasks: dict[int, TaskID] = {}

    async def run(self) -> list[PolicyResult]:
        """Run the comparison; print the table (and write the report)."""
        compare, options = self.compare, self.options
        timeline = compare.timeline
        self.ui.print(
            f"Comparing {len(compare.choices)} policies on {compare.fleet_config.total_nodes} "
            f"simulated GPU nodes for {duration_text(compare.duration.total_seconds())} each "
            + (
                f"(clock-free, steps of {options.step:g} s)"
                if compare.clock_free
                else f"(time factor {options.time_factor:g})"
            )
            + f"; fault timeline {timeline.digest}: "
            f"{timeline.planned} planned faults, {timeline.scripted_events} scripted events."
        )
        with self._bar:
            results = await compare.run()
        self.ui.print(table(results, title=f"What-if comparison, timeline {timeline.digest}"))
        self.ui.print(capacity_table(results))
        admission = admission_table(results)
        if admission is not None:
            self.ui.print(admission)
        for result in results:
            if result.chaos is not None:
                self.ui.print(render_chaos(result), markup=False, highlight=False)
        for warning in latency_warnings(results):
            self.err.print(warning, markup=False, highlight=False)
        if options.report is not None:
            from whatif.report import write_report

            write_report(options.report, compare, results)
            self.ui.print(f"Report: {options.report}")
        return results

    def _on_progress(self, progress: RunProgress) -> None:
        total = self.compare.duration.total_seconds()
        task = self._tasks.get(progress.index)
        sim = duration_text(progress.sim_seconds)
        if task is None:
            task = self._bar.add_task(
                progress.policy, total=total, sim=sim, incidents=0, open=0, phase=""
            )
            self._tasks[progress.index] = task
        self._bar.update(
            task,
            completed=progress.sim_seconds,
            sim=sim,
            incidents=progress.incidents,
            open=progress.open_incidents,
            phase=progress.phase,
        )


class CliSweep:
    """``remediate compare --sweep`` around :func:`~whatif.sweep.run_sweep`.

    Args:
        sweep: What to run (its options are each value's comparison).
        report: Where to write the sweep's HTML page, or None.
        json_output: Keep stdout for the JSON (notes go to ``err``).
        out: Where the tables go.
        err: Where notes go.
    """

    def __init__(
        self,
        sweep: Sweep,
        *,
        report: Path | None,
        json_output: bool,
        out: Console,
        err: Console,
    ) -> None:
        self.sweep = sweep
        self.report = report
        self.ui = err if json_output else out
        if report is not None and not report.parent.is_dir():
            raise CompareError(f"--report: no directory {report.parent}")

    async def run(self) -> list[SweepPoint]:
        """Run the comparison at each value; print the tables (and write the report)."""
        sweep = self.sweep
        base = sweep.options[0]
        self.ui.print(
            f"Sweeping {sweep.name} over {', '.join(sweep.values)}: at each value "
            f"{base.policies.count(',') + 1} policies on {base.nodes} simulated GPU nodes, "
            f"seed {base.seed}."
        )
        began = time.monotonic()
        points = await run_sweep(sweep, ui=self.ui, on_point=self._on_point(began))
        for metric_table in tables(sweep, points):
            self.ui.print(metric_table)
        if self.report is not None:
            from whatif.sweep import render

            self.report.write_text(render(sweep, points), encoding="utf-8")
            self.ui.print(f"Report: {self.report}")
        return points

    def _on_point(self, began: float) -> Callable[[SweepPoint], None]:
        def done(point: SweepPoint) -> None:
            self.ui.print(
                f"{self.sweep.name}={point.value}: done after "
                f"{duration_text(time.monotonic() - began)} (timeline {point.timeline})"
            )

        return done
