"""Runs a comparison: one Temporal dev server, then each policy on a fresh copy of the system.

Per policy (one after another, or ``parallel`` at a time, each in a child
process of its own: ``whatif.lanes``): a new simulated fleet (same configuration and seed, so the
same fault timeline), a new worker process and a new node-condition watcher
(``demo.stack.DemoStack``, exactly what ``remediate demo`` runs), under the
policy scaled to the time factor (``demo.policy``). Each policy has its own
cluster name, task queue and replacement semaphore on the shared server, so
nothing of one run reaches another. The fleet is sampled while it runs (healthy
nodes, replacements, GPU-hours lost); at the end of the simulated duration the
fleet's accounting is read, and once every incident has its outcome (or
``settle_timeout`` real seconds later) the incidents are summarized by
``demo.summary.summarize``, the same summary the demo prints, with MTTR also
measured on the simulator's clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict
from rich.console import Console
from temporalio.client import Client

from demo.admission_summary import AdmissionSummary, admission_results, summarize_admissions
from demo.chaos.session import ChaosReport, ChaosSession
from demo.incidents import Incident, IncidentBook
from demo.policy import clock_free_policy, scale_policy
from demo.run import (
    SIM_POLL_INTERVAL,
    real_poll_interval,
    real_watcher_backoff,
    real_watcher_tick,
)
from demo.server import connect, dev_server
from demo.stack import DemoStack, StackOptions
from demo.summary import DemoSummary, summarize
from gpu_remediation import decision_log as log_words
from simulator.fleet import Fleet, FleetConfig, FleetSnapshot
from simulator.fleet.capacity import CapacityReport
from simulator.fleet.clock import SteppedClock
from simulator.kube_api.resources import NODES, PODS
from whatif.chaos import chaos_session, violations
from whatif.latency import LatencyShare
from whatif.latency import measure as measure_latency
from whatif.logs import log_to
from whatif.options import (
    CompareError,
    CompareOptions,
    PolicyChoice,
    compare_fleet,
    resolve_policies,
)
from whatif.parent_close import OrphanedGuardRelease
from whatif.relay import RelayProcess
from whatif.server_time import ServerTimeDriver, WriteGate, caught_up, time_skipping_server
from whatif.timeline import Timeline, timeline

log = logging.getLogger("gpu_remediation.compare")

LANE_MIB = 800.0
"""Memory one policy running in a child process takes at most, with its worker (1,000 nodes)."""
LEFT_FREE_MIB = 1024.0
"""Memory kept for the Temporal server, this process and the rest of the machine."""


class Sample(BaseModel):
    """The fleet at one moment of a run (simulated time)."""

    model_config = ConfigDict(frozen=True)

    sim_hours: float
    available_nodes: int
    nodes_replaced: int
    gpu_hours_lost: float
    incidents: int


class PolicyResult(BaseModel):
    """One policy's run: the demo's summary plus what the comparison adds."""

    model_config = ConfigDict(frozen=True)

    name: str
    source: str
    summary: DemoSummary
    escalations: int
    nodes_replaced: int
    gpu_hours_lost: float
    faults_skipped: int
    operator: dict[str, int]
    timeline: Timeline
    settled: bool
    samples: list[Sample]
    clock: dict[str, float | int]
    """The simulated clock's pacing (``SimClock.lag_report``): requested and achieved
    time factor, simulated time held back, how late the simulator's events ran."""
    faulty_arrivals: dict[str, int] = {}
    """Nodes that came up faulty, by how (``arrival``: launched, ``reboot_arrival``)."""
    timing: dict[str, float] = {}
    """Real seconds of the run's phases: ``start`` (fleet, worker, watcher),
    ``window`` (the simulated duration, on the simulator's scheduler), ``settle`` (open
    incidents after it), ``stop``; ``refresh`` (the incidents' lists and queries, in all,
    beside the rest) over ``refreshes`` rounds; ``latency`` (reading the resolved
    incidents' histories after the stop, ``whatif.latency``)."""
    chaos: ChaosReport | None = None
    """With ``--chaos``: the faults injected and the invariants checked (``whatif.chaos``)."""
    latency: LatencyShare | None = None
    """The simulated time the system's real latency added per incident, next to MTTR
    (``whatif.latency``: what is measured and what is not)."""
    capacity: CapacityReport | None = None
    """Launches, launch attempts without capacity, node-hours short and overlap
    instance-hours at the window's end (``simulator.fleet.capacity``, issue 36); None in
    lane files written before it was counted."""


