"""One chaos run around a :class:`~demo.stack.DemoStack`: record, inject, then judge.

Order (``remediate demo --chaos`` and the tests):

1. :class:`ChaosSession` is made before the stack starts, so its
   :class:`~demo.chaos.recorder.GroundTruthRecorder` sees every node from birth;
2. :meth:`ChaosSession.start` once the stack runs: the driver injects its plan;
3. :meth:`ChaosSession.stop` when the run's time is over (the driver is done or
   told to stop; a part that did not come back raises here);
4. :meth:`ChaosSession.report` once the incidents have settled, with everything
   still running (the semaphore's query needs the worker): the facts are
   collected and every invariant checked.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from demo.chaos.collect import (
    alert_records,
    collect_runs,
    gpu_resets_sent,
    permit_holders,
    reboot_requests,
    semaphore_run,
)
from demo.chaos.driver import ChaosDriver, ChaosEvent, ChaosKind, plan
from demo.chaos.facts import ALERT_DELIVERY_SLACK_S, DETECTION_SLACK_S, RunFacts
from demo.chaos.invariants import check_all, step_caps
from demo.chaos.recorder import GroundTruthRecorder
from demo.chaos.server_restart import RestartableServer
from gpu_remediation.ids import step_semaphore_id
from simulator.alertmanager import AlertmanagerTimings

RECEIVER_RESTART_S = 15.0
"""Real seconds a killed receiver may take to serve again (a Python process starting)."""

if TYPE_CHECKING:
    from demo.incidents import Incident
    from demo.server import DevServer
    from demo.stack import DemoStack


class InvariantView(BaseModel):
    """One invariant in the summary: what was checked and what broke it."""

    model_config = ConfigDict(frozen=True)

    checked: str
    violations: list[str]


class ChaosReport(BaseModel):
    """The ``chaos`` section of the demo's summary."""

    model_config = ConfigDict(frozen=True)

    faults_injected: dict[str, int]
    faults: list[ChaosEvent]
    invariants: dict[str, InvariantView]
    violations: list[str]
    """Every violation, as ``<invariant>: <what, naming the node and incident>``; must be empty."""

    def render(self) -> str:
        """A few lines for the terminal."""
        injected = ", ".join(f"{k} {v}" for k, v in self.faults_injected.items()) or "none"
        lines = [f"Chaos: survived {sum(self.faults_injected.values())} fault(s): {injected}"]
        for name, view in self.invariants.items():
            mark = "ok  " if not view.violations else "FAIL"
            lines.append(f"  {mark} {name}: {view.checked}")
            lines += [f"       - {v}" for v in view.violations]
        return "\n".join(lines)


