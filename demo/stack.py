"""The remediation system running against the simulated fleet, minus the Temporal server.

:class:`DemoStack` starts, in order: the fleet simulator (Kubernetes API
emulator + moto, GPU nodes in Karpenter pools), the production worker as a
child process (``remediate worker`` with the fleet's settings) and the
node-condition watcher (an asyncio task here, reporting through
``IncidentStarter`` with the given policy) and, with ``StackOptions.alerts``
(``--chaos`` turns it on), the Alertmanager webhook receiver as a child process
fed by a simulated Alertmanager (``simulator.alertmanager``): a second trigger
path into the same incidents. It stops them in the opposite order: the
Alertmanager and the receiver, the watcher, the worker (gracefully: SIGTERM lets
running activities finish against the still-running fleet), then the fleet. The demo and the
end-to-end tests share it; the Temporal server is the caller's (the demo
starts one with the UI on, the tests use the session's).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from temporalio.client import Client

from demo.incidents import IncidentBook
from demo.receiver_process import ReceiverProcess, ReceiverSettings
from demo.server import free_port
from demo.worker_process import WorkerProcess
from gpu_remediation.ids import SEMAPHORE_WORKFLOW_ID, TASK_QUEUE
from gpu_remediation.policy import Policy
from gpu_remediation.visibility import ListingVisibility, ServerVisibility, Visibility
from simulator.alertmanager import AlertmanagerTimings, SimulatedAlertmanager, fleet_alerts
from simulator.fleet import Fleet, FleetConfig
from simulator.fleet.clock import FleetClock, SteppedClock
from simulator.nvsentinel import SimulatedNvSentinel
from triggers.starter import IncidentStarter

if TYPE_CHECKING:
    from triggers.checkpoint_relay import CheckpointRelay
    from triggers.nvsentinel import ExternalRemediationRelay
    from triggers.watcher import NodeConditionWatcher

log = logging.getLogger("gpu_remediation.demo")


@dataclass(frozen=True)
class StackOptions:
    """What to run and how fast.

    Attributes:
        fleet: The simulated fleet.
        policy: The policy incidents run under (already scaled to the time factor).
        run_dir: Where the worker's log goes.
        cluster: Cluster name (part of every incident's workflow id).
        task_queue: The worker's task queue.
        semaphore_workflow_id: The replacement semaphore the incidents share.
        poll_interval: The activities' poll interval (SSM, reboots, replacements), real time.
        watcher_tick: Seconds between the watcher's grace-period checks.
        watcher_backoff: The watcher's first and longest delay after a failure
            (list, watch or delivery), real seconds; production's 0.5 s and 30 s
            by default, scaled to the time factor by the demo and the comparison.
        relay: Run the checkpoint relay in this process (when the policy coordinates
            with jobs); False leaves it to the caller (the what-if comparison runs it
            in a process of its own).
        before_clock: Awaited once the worker polls and the watcher runs, just before
            simulated time starts (the comparison starts its relay process there).
        alerts: Also run the Alertmanager webhook receiver (a child process) fed by a
            simulated Alertmanager (``simulator.alertmanager``) with these timings: a
            second trigger path beside the watcher. None: no receiver.
        clock: The fleet's clock; None: paced by real time at the fleet's factor. A
            ``SteppedClock`` (the clock-free what-if, ADR 018) is the time-skipping
            test server's: the watcher then reads it, and every listing of runs goes
            through ``ListingVisibility`` (that server has no visibility).
        nvsentinel: NVIDIA NVSentinel's path too: a simulated NVSentinel
            (``simulator.nvsentinel``) hands every Xid fault over as an
            ExternalRemediationRequest, and the relay (``triggers.nvsentinel``) beside
            the watcher takes them into incidents and answers them.
    """

    fleet: FleetConfig
    policy: Policy
    run_dir: Path
    cluster: str = "demo"
    task_queue: str = TASK_QUEUE
    semaphore_workflow_id: str = SEMAPHORE_WORKFLOW_ID
    poll_interval: timedelta = timedelta(milliseconds=250)
    watcher_tick: float = 0.25
    watcher_backoff: tuple[float, float] = (0.5, 30.0)
    worker_env: dict[str, str] = field(default_factory=dict)
    relay: bool = True
    before_clock: Callable[[DemoStack], Awaitable[None]] | None = None
    alerts: AlertmanagerTimings | None = None
    clock: FleetClock | None = None
    nvsentinel: bool = False

    @property
    def on_test_server(self) -> bool:
        """Whether the stack runs on the time-skipping test server's clock."""
        return isinstance(self.clock, SteppedClock)


class DemoStack:
    """Fleet, worker process and watcher for one Temporal namespace.

    Args:
        client: Temporal client (pydantic data converter) for the watcher and queries.
        address: The server's ``host:port`` (for the worker process).
        options: What to run.
    """

    def __init__(self, client: Client, address: str, options: StackOptions) -> None:
        self.client = client
        self.options = options
        self.fleet = Fleet(options.fleet, clock=options.clock)
        self.visibility: Visibility = (
            ListingVisibility(client) if options.on_test_server else ServerVisibility(client)
        )
        self.starter = IncidentStarter(
            client,
            cluster=options.cluster,
            policy=options.policy,
            task_queue=options.task_queue,
            semaphore_workflow_id=options.semaphore_workflow_id,
            visibility=self.visibility,
        )
        self.book = IncidentBook(client, options.cluster, self.visibility)
        self.worker = WorkerProcess(
            address=address,
            namespace=client.namespace,
            task_queue=options.task_queue,
            env={},  # set in start(), once the fleet's ports are known
            log_path=options.run_dir / "worker.log",
        )
        self.watcher: NodeConditionWatcher | None = None
        self._api: Any = None
        self._watch_stop = asyncio.Event()
        self._watch_task: asyncio.Task[None] | None = None
        self.relay: CheckpointRelay | None = None
        self._relay_task: asyncio.Task[None] | None = None
        self.handovers: ExternalRemediationRelay | None = None
        self._handovers_task: asyncio.Task[None] | None = None
        self._address = address
        self.receiver: ReceiverProcess | None = None
        self._receiver_token = ""
        self.alertmanager: SimulatedAlertmanager | None = None
        self.nvsentinel: SimulatedNvSentinel | None = None

    def worker_env(self) -> dict[str, str]:
        """The environment that points ``remediate worker`` at the fleet."""
        poll = self.options.poll_interval.total_seconds()
        world = {"GPU_REMEDIATION_WORLD_TIME": "test-server"} if self.options.on_test_server else {}
        return {
            **self.fleet.env(),
            **world,
            "GPU_REMEDIATION_CLUSTER": self.options.cluster,
            # ISO 8601: what pydantic reads from a string for a timedelta.
            "GPU_REMEDIATION_POLL_INTERVAL": f"PT{poll:.3f}S",
            "GPU_REMEDIATION_EVICTION_RETRY": f"PT{poll:.3f}S",
            **self.options.worker_env,
        }

    async def start(self) -> DemoStack:
        """Start the fleet, the worker process (until it polls) and the watcher, then the clock.

        Simulated time starts last, so a scenario's "at 30s" is 30 simulated
        seconds after the remediation is up, however long the worker took to start.
        """
        await asyncio.to_thread(lambda: self.fleet.start(run_clock=False))
        try:
            self.worker.env = self.worker_env()
            self.worker.start()
            if self.options.alerts is not None:
                self._spawn_receiver()  # starts while the worker does
            await self.worker.wait_polling(self.client)
            self.start_watcher()
            if self.options.alerts is not None:
                await self._start_alerting(self.options.alerts)
            if self.options.nvsentinel:
                self.nvsentinel = SimulatedNvSentinel(
                    self.fleet, interval=self.options.watcher_tick
                ).start()
            if self.options.before_clock is not None:
                await self.options.before_clock(self)
            self.fleet.start_clock()
        except BaseException:
            await self.stop(force=True)
            raise
        return self

    def start_watcher(self) -> None:
        """Start the node-condition watcher and the checkpoint relay as tasks of this loop.

        The relay only when the policy coordinates with jobs (``jobs.enabled``) and
        ``StackOptions.relay`` asks for it here.
        """
        # Imported here: the worker module pulls in every activity and the AWS SDK, the
        # watcher and the relay the Kubernetes client (a comparison's parent needs none).
        from triggers.checkpoint_relay import CheckpointRelay
        from triggers.stragglers import StragglerDetector
        from triggers.watcher import NodeConditionWatcher
        from worker import kube_api_client

        self._api = kube_api_client(self.fleet.worker_settings())
        backoff_initial, backoff_max = self.options.watcher_backoff
        fleet_clock = self.fleet.clock
        # On the test server's clock, grace periods are the fleet's time.
        now: Callable[[], datetime] = (
            fleet_clock.wall if isinstance(fleet_clock, SteppedClock) else lambda: datetime.now(UTC)
        )
        self.watcher = NodeConditionWatcher(
            self._api,
            self.starter,
            self.client,
            tick_interval=self.options.watcher_tick,
            backoff_initial=backoff_initial,
            backoff_max=backoff_max,
            clock=now,
        )
        self._watch_stop = asyncio.Event()
        self._watch_task = asyncio.create_task(self.watcher.run(self._watch_stop))
        if self.options.nvsentinel:
            from triggers.nvsentinel import ExternalRemediationRelay

            watcher = self.watcher
            self.handovers = ExternalRemediationRelay(
                self._api,
                self.starter,
                self.client,
                watches=watcher.watches,
                ready=lambda: watcher.listed,
                clock=now,
                poll_interval=self.options.watcher_tick,
            )
            self._handovers_task = asyncio.create_task(self.handovers.run(self._watch_stop))
        if not self.options.relay or not self.options.policy.jobs.enabled:
            # Incidents under such a policy never annotate a pod (workflows/node_jobs.py),
            # so the relay would only parse every pod event of the fleet for nothing: at
            # 1,000 nodes it was the simulator process's largest consumer of CPU.
            return
        policy = self.options.policy
        detector = (
            StragglerDetector(policy.triggers.stragglers, policy.jobs.label_keys)
            if policy.triggers.stragglers.enabled
            else None
        )
        self.relay = CheckpointRelay(
            self._api,
            self.client,
            self.options.cluster,
            stragglers=detector,
            report_stragglers=self.watcher.add_reports if detector is not None else None,
            clock=now,
        )
        self._relay_task = asyncio.create_task(self.relay.run(self._watch_stop))

    async def crash_watcher(self) -> int:
        """End the watcher and the checkpoint relay as a crash would; returns the reports lost.

        No stop signal: their tasks are cancelled mid-flight, their Kubernetes
        client is closed, and what the watcher had not delivered yet (its outbox)
        is dropped. :meth:`start_watcher` then brings up fresh ones that list every
        node from scratch, as a restarted ``remediate watch`` does.
        """
        tasks = [
            t for t in (self._watch_task, self._relay_task, self._handovers_task) if t is not None
        ]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        lost = self.watcher.pending if self.watcher is not None else 0
        if self._api is not None:
            self._api.close()
        self._api = None
        self._watch_task = self._relay_task = self._handovers_task = None
        self.handovers = None
        self.watcher = None
        self.relay = None
        return lost

    async def restart_worker(self) -> None:
        """Start a new worker process after the last one died, and wait until it polls."""
        self.worker.start()
        await self.worker.wait_polling(self.client)

    def enable_alerts(self, timings: AlertmanagerTimings) -> None:
        """Run the receiver and the simulated Alertmanager too (before :meth:`start`).

        Raises:
            RuntimeError: The stack has started already.
        """
        if self.worker.starts:
            raise RuntimeError("alerts are enabled before the stack starts")
        self.options = dataclasses.replace(self.options, alerts=timings)

    def _spawn_receiver(self) -> None:
        """Start the receiver's process (on a port of its own, kept across restarts)."""
        settings = ReceiverSettings(
            address=self._address,
            namespace=self.client.namespace,
            cluster=self.options.cluster,
            task_queue=self.options.task_queue,
            semaphore_workflow_id=self.options.semaphore_workflow_id,
            policy=self.options.policy,
            port=free_port(),
        )
        self._receiver_token = secrets.token_urlsafe(24)
        self.receiver = ReceiverProcess(settings, self._receiver_token, self.options.run_dir)
        self.receiver.start()

    async def _start_alerting(self, timings: AlertmanagerTimings) -> None:
        """Wait until the receiver serves, then start the Alertmanager that feeds it."""
        assert self.receiver is not None
        await self.receiver.wait_serving()
        self.alertmanager = SimulatedAlertmanager(
            self.receiver.url,
            self._receiver_token,
            fleet_alerts(self.fleet),
            timings=timings,
            seed=self.options.fleet.seed,
        ).start()

    async def restart_receiver(self) -> None:
        """Start a new receiver process (same port) after the last one died; wait until it serves.

        Raises:
            RuntimeError: The stack runs no receiver.
        """
        if self.receiver is None:
            raise RuntimeError("the stack runs no receiver (StackOptions.alerts)")
        self.receiver.start()
        await self.receiver.wait_serving()

    async def stop(self, *, force: bool = False) -> None:
        """Stop the watcher, the worker (SIGKILL when ``force``) and the fleet.

        Raises:
            RuntimeError: The fleet simulator or the simulated Alertmanager failed
                while running (its error).
        """
        alerting_error: RuntimeError | None = None
        if self.nvsentinel is not None:
            await asyncio.to_thread(self.nvsentinel.stop)
            self.nvsentinel = None
        if self.alertmanager is not None:
            try:
                await asyncio.to_thread(self.alertmanager.stop)
            except RuntimeError as err:
                alerting_error = err  # everything else still stops first
            self.alertmanager = None
        if self.receiver is not None:
            if force:
                self.receiver.kill()
            else:
                await self.receiver.stop()
        if self._watch_task is not None:
            self._watch_stop.set()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch_task
            self._watch_task = None
        if self._relay_task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._relay_task
            self._relay_task = None
        if self._handovers_task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._handovers_task
            self._handovers_task = None
        if force:
            self.worker.kill()
        else:
            code = await self.worker.stop()
            if code not in (None, 0):
                log.warning("the worker exited with %s: %s", code, self.worker.log_tail(500))
        if self._api is not None:
            self._api.close()
            self._api = None
        await asyncio.to_thread(self.fleet.stop)
        if alerting_error is not None:
            raise alerting_error

    async def __aenter__(self) -> DemoStack:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop(force=exc is not None)
