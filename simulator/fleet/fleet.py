"""The simulated GPU fleet: node pools served through the Kubernetes API emulator and moto.

``Fleet`` builds the pools (EC2 instances in moto; Nodes, NodeClaims and
NodePools in the emulator), keeps each node's true hardware state, and reacts
to what the real activities do through the real APIs:

- SSM commands (or host-command Jobs) run on the simulated hosts (``host.py``);
- an EC2 reboot takes the node NotReady, clears what a reboot clears and brings
  it back Ready with a new boot id after ``durations.reboot`` (``reboots.py``);
- deleting a NodeClaim drains and terminates the node and launches a new one
  (``karpenter.py``);
- the node agent turns hardware state into node conditions (``agent.py``);
- training jobs occupy the nodes and fail with them (``workloads.py``);
- nodes are seeded, added and removed by the inventory (``inventory.py``).

Each part takes the narrow interface it needs from ``ports.py``, never this
class, so the imports run one way: ``fleet.py`` -> parts -> ``ports.py``.

Faults come from a scenario, a fault mix (``injector.py``) or :meth:`Fleet.inject`.
All durations are simulated time, scaled by ``time_factor`` (``clock.py``).

Locking: ``Fleet.lock`` guards the model and is never held while calling the
store or moto (store hooks take it under the store lock, so the reverse order
would deadlock). Writes to the cluster happen on the scheduler's thread.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import Counter, deque
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

from gpu_remediation.settings import Settings
from simulator.fleet.accounting import Availability
from simulator.fleet.agent import NodeAgent
from simulator.fleet.arrivals import Arrivals
from simulator.fleet.capacity import CapacityReport
from simulator.fleet.clock import FleetClock, SimClock, SteppedClock
from simulator.fleet.config import FleetConfig, PoolSpec
from simulator.fleet.faults import FAULTS, FaultKind
from simulator.fleet.injector import FaultInjector, Slots
from simulator.fleet.inventory import Inventory
from simulator.fleet.karpenter import Karpenter
from simulator.fleet.model import ActiveFault, NodeState, Phase
from simulator.fleet.operator import HumanOperator
from simulator.fleet.reboots import Reboots
from simulator.fleet.scheduler import Scheduler
from simulator.fleet.snapshot import FleetSnapshot, InjectedFault, NodeTruth
from simulator.fleet.workloads import Workloads
from simulator.kube_api import NODECLAIMS, NODES, ApiError, JobKubelet, KubeApiServer, KubeStore
from simulator.kube_api.watch import Change

log = logging.getLogger(__name__)

FAULT_LOG_SIZE = 100_000


class Fleet:
    """A simulated GPU fleet behind a Kubernetes API and an AWS API.

    Args:
        config: Pools, time factor, seed, faults, workloads.
        kube_port: Port of the Kubernetes API emulator (0 picks a free one).
        clock: Simulated time; None: a :class:`SimClock` paced at the config's
            ``time_factor``. A :class:`SteppedClock` is moved on from outside (the
            clock-free comparison), and the cluster's timestamps are then its time.
    """

    def __init__(
        self,
        config: FleetConfig | None = None,
        *,
        kube_port: int = 0,
        clock: FleetClock | None = None,
    ) -> None:
        self.config = config or FleetConfig()
        self.clock: FleetClock = clock or SimClock(self.config.time_factor)
        self.scheduler = Scheduler(self.clock)
        self.lock = threading.RLock()
        self.stopping = threading.Event()
        self.rng = random.Random(self.config.seed)
        self.nodes: dict[str, NodeState] = {}
        self.counters: Counter[str] = Counter()
        # Imported here, not with the module: moto's EC2 models alone are about 140 MiB,
        # which a process that only plans a comparison (whatif.lanes' parent) never needs.
        from simulator.aws import DEFAULT_REGION, MotoCloud
        from simulator.fleet.host import HostSimulator

        stepped = self.clock if isinstance(self.clock, SteppedClock) else None
        self.store = KubeStore(
            history_size=self.config.history_size,
            # On a stepped clock the world's calendar is the server's; paced, it is real.
            clock=stepped.wall if stepped is not None else None,
        )
        self.kube = KubeApiServer(self.store, port=kube_port)
        self.cloud = MotoCloud(DEFAULT_REGION, clock=self.clock.now)
        self.accounting = Availability(self.config.total_nodes)
        # The places a mix's node ordinals name; the inventory keeps them filled.
        self.slots = Slots([(p.name, p.nodes) for p in self.config.pools])
        self.inventory = Inventory(self, on_added=self._capacity_opened, slots=self.slots)
        self.agent = NodeAgent(self)
        self.host = HostSimulator(self)
        self.arrivals = (
            Arrivals(self, self.config.admission) if self.config.admission is not None else None
        )
        self.karpenter = Karpenter(self, self.inventory, self.arrivals)
        self.workloads = (
            Workloads(self, self.config.workloads) if self.config.workloads is not None else None
        )
        self.reboots = Reboots(self, self.agent, self.workloads, self.arrivals)
        self.injector = FaultInjector(
            self, self.config.scenario, self.config.fault_mix, self.config.seed, slots=self.slots
        )
        self.operator = (
            HumanOperator(self, self.config.operator, self.config.seed)
            if self.config.operator is not None
            else None
        )
        self._pools = {p.name: p for p in self.config.pools}
        self._fault_ids = 0
        self._fault_log: deque[InjectedFault] = deque(maxlen=FAULT_LOG_SIZE)
        self._kubelet: JobKubelet | None = None
        self._started = False

    # ------------------------------------------------------------ lifecycle

    def start(self, *, run_clock: bool = True) -> Fleet:
        """Start moto and the emulator, build the pools, then start simulated time.

        Args:
            run_clock: False leaves simulated time at 0 (no faults, jobs or timed
                work yet) until :meth:`start_clock`, so the demo can bring up the
                worker and the watcher (which need the fleet's addresses) first.
        """
        if self._started or self.stopping.is_set():
            raise RuntimeError("a fleet starts once (it is running or was stopped)")
        self._started = True
        try:
            self._start(run_clock)
        except BaseException:
            # Whatever started must not outlive a failed start (servers, threads).
            try:
                self.stop()
            except RuntimeError:
                log.exception("cleaning up after a failed start")
            raise
        return self

    def _start(self, run_clock: bool) -> None:
        self.cloud.start()
        self.cloud.host_simulator = self.host.ssm
        self.cloud.on_reboot = self.reboots.on_reboot
        # No retries: Karpenter requeues a failed call (karpenter.py) instead of
        # sleeping in botocore's backoff on the scheduler's thread.
        ec2 = self.cloud.client("ec2", max_attempts=0, mode="standard")
        self.kube.start()
        self.store.add_hook(self._on_change)
        self.inventory.seed(ec2)
        if self.config.job_executor:
            self._kubelet = JobKubelet(self.store, self.host.job).start()
        if run_clock:
            self.start_clock()
        log.info(
            "fleet of %d nodes up: kube %s, aws %s",
            len(self.nodes),
            self.kube_url,
            self.aws_endpoint_url,
        )

    def start_clock(self) -> None:
        """Start simulated time: scheduled faults, the fault mix, jobs, timed work (once)."""
        if self.clock.started:
            return
        self.clock.start()
        self.scheduler.start()
        self.injector.start()
        if self.workloads is not None:
            self.workloads.request_placement()

    def stop(self) -> None:
        """Stop everything the fleet started.

        Raises:
            RuntimeError: A simulator callback failed while running, so a broken
                simulation does not pass unnoticed.
        """
        if not self._started:
            return
        self._started = False
        self.stopping.set()
        self.scheduler.stop()
        errors: list[BaseException] = list(self.scheduler.errors)
        if self._kubelet is not None:
            try:
                self._kubelet.stop()
            except RuntimeError as err:
                errors.append(err)
        self.kube.stop()
        self.store.close()
        self.cloud.stop()
        if errors:
            raise RuntimeError(f"fleet simulator failed: {errors[0]!r}") from errors[0]

    def __enter__(self) -> Fleet:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------ endpoints

    @property
    def kube_url(self) -> str:
        """The Kubernetes API emulator's URL."""
        return self.kube.url

    @property
    def aws_endpoint_url(self) -> str:
        """The URL of the moto server (EC2 and SSM)."""
        return self.cloud.endpoint_url

    @property
    def region(self) -> str:
        """The AWS region of the instances."""
        return self.cloud.region

    def write_kubeconfig(self, path: Path) -> Path:
        """Write a kubeconfig for kubectl and ``kubernetes.config.load_kube_config``."""
        return self.kube.write_kubeconfig(path)

    def env(self) -> dict[str, str]:
        """Environment variables pointing the worker, boto3 and the AWS CLI at the fleet."""
        return {
            "GPU_REMEDIATION_KUBE_API_URL": self.kube_url,
            "GPU_REMEDIATION_AWS_ENDPOINT_URL": self.aws_endpoint_url,
            "GPU_REMEDIATION_AWS_REGION": self.region,
            "AWS_ENDPOINT_URL": self.aws_endpoint_url,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
        }

    def worker_settings(self, **overrides: Any) -> Settings:
        """Worker settings for this fleet (``overrides`` for poll intervals and the like)."""
        return Settings(
            kube_api_url=self.kube_url,
            aws_endpoint_url=self.aws_endpoint_url,
            aws_region=self.region,
            **overrides,
        )

    # ------------------------------------------------------------ the model

    def pool(self, name: str) -> PoolSpec:
        """The pool named ``name``."""
        return self._pools[name]

    def has_node(self, name: str) -> bool:
        """Whether ``name`` is a node of the fleet (any phase but gone)."""
        with self.lock:
            return name in self.nodes

    def node_gpus(self, name: str) -> int:
        """GPUs of node ``name`` (the pool's count if it is gone)."""
        with self.lock:
            node = self.nodes.get(name)
            return node.gpus if node is not None else 8

    def node_name_for_instance(self, instance_id: str) -> str | None:
        """The node running on EC2 instance ``instance_id``."""
        return self.inventory.node_name_for_instance(instance_id)

    def count(self, key: str, n: int = 1) -> None:
        """Add to one of the fleet's counters (shown in the snapshot)."""
        with self.lock:
            self.counters[key] += n

    def node(self, name: str) -> NodeTruth:
        """One node's true state.

        Raises:
            KeyError: No such node.
        """
        with self.lock:
            return self._truth(self.nodes[name])

    def _truth(self, node: NodeState) -> NodeTruth:
        return NodeTruth(
            name=node.name,
            pool=node.pool,
            phase=node.phase,
            faults=[f.describe() for f in node.faults],
            real_fault=bool(node.real_faults()),
            ready=node.k8s_ready,
            schedulable=node.k8s_schedulable,
        )

    def boot_id(self, name: str) -> str:
        """The node's current boot id."""
        with self.lock:
            return self.nodes[name].boot_id

    def provider_id(self, name: str) -> str:
        """The node's ``spec.providerID``."""
        with self.lock:
            return self.nodes[name].provider_id

    def fault_log(self) -> list[InjectedFault]:
        """Every fault injected so far (the last 100,000), oldest first."""
        with self.lock:
            return list(self._fault_log)

    def snapshot(self, *, nodes: bool = True) -> FleetSnapshot:
        """The fleet's true state now (``nodes=False``: totals only, no faulty nodes listed)."""
        with self.lock:
            now = self.clock.now()
            ordered = sorted(self.nodes.values(), key=lambda n: n.name) if nodes else []
            faulty = [self._truth(n) for n in ordered]
            return FleetSnapshot(
                sim_seconds=now,
                capacity=self.config.total_nodes,
                nodes=len(self.nodes),
                nodes_ready=sum(1 for n in self.nodes.values() if n.k8s_ready),
                faulty_nodes=[t for t in faulty if t.faults],
                truly_faulty=[t.name for t in faulty if t.real_fault],
                availability=self.accounting.report(now),
                counters=dict(self.counters),
                replacements_in_flight=self.karpenter.in_flight,
                max_replacements_in_flight=self.karpenter.max_in_flight,
                jobs=self.workloads.summary() if self.workloads is not None else None,
                capacity_report=CapacityReport(
                    launches=self.counters["karpenter.launched"],
                    insufficient_capacity=self.counters["karpenter.insufficient_capacity"],
                    capacity_block_waits=self.counters["karpenter.capacity_block_waits"],
                    node_hours_short=self.karpenter.capacity.node_hours_short(now),
                    overlap_instance_hours=self.karpenter.capacity.overlap_instance_hours(now),
                ),
            )

    # -------------------------------------------------------------- faults

    def inject(
        self,
        kind: FaultKind | str,
        name: str,
        *,
        gpu: int | None = None,
        xid: int | None = None,
        clears_after: timedelta | None = None,
        source: str = "api",
    ) -> int:
        """Give node ``name`` a fault now; returns the fault's id.

        Args:
            kind: The fault kind.
            name: The node.
            gpu: The GPU of a GPU fault (0 when omitted).
            xid: Report this Xid instead of the kind's own.
            clears_after: Simulated time after which it clears by itself (the
                kind's own default applies otherwise, if it has one).
            source: Who injected it (counted).

        Raises:
            ValueError: Unknown node, a node being terminated, or a bad GPU index.
        """
        kind = FaultKind(kind)
        info = FAULTS[kind]
        with self.lock:
            node = self.nodes.get(name)
            if node is None or node.phase in (Phase.TERMINATING, Phase.GONE):
                raise ValueError(f"no running node {name!r} to inject {kind.value} into")
            if info.scope == "gpu":
                gpu = 0 if gpu is None else gpu
                if not 0 <= gpu < node.gpus:
                    raise ValueError(f"{name} has GPUs 0..{node.gpus - 1}, not {gpu}")
            else:
                gpu = None
            self._fault_ids += 1
            fault = ActiveFault(
                id=self._fault_ids,
                kind=kind,
                gpu=gpu,
                xid=xid if xid is not None else info.xid,
                since=self.clock.now(),
            )
            node.faults.append(fault)
            self._fault_log.append(
                InjectedFault(
                    at=fault.since, node=name, kind=kind, gpu=gpu, xid=fault.xid, source=source
                )
            )
            self.counters[f"faults.{kind.value}"] += 1
            self.counters[f"faults.from_{source}"] += 1
        log.info("fault injected on %s: %s", name, fault.describe())
        clear = clears_after.total_seconds() if clears_after is not None else None
        if clear is None and info.clears_after is not None:
            default = getattr(self.config.durations, info.clears_after)
            clear = default.total_seconds()
        if clear is not None:
            self.scheduler.call_later(
                clear, lambda: self.clear_faults(name, [fault], reason="cleared by itself")
            )
        self.node_changed(name)
        if info.kubelet_down:
            self.scheduler.call_later(
                self.config.durations.node_monitor_grace.total_seconds(),
                lambda: self.agent.sync_ready(name),
            )
        if info.interrupts_jobs and self.workloads is not None:
            workloads = self.workloads
            self.scheduler.call_soon(lambda: workloads.node_broken(name))
        return fault.id

    def active_faults(self, name: str, *ids: int) -> list[ActiveFault]:
        """The faults present on node ``name`` (only those with these ids, if given)."""
        with self.lock:
            node = self.nodes.get(name)
            faults = list(node.faults) if node is not None else []
        return [f for f in faults if not ids or f.id in ids]

    def clear_faults(self, name: str, faults: list[ActiveFault], *, reason: str) -> None:
        """Remove these faults from node ``name`` (those still present)."""
        ids = {f.id for f in faults}
        with self.lock:
            node = self.nodes.get(name)
            if node is None:
                return
            before = len(node.faults)
            node.faults = [f for f in node.faults if f.id not in ids]
            removed = before - len(node.faults)
            self.counters["faults.cleared"] += removed
        if removed:
            log.info("%d fault(s) cleared on %s: %s", removed, name, reason)
            self.node_changed(name)
            self.scheduler.call_soon(lambda: self.agent.sync_ready(name))

    def node_changed(self, name: str) -> None:
        """The node's hardware or phase changed: re-account it and let its agent look."""
        with self.lock:
            node = self.nodes.get(name)
            if node is None:
                return
            self.accounting.track(node, self.clock.now())
        self.agent.schedule(name)
        if self.workloads is not None:
            workloads = self.workloads
            self.scheduler.call_soon(lambda: workloads.pace(name))

    def _capacity_opened(self) -> None:
        # A node came up or opened for scheduling: waiting jobs may fit now.
        if self.workloads is not None and self.clock.started:
            self.workloads.request_placement()

    # ---------------------------------------------------------------- hooks

    def _on_change(self, change: Change) -> None:
        # Under the store lock: update flags and hand work over, never write.
        if self.stopping.is_set():
            return
        if change.resource == NODES.key:
            self._node_seen(change)
            if self.operator is not None:
                self.operator.on_node_change(change)
        elif change.resource == NODECLAIMS.key:
            self.karpenter.on_change(change)
        elif self.workloads is not None:
            self.workloads.on_change(change)

    def _node_seen(self, change: Change) -> None:
        obj = change.obj
        name = obj["metadata"]["name"]
        with self.lock:
            node = self.nodes.get(name)
            if node is None:
                return
            if change.type == "DELETED":
                ready = schedulable = False
                if node.phase in (Phase.RUNNING, Phase.REBOOTING):
                    # Someone deleted the Node: Karpenter then deletes its NodeClaim.
                    self.scheduler.call_soon(lambda: self._delete_claim(name))
            else:
                spec, status = obj.get("spec") or {}, obj.get("status") or {}
                ready = any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in status.get("conditions") or []
                )
                schedulable = not spec.get("unschedulable") and not any(
                    t.get("effect") in ("NoSchedule", "NoExecute") for t in spec.get("taints") or []
                )
            opened = (ready and schedulable) and not (node.k8s_ready and node.k8s_schedulable)
            node.k8s_ready, node.k8s_schedulable = ready, schedulable
            self.accounting.track(node, self.clock.now())
        if opened:
            self._capacity_opened()

    def _delete_claim(self, name: str) -> None:
        try:
            self.store.delete_object(NODECLAIMS, name)
        except ApiError as err:
            if err.code != 404:
                raise