class ChaosSession:
    """Chaos for one stack.

    Args:
        stack: The stack (not started yet).
        kinds: Which faults to inject.
        per_kind: How many of each.
        seed: Seeds the times and the downtimes.
        real_seconds: The run's real duration (faults fall within it).
        alerts: Run the Alertmanager receiver beside the watcher (the second trigger
            path, which ``receiver_kill`` kills); False leaves the stack as it is.
        sim_seconds: Plan over this many simulated seconds of the fleet's clock instead
            of ``real_seconds`` (runs of one seed then get each fault at the same
            simulated time: the what-if comparison's policies).
    """

    def __init__(
        self,
        stack: DemoStack,
        *,
        kinds: tuple[ChaosKind, ...],
        per_kind: int,
        seed: int,
        real_seconds: float,
        alerts: bool = True,
        sim_seconds: float | None = None,
    ) -> None:
        self.stack = stack
        if alerts:
            # The second trigger path: the receiver runs (and is killed) beside the watcher.
            stack.enable_alerts(AlertmanagerTimings.scaled(stack.options.fleet.time_factor))
        self.recorder = GroundTruthRecorder(stack.options.policy.triggers).attach(stack.fleet.store)
        self._sim_clock = sim_seconds is not None
        self.schedule = plan(
            seed, kinds, per_kind, sim_seconds if sim_seconds is not None else real_seconds
        )
        self._seed = seed
        self.driver: ChaosDriver | None = None
        self.server: RestartableServer | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self, server: DevServer | None) -> None:
        """Start injecting (``server``: the dev server to restart, if that kind is planned)."""
        self.server = RestartableServer(server) if server is not None else None
        self.driver = ChaosDriver(
            self.stack,
            self.schedule,
            server=self.server,
            seed=self._seed,
            sim_clock=self._sim_clock,
        )
        self._task = asyncio.create_task(self.driver.run(self._stop))

    @property
    def busy(self) -> bool:
        """Whether a part is down on purpose now (the demo's health checks wait)."""
        return self.driver is not None and self.driver.busy

    @property
    def done(self) -> bool:
        """Whether every planned fault was injected (or the driver failed)."""
        return self._task is None or self._task.done()

    def waiting_for(self, incidents: Sequence[Incident]) -> list[str]:
        """Nodes whose problem is owed an incident and has none yet (the demo waits for them).

        Under chaos the system may need a while after the last fault (a watcher
        backing off from API errors, reports waiting for Temporal): the run is not
        over while a problem past its grace has no incident at all, nor while an alert
        the Alertmanager notified has not got through to the receiver yet.
        """
        owed = self.recorder.owed_problems(datetime.now(UTC), DETECTION_SLACK_S)
        owed -= {i.node for i in incidents}
        alertmanager = self.stack.alertmanager
        if alertmanager is not None:
            owed |= alertmanager.undelivered()  # notified, not yet through: wait for its retries
        return sorted(owed)

    def raise_if_failed(self) -> None:
        """Raise the driver's error if it has failed (a part did not come back)."""
        if self._task is not None and self._task.done() and not self._task.cancelled():
            self._task.result()

    async def stop(self) -> None:
        """Stop injecting and wait for a fault in progress; raises the driver's error.

        What is left of the plan is dropped (the demo waits for :attr:`done` first).
        """
        self._stop.set()
        if self._task is not None:
            await self._task

    async def report(self, incidents: Sequence[Incident]) -> ChaosReport:
        """Collect the facts and check every invariant."""
        facts = await self.collect(incidents)
        results = check_all(facts)
        driver = self.driver
        return ChaosReport(
            faults_injected=driver.faults_injected if driver is not None else {},
            faults=sorted(driver.events, key=lambda e: e.at_s) if driver is not None else [],
            invariants={
                r.name: InvariantView(checked=r.checked, violations=r.violations) for r in results
            },
            violations=[f"{r.name}: {v}" for r in results for v in r.violations],
        )

    async def collect(self, incidents: Sequence[Incident]) -> RunFacts:
        """The run's facts now (everything still running)."""
        stack = self.stack
        # The alerts first: what the receiver acknowledged by now is in the histories read next.
        alertmanager = stack.alertmanager
        alerts = alert_records(alertmanager.episodes()) if alertmanager is not None else []
        runs = await collect_runs(stack.client, stack.options.cluster, incidents)
        semaphore = await semaphore_run(stack.client, stack.options.semaphore_workflow_id)
        if semaphore is not None:
            runs.append(semaphore)  # a failed or terminated semaphore breaks every incident
        base = stack.options.semaphore_workflow_id
        holders = await permit_holders(stack.client, base)
        for step in ("stop_gpu_work", "gpu_reset", "reboot"):  # the disruption budgets' too
            holders += await permit_holders(stack.client, step_semaphore_id(base, step))
        cloud = stack.fleet.cloud
        resets = await asyncio.to_thread(lambda: gpu_resets_sent(cloud.client("ssm")))
        snapshot = await asyncio.to_thread(lambda: stack.fleet.snapshot(nodes=False))
        timings = stack.options.alerts
        return RunFacts(
            collected_at=datetime.now(UTC),
            replacement_cap=stack.options.policy.replacement.max_concurrent,
            step_caps=step_caps(stack.options.policy),
            nodes=self.recorder.records(),
            runs=runs,
            permit_holders=holders,
            max_replacements_in_flight=snapshot.max_replacements_in_flight,
            ec2_reboot_requests=reboot_requests(
                list(cloud.rebooted), self.recorder.node_for_instance()
            ),
            gpu_resets_sent=resets,
            alerts=alerts,
            alert_delivery_slack_s=(
                2 * timings.group_interval + RECEIVER_RESTART_S
                if timings is not None
                else ALERT_DELIVERY_SLACK_S
            ),
        )

    async def cancel(self) -> None:
        """Stop the driver at once, mid-fault if need be (before the stack stops).

        Else a worker restart in progress could start a worker after the stack
        stopped the last one. A driver that already failed keeps its error for
        :meth:`raise_if_failed` (or :meth:`stop`), which report it.
        """
        task = self._task
        if task is None or task.done():
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def close(self) -> None:
        """Stop a Temporal server this session restarted (the demo stops the first one)."""
        if self.server is not None:
            self.server.close()