@dataclass
class Progress:
    """What the progress display shows of the policy running now."""

    policy: str = ""
    index: int = 0
    sim_seconds: float = 0.0
    incidents: int = 0
    open_incidents: int = 0
    phase: str = "starting"
    done: list[str] = field(default_factory=list)


def gpus_per_node(config: FleetConfig) -> float:
    """The fleet's GPUs per node (pools may differ)."""
    nodes = config.total_nodes
    return sum(p.nodes * p.gpus_per_node for p in config.pools) / nodes if nodes else 0.0


def gpu_hours_lost(snapshot: FleetSnapshot, gpus: float) -> float:
    """GPU-hours not available so far: unavailable node-seconds times GPUs per node."""
    report = snapshot.availability
    return (1.0 - report["available"]) * report["node_seconds"] / 3600.0 * gpus


def available_now(fleet: Fleet) -> int:
    """Nodes healthy and open to work at this moment (what availability integrates)."""
    with fleet.lock:
        return sum(1 for n in fleet.nodes.values() if n.available)


def escalations(incidents: list[Incident]) -> int:
    """Incidents that handed their node to a person."""
    return sum(
        1
        for i in incidents
        if i.state is not None
        and any(
            d.stage == log_words.ESCALATE_STAGE and log_words.is_handed_over(d.action)
            for d in i.state.decisions
        )
    )


