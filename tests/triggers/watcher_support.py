"""Helpers for the watcher tests: a restartable emulator, a running watcher, delivered reports."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client as k8s
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from gpu_remediation.evidence_history import received_reports
from gpu_remediation.ids import Queries, node_workflow_id
from gpu_remediation.models import ConditionEvidence, EvidenceReport
from gpu_remediation.policy import ConditionRule, Policy, TriggerPolicy
from gpu_remediation.policy_loader import load_policy
from gpu_remediation.workflow_models import NodeRemediationState
from simulator.kube_api import KubeApiServer, KubeStore
from tests.workflows.node_support import Cluster
from triggers.condition_tracker import ConditionReport
from triggers.starter import IncidentStarter
from triggers.watcher import NodeConditionWatcher

GPU_LABELS = {"nvidia.com/gpu.present": "true"}
SELECTOR = "nvidia.com/gpu.present=true"


class Emulator:
    """The Kubernetes API emulator on a fixed port, so it can be stopped and started again."""

    def __init__(self) -> None:
        self.store = KubeStore()
        self.server: KubeApiServer | None = KubeApiServer(self.store, bookmark_interval=0.2)
        self.server.start()
        self.port = self.server.port
        self.url = f"http://127.0.0.1:{self.port}"

    @property
    def api(self) -> KubeApiServer:
        """The running server (fails while stopped)."""
        assert self.server is not None, "the emulator is stopped"
        return self.server

    def stop(self) -> None:
        """Stop serving; the store (objects and watch history) stays."""
        if self.server is not None:
            self.server.stop()
            self.server = None

    def start(self) -> None:
        """Serve the same store on the same port again."""
        assert self.server is None
        self.server = KubeApiServer(self.store, port=self.port, bookmark_interval=0.2)
        self.server.start()

    def api_client(self) -> Any:
        """An official client that outlives restarts (it knows the URL, not the server)."""
        return k8s.ApiClient(k8s.Configuration(host=self.url))

    def close(self) -> None:
        """Stop for good."""
        self.stop()
        self.store.close()


@contextmanager
def emulator() -> Iterator[Emulator]:
    """A fresh emulator for one test."""
    emu = Emulator()
    try:
        yield emu
    finally:
        emu.close()


def watcher_policy(**graces: str) -> Policy:
    """The defaults with the watcher's rules replaced (grace per condition type, e.g. Ready="2s").

    Ready and GpuHealthProblem are always watched (grace 0 unless given); the
    selector is :data:`SELECTOR`.
    """
    rules = {"Ready": ["False", "Unknown"], "GpuHealthProblem": ["True"]}
    conditions = [
        ConditionRule.model_validate(
            {"type": t, "problem_statuses": statuses, "grace": graces.get(t, "0s")}
        )
        for t, statuses in rules.items()
    ]
    triggers = TriggerPolicy(node_selector=SELECTOR, conditions=conditions)
    return load_policy().model_copy(update={"triggers": triggers, "cooldown": timedelta(0)})


def new_cluster() -> str:
    """A cluster name of its own, so each test's workflow ids are new."""
    return f"w{uuid.uuid4().hex[:10]}"


def make_watcher(
    api_client: Any,
    client: Client,
    policy: Policy,
    *,
    cluster: str,
    task_queue: str,
    semaphore_workflow_id: str = "test-semaphore/unused",
) -> NodeConditionWatcher:
    """A watcher with fast ticks and backoffs, reporting to ``task_queue``."""
    starter = IncidentStarter(
        client,
        cluster=cluster,
        policy=policy,
        task_queue=task_queue,
        semaphore_workflow_id=semaphore_workflow_id,
    )
    return NodeConditionWatcher(
        api_client,
        starter,
        client,
        tick_interval=0.05,
        watch_timeout=5,
        backoff_initial=0.05,
        backoff_max=0.4,
    )


def cluster_watcher(
    api_client: Any, c: Cluster, task_queue: str, **graces: str
) -> NodeConditionWatcher:
    """A watcher reporting to a test cluster's worker and semaphore (graces as for
    :func:`watcher_policy`)."""
    return make_watcher(
        api_client,
        c.client,
        watcher_policy(**graces),
        cluster=c.name,
        task_queue=task_queue,
        semaphore_workflow_id=c.semaphore_id,
    )


@asynccontextmanager
async def running(watcher: NodeConditionWatcher) -> AsyncIterator[NodeConditionWatcher]:
    """Run the watcher for the block, then stop it and check it stopped cleanly."""
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    try:
        yield watcher
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)


async def evidence_reports(client: Client, cluster: str, node: str) -> list[EvidenceReport]:
    """The evidence reports the node's incident received (signals in its history)."""
    return [report for report, _ in await evidence_signals(client, cluster, node)]


async def evidence_signals(
    client: Client, cluster: str, node: str
) -> list[tuple[EvidenceReport, datetime]]:
    """Each evidence report the node's incident received, with when the server took it."""
    handle = client.get_workflow_handle(node_workflow_id(cluster, node))
    try:
        history = await handle.fetch_history()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return []
        raise
    return received_reports(history.events)


def conditions_of(reports: list[EvidenceReport]) -> list[ConditionEvidence]:
    """The condition evidence of the reports, in order."""
    return [e for r in reports for e in r.evidence if isinstance(e, ConditionEvidence)]


async def terminate_incidents(client: Client, cluster: str, *nodes: str) -> None:
    """Terminate the nodes' incidents that are still running (tests without a worker)."""
    for node in nodes:
        handle = client.get_workflow_handle(node_workflow_id(cluster, node))
        try:
            await handle.terminate("test finished")
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise


async def incident_stage(client: Client, cluster: str, node: str) -> str | None:
    """The stage of the node's incident, or None while it has not started."""
    handle = client.get_workflow_handle(node_workflow_id(cluster, node))
    try:
        state = await handle.query(Queries.STATE, result_type=NodeRemediationState)
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
        return None
    return state.stage


def report(node: str, n: int) -> ConditionReport:
    """The ``n``-th condition report of ``node`` (its id is ``node-n``)."""
    evidence = ConditionEvidence(
        observed_at=datetime(2026, 12, 5, tzinfo=UTC),
        source="test",
        type="GpuHealthProblem",
        status="True",
        reason=f"r{n}",
    )
    return ConditionReport(node=node, kind="report", report_id=f"{node}-{n}", evidence=evidence)
