"""Live progress in the terminal: a table of incidents and a progress bar.

On a terminal, a ``rich.live.Live`` display redrawn about once a second: the
simulated time against the run's duration, the fleet's true state (nodes
Ready, faults injected, reboots, replacements in flight against the cap,
availability) and a table of the incidents, newest first (node, pool, the
fault the simulator injected, the fault class the remediation found, the
rung, and the outcome or what it is waiting for). Elsewhere (a pipe, a log
file, ``--json``) a plain status line every few seconds instead.
"""

from __future__ import annotations

import time
from collections import defaultdict
from datetime import UTC, datetime
from types import TracebackType

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn
from rich.table import Table
from rich.text import Text

from demo.incidents import Incident
from demo.summary import duration_text
from simulator.fleet import FleetSnapshot, InjectedFault

MAX_ROWS = 18
PLAIN_EVERY = 5.0

_OUTCOME_STYLE = {
    "repaired": "green",
    "recovered": "green",
    "replaced": "cyan",
    "transient": "dim",
    "application_fault": "yellow",
    "no_fault_found": "dim",
    "escalated": "red",
    "aborted": "red",
    "node_gone": "dim",
}


class ProgressView:
    """Draws the demo's progress; use as a context manager around the run.

    Args:
        console: Where to draw (stderr when stdout carries JSON).
        title: The headline (fleet, time factor, UI address).
        duration_s: The run's simulated duration, for the progress bar.
        replacement_cap: The policy's cap on concurrent replacements.
        time_factor: Simulated seconds per real second (incident ages are shown simulated).
    """

    def __init__(
        self,
        console: Console,
        *,
        title: str,
        duration_s: float,
        replacement_cap: int,
        time_factor: float,
    ) -> None:
        self._console = console
        self._title = title
        self._duration = duration_s
        self._cap = replacement_cap
        self._time_factor = time_factor
        self._live: Live | None = None
        self._next_plain = 0.0
        self._progress = Progress(
            TextColumn("[bold]simulated time"),
            BarColumn(bar_width=40),
            TaskProgressColumn(),
            TextColumn("{task.description}"),
            console=console,
        )
        self._task = self._progress.add_task("", total=max(duration_s, 1.0))

    @property
    def live(self) -> bool:
        """Whether the display redraws in place (a terminal)."""
        return self._console.is_terminal

    def __enter__(self) -> ProgressView:
        if self.live:
            self._live = Live(console=self._console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._live is not None:
            self._live.__exit__(exc_type, exc, tb)
            self._live = None

    def update(
        self,
        snapshot: FleetSnapshot,
        incidents: list[Incident],
        faults: list[InjectedFault],
        *,
        phase: str,
    ) -> None:
        """Redraw with the fleet's state and the incidents as last seen."""
        sim = snapshot.sim_seconds
        self._progress.update(
            self._task,
            completed=min(sim, self._duration),
            description=f"{duration_text(sim)} of {duration_text(self._duration)}  {phase}",
        )
        if self._live is not None:
            self._live.update(self._render(snapshot, incidents, faults))
            return
        now = time.monotonic()
        if now >= self._next_plain:
            self._next_plain = now + PLAIN_EVERY
            self._console.print(plain_line(snapshot, incidents, self._duration, phase))

    def _render(
        self, snapshot: FleetSnapshot, incidents: list[Incident], faults: list[InjectedFault]
    ) -> RenderableType:
        return Group(
            Text(self._title, style="bold"),
            self._progress.get_renderable(),
            Text(fleet_line(snapshot, self._cap)),
            self._table(incidents, faults),
        )

    def _table(self, incidents: list[Incident], faults: list[InjectedFault]) -> Table:
        injected: dict[str, list[str]] = defaultdict(list)
        for fault in faults:
            injected[fault.node].append(fault.kind.value)
        shown = sorted(incidents, key=lambda i: i.started_at, reverse=True)[:MAX_ROWS]
        more = len(incidents) - len(shown)
        caption = f"{len(incidents)} incidents" + (f", newest {len(shown)} shown" if more else "")
        table = Table(caption=caption, expand=False)
        for column in ("node", "pool", "fault injected", "fault class", "rung", "status", "age"):
            table.add_column(column, no_wrap=True)
        now = datetime.now(UTC)
        for incident in shown:
            result = incident.result
            state = incident.state
            if result == "open" and state is not None and state.waiting_for:
                status = Text(f"waiting for {state.waiting_for}", style="italic")
            elif result == "open":
                status = Text(f"{state.stage if state else 'triage'} ...", style="italic")
            else:
                status = Text(result, style=_OUTCOME_STYLE.get(result, ""))
            age = (now - incident.started_at).total_seconds() * self._time_factor
            table.add_row(
                incident.node,
                incident.pool or "",
                ", ".join(injected.get(incident.node, [])) or "",
                incident.fault_class or "",
                incident.rung or "",
                status,
                duration_text(age) if result == "open" else "",
            )
        return table


def fleet_line(snapshot: FleetSnapshot, cap: int) -> str:
    """The fleet's true state in one line."""
    counters = snapshot.counters
    injected = sum(v for k, v in counters.items() if k.startswith("faults.from_"))
    return (
        f"nodes Ready {snapshot.nodes_ready}/{snapshot.capacity}  "
        f"faults injected {injected}  truly faulty {len(snapshot.truly_faulty)}  "
        f"reboots {counters.get('reboots', 0)}  "
        f"replaced {counters.get('karpenter.terminations', 0)} (cap {cap} at once; "
        f"terminating now {snapshot.replacements_in_flight})  "
        f"availability {snapshot.availability['available']:.3%}"
    )


def plain_line(
    snapshot: FleetSnapshot, incidents: list[Incident], duration_s: float, phase: str
) -> str:
    """One status line for logs and pipes."""
    results: dict[str, int] = defaultdict(int)
    for incident in incidents:
        results[incident.result] += 1
    outcome_text = ", ".join(f"{k} {v}" for k, v in sorted(results.items())) or "none yet"
    return (
        f"[{duration_text(snapshot.sim_seconds)} / {duration_text(duration_s)} simulated, "
        f"{phase}] incidents {len(incidents)} ({outcome_text}); "
        f"reboots {snapshot.counters.get('reboots', 0)}, "
        f"replaced {snapshot.counters.get('karpenter.terminations', 0)}, "
        f"availability {snapshot.availability['available']:.3%}"
    )