class CompareRun:
    """A comparison, checked up front (nothing starts on bad input), then :meth:`run`.

    Args:
        options: What to run.
        ui: Where progress and notes go.
        on_progress: Called with the progress after each sample (the CLI's display).

    Raises:
        CompareError: Bad input, naming the option.
    """

    def __init__(
        self,
        options: CompareOptions,
        *,
        ui: Console,
        on_progress: Callable[[Progress], None] | None = None,
        tag: str | None = None,
        run_dir: Path | None = None,
    ) -> None:
        self.options = options
        self.choices: list[PolicyChoice] = resolve_policies(options.policies)
        self.fleet_config, self.duration = compare_fleet(options)
        self.fleet_config = self.fleet_config.model_copy(update={"faults_until": self.duration})
        self.clock_free = options.clock == "server"
        # On the test server's clock a policy runs as written: nothing is scaled.
        self.time_factor = 1.0 if self.clock_free else options.time_factor
        try:
            self.scaled = [
                clock_free_policy(c.policy)
                if self.clock_free
                else scale_policy(c.policy, options.time_factor)
                for c in self.choices
            ]
        except ValueError as err:
            raise CompareError(f"--time-factor: {err}") from err
        self.timeline = timeline(self.fleet_config, self.duration)
        self.ui = ui
        self.on_progress = on_progress
        self.progress = Progress()
        if options.report is not None and not options.report.parent.is_dir():
            raise CompareError(f"--report: no directory {options.report.parent}")
        self.run_dir = run_dir or Path(tempfile.mkdtemp(prefix="remediate-compare-"))
        self.results: list[PolicyResult] = []
        self.tag = tag or uuid.uuid4().hex[:6]
        self.lanes = lanes_for(options, len(self.choices))

    async def run(self, client: Client | None = None) -> list[PolicyResult]:
        """Run every policy, one after the other; the results in ``--policies`` order.

        Args:
            client: A client of a running server to use (tests); None starts a dev server.
        """
        with log_to(self.run_dir / "compare.log"):
            if client is not None:
                await self._all(client, client.service_client.config.target_host)
            elif self.clock_free:
                await self._all(None, "")  # each policy starts a test server of its own
            else:
                async with dev_server(
                    label="remediate-compare", ui=False, directory=self.run_dir
                ) as server:
                    await self._all(await connect(server.address), server.address)
        self._clean_up()
        return self.results

    def _clean_up(self) -> None:
        """Remove the run's files unless something failed (the logs say what).

        An exception leaves them (this is not reached); so does a broken chaos
        invariant, which the run survives but whose incidents need reading.
        """
        if violations(self.results):
            self.ui.print(f"logs: {self.run_dir}", markup=False, highlight=False)
            return
        shutil.rmtree(self.run_dir, ignore_errors=True)

    async def _all(self, client: Client | None, address: str) -> None:
        if self.lanes > 1:
            from whatif.lanes import run_lanes

            self.results = await run_lanes(
                self, address, client.namespace if client is not None else "default"
            )
            return
        for index in range(len(self.choices)):
            self.results.append(await self.run_policy(index, client, address))

    async def run_policy(self, index: int, client: Client | None, address: str) -> PolicyResult:
        """Run the policy ``--policies`` lists at ``index`` on a fresh system (this process).

        Clock-free, on a time-skipping test server of its own (``client`` is not used:
        the server's clock is the policy's alone).
        """
        choice = self.choices[index]
        self.progress = Progress(
            policy=choice.name, index=index, done=[r.name for r in self.results]
        )
        if self.clock_free:
            async with time_skipping_server() as (own, own_address):
                return await self._one(index, choice, own, own_address)
        if client is None:
            raise RuntimeError("a paced comparison needs the dev server's client")
        return await self._one(index, choice, client, address)

    async def _one(
        self, index: int, choice: PolicyChoice, client: Client, address: str
    ) -> PolicyResult:
        options = self.options
        run_dir = self.run_dir / f"{index}-{choice.name}"
        run_dir.mkdir()
        # Unique per run: a second comparison on the same server sees none of the first.
        tag = f"whatif-{self.tag}-{index}"
        # The relay decodes every pod event: in this process it would take most of the
        # simulator's CPU and interpreter lock (whatif/relay.py), so it gets its own.
        relay = (
            RelayProcess(
                cluster=tag,
                address=address,
                namespace=client.namespace,
                log_path=run_dir / "relay.log",
            )
            # Clock-free, the relay runs in this process: the driver waits for it.
            if self.scaled[index].jobs.enabled and not self.clock_free
            else None
        )
        stepped = SteppedClock() if self.clock_free else None
        driver: ServerTimeDriver | None = None
        # Clock-free, the lane's writes to Temporal wait for the server's clock: the
        # fleet steps alone while the server has nothing to time (whatif.server_time).
        gate = WriteGate() if self.clock_free else None

        async def before_clock(stack: DemoStack) -> None:
            nonlocal driver
            if relay is not None:
                await relay.start(stack)
            if stepped is not None:
                driver = self._driver(stack, client, stepped)
                if gate is not None:
                    gate.attach(driver)
                await driver.start()

        stack = DemoStack(
            gate.wrap(client) if gate is not None else client,
            address,
            StackOptions(
                fleet=self.fleet_config,
                policy=self.scaled[index],
                run_dir=run_dir,
                cluster=tag,
                task_queue=tag,
                semaphore_workflow_id=f"{tag}-semaphore",
                # Clock-free, the polls are the fleet's time (the test server's).
                poll_interval=(
                    SIM_POLL_INTERVAL
                    if self.clock_free
                    else real_poll_interval(options.time_factor)
                ),
                watcher_tick=real_watcher_tick(self.time_factor),
                watcher_backoff=real_watcher_backoff(self.time_factor),
                relay=self.clock_free,
                before_clock=before_clock,
                clock=stepped,
            ),
        )
        # Made before the stack starts: its recorder sees every node from birth.
        chaos = chaos_session(stack, options, self.duration)
        started = time.monotonic()
        timing: dict[str, float] = {}
        try:
            await stack.start()
        except BaseException:
            if relay is not None:
                await relay.stop()
            raise
        timing["start"] = time.monotonic() - started
        if relay is not None:
            timing["relay_start"] = relay.start_seconds
        report: ChaosReport | None = None
        try:
            if chaos is not None:
                chaos.start(None)  # no server_restart: the server is shared (whatif.chaos)
            samples, at_end, settled = await self._watch(
                stack, timing, chaos, lambda: driver.raise_if_failed() if driver else None
            )
            clock = stack.fleet.clock.lag_report()
            incidents = await stack.book.refresh_list()
            await stack.book.refresh_states()
            admission = await self._admission(index, client, tag, stack)
            if chaos is not None:
                await chaos.stop()  # what is left of a plan the settle timeout cut short
                # Judged with everything still running (the semaphore's query needs the worker).
                report = await chaos.report(incidents)
        finally:
            if chaos is not None:
                await chaos.cancel()  # no worker restart may race the stack's stop
            stopping = time.monotonic()
            if driver is not None:
                await driver.stop()
                timing["steps"] = driver.steps
                timing["fleet_steps"] = driver.fleet_steps
                timing["catch_ups"] = driver.catch_ups
            if relay is not None:
                await relay.stop()
            await stack.stop()
            timing["stop"] = time.monotonic() - stopping
        if driver is not None and driver.failure is not None:
            raise driver.failure  # the clock stopped: no result to trust
        result = self._result(
            choice,
            index,
            incidents,
            samples,
            at_end,
            settled,
            started,
            clock,
            stack.fleet.clock.sim_at,
            admission,
        )
        # After the stack stopped: the histories are read from the server alone.
        reading = time.monotonic()
        latency = await measure_latency(
            client,
            incidents,
            sim_time=stack.fleet.clock.sim_at,
            mttr_clock_p50_s=result.summary.mttr_clock_p50_s,
            time_factor=self.time_factor,
        )
        timing["latency"] = time.monotonic() - reading
        return result.model_copy(
            update={
                "timing": {k: round(v, 1) for k, v in timing.items()},
                "chaos": report,
                "latency": latency,
            }
        )

    def _driver(self, stack: DemoStack, client: Client, clock: SteppedClock) -> ServerTimeDriver:
        """The clock-free run's driver: steps once the watcher and the relay caught up."""
        store = stack.fleet.store
        barriers = [
            caught_up(
                lambda: stack.watcher.source if stack.watcher else None,
                lambda: stack.watcher,
                store,
                NODES.key,
            ),
            caught_up(
                lambda: stack.relay.source if stack.relay else None,
                lambda: stack.relay,
                store,
                PODS.key,
            ),
        ]
        return ServerTimeDriver(
            client,
            clock,
            stack.fleet.scheduler,
            step=self.options.step,
            barriers=barriers,
            phase=self.options.step_phase,
            # The fleet alone while the server's runs only wait (for a timer or a write).
            step_alone=True,
            # The permit guards' parent close policy, which the test server ignores.
            after_step=OrphanedGuardRelease(client),
            waiting_to_write=lambda: (
                (stack.watcher is not None and stack.watcher.waiting_to_write)
                or (stack.relay is not None and stack.relay.pending > 0)
            ),
        )

    async def _admission(
        self, index: int, client: Client, tag: str, stack: DemoStack
    ) -> AdmissionSummary | None:
        """The burn-in figures, as the demo's summary has them (None: the gate is off)."""
        if not self.scaled[index].admission.enabled:
            return None
        results, running = await admission_results(client, tag, stack.visibility)
        return summarize_admissions(results, time_factor=self.time_factor, running=running)

    async def _watch(
        self,
        stack: DemoStack,
        timing: dict[str, float],
        chaos: ChaosSession | None = None,
        check: Callable[[], None] = lambda: None,
    ) -> tuple[list[Sample], FleetSnapshot, bool]:
        """Sample until the window closed and every incident settled (or the timeout).

        The window ends at the duration on the simulator's own clock (its scheduler
        takes the snapshot), so every policy is measured over the same simulated
        time, and this loop hears of it at once. The incidents are refreshed by a
        task of their own (``_Refresher``): their queries can take seconds, which
        must not delay the samples or the window's end. ``timing`` gets the real
        seconds of the window, the settling and the refreshes. Under ``chaos`` the
        worker may be dead on purpose, and the run has not settled before the chaos
        plan is done and every problem owed an incident has one.
        """
        fleet = stack.fleet
        loop = asyncio.get_running_loop()
        ended = asyncio.Event()
        window: list[tuple[float, FleetSnapshot]] = []

        def close_window() -> None:
            window.append((time.monotonic(), fleet.snapshot()))
            loop.call_soon_threadsafe(ended.set)

        fleet.scheduler.call_at(self.duration.total_seconds(), close_window)
        began = time.monotonic()
        duration_s = self.duration.total_seconds()
        gpus = gpus_per_node(self.fleet_config)
        samples: list[Sample] = []
        at_end: FleetSnapshot | None = None
        deadline = 0.0
        after_end = 0
        refresher = _Refresher(stack.book, self.options.refresh_interval)
        task = asyncio.create_task(refresher.run())
        try:
            while True:
                check()  # the clock-free run's driver: what ended it, if something did
                if chaos is not None:
                    chaos.raise_if_failed()  # a part the chaos killed did not come back
                if not stack.worker.running and not (chaos is not None and chaos.busy):
                    raise CompareError(f"the worker process died: {stack.worker.log_tail(1000)}")
                if task.done():
                    task.result()  # the refresh failed: its error
                # No per-node truth: the samples need the fleet's totals only.
                snapshot = fleet.snapshot(nodes=False)
                incidents = refresher.incidents
                if at_end is None and window:
                    # The comparison's window ended: availability and jobs as of then.
                    ended_at, at_end = window[0]
                    timing["window"] = ended_at - began
                    deadline = time.monotonic() + self.options.settle_timeout
                    after_end = refresher.rounds + 1  # a round begun after the end
                if at_end is None:
                    samples.append(self._sample(fleet, snapshot, gpus, len(incidents)))
                    if snapshot.sim_seconds > duration_s + 3600:
                        raise CompareError(
                            "the fleet simulator's scheduler has not reached the end of the "
                            "window an hour of simulated time after it "
                            f"(errors: {fleet.scheduler.errors!r})"
                        )
                settled = refresher.rounds > after_end and all(i.settled for i in incidents)
                if chaos is not None and settled:
                    settled = chaos.done and not chaos.waiting_for(incidents)
                self._report(snapshot, incidents, "settling" if at_end is not None else "running")
                if at_end is not None and (settled or time.monotonic() > deadline):
                    timing["settle"] = time.monotonic() - began - timing["window"]
                    return samples, at_end, settled
                if at_end is None:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(ended.wait(), self.options.refresh_interval)
                else:
                    await asyncio.sleep(min(self.options.refresh_interval, 0.25))
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            timing["refresh"] = refresher.seconds
            timing["refreshes"] = refresher.rounds

    def _sample(self, fleet: Fleet, snapshot: FleetSnapshot, gpus: float, incidents: int) -> Sample:
        return Sample(
            sim_hours=round(snapshot.sim_seconds / 3600.0, 4),
            available_nodes=available_now(fleet),
            nodes_replaced=snapshot.counters.get("nodes.terminated", 0),
            gpu_hours_lost=round(gpu_hours_lost(snapshot, gpus), 3),
            incidents=incidents,
        )

    def _report(self, snapshot: FleetSnapshot, incidents: list[Incident], phase: str) -> None:
        progress = self.progress
        progress.sim_seconds = min(snapshot.sim_seconds, self.duration.total_seconds())
        progress.incidents = len(incidents)
        progress.open_incidents = sum(1 for i in incidents if not i.settled)
        progress.phase = phase
        if self.on_progress is not None:
            self.on_progress(progress)

    def _result(
        self,
        choice: PolicyChoice,
        index: int,
        incidents: list[Incident],
        samples: list[Sample],
        at_end: FleetSnapshot,
        settled: bool,
        started: float,
        clock: dict[str, float | int],
        sim_time: Callable[[datetime], float],
        admission: AdmissionSummary | None,
    ) -> PolicyResult:
        summary = summarize(
            incidents,
            at_end,
            replacement_cap=self.scaled[index].replacement.max_concurrent,
            time_factor=self.time_factor,
            wall_seconds=time.monotonic() - started,
            temporal_address=f"whatif-{self.tag}-{index}",
            temporal_ui=None,
            sim_time=sim_time,
            admission=admission,
        )
        counters = at_end.counters
        operator = {
            key.removeprefix("operator."): value
            for key, value in sorted(counters.items())
            if key.startswith("operator.")
        }
        return PolicyResult(
            name=choice.name,
            source=choice.source,
            summary=summary,
            escalations=escalations(incidents),
            nodes_replaced=counters.get("nodes.terminated", 0),
            gpu_hours_lost=round(gpu_hours_lost(at_end, gpus_per_node(self.fleet_config)), 2),
            faults_skipped=counters.get("mix.skipped", 0),
            operator=operator,
            faulty_arrivals={
                key.removeprefix("arrivals.").removesuffix("_faulty"): value
                for key, value in sorted(counters.items())
                if key.startswith("arrivals.")
            },
            timeline=self.timeline,
            settled=settled,
            samples=samples,
            clock=clock,
            capacity=at_end.capacity_report,
        )


def lanes_for(options: CompareOptions, policies: int) -> int:
    """How many policies run at once: ``--parallel``, or as many as cores and memory allow."""
    if options.parallel is not None:
        return max(1, min(options.parallel, policies))
    return max(1, min(policies, os.cpu_count() or 1, _memory_lanes()))


def _memory_lanes() -> int:
    # A lane (simulator process + worker process) peaked at about 0.7 GiB with 1,000
    # nodes; leave room for the server and this process. No /proc: no limit from it.
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available_mib = int(line.split()[1]) / 1024
                return int((available_mib - LEFT_FREE_MIB) // LANE_MIB)
    except (OSError, ValueError):
        pass
    return 1 << 10


class _Refresher:
    """Refreshes a stack's incidents (visibility list, then the open ones' states) in a loop.

    Args:
        book: The stack's incidents.
        interval: Real seconds between the end of one round and the next.
    """

    def __init__(self, book: IncidentBook, interval: float) -> None:
        self._book = book
        self._interval = interval
        self.incidents: list[Incident] = []
        self.rounds = 0
        """Rounds completed."""
        self.seconds = 0.0
        """Real seconds spent in them."""

    async def run(self) -> None:
        """Refresh until cancelled (a failure ends the task with its error)."""
        while True:
            began = time.monotonic()
            incidents = await self._book.refresh_list()
            await self._book.refresh_states([i for i in incidents if not i.state_final])
            self.incidents = incidents
            self.rounds += 1
            self.seconds += time.monotonic() - began
            await asyncio.sleep(self._interval)
