"""Helpers for the receiver tests: a real uvicorn server, payloads, and what Temporal holds."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import uvicorn
from temporalio.client import Client, WorkflowExecutionDescription
from temporalio.service import RPCError, RPCStatusCode

from gpu_remediation.evidence_history import received_reports
from gpu_remediation.policy import Policy
from gpu_remediation.policy_loader import load_policy
from triggers.receiver import ALERTS_PATH, create_app
from triggers.starter import IncidentStarter

TOKEN = "test-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ZERO_TIME = "0001-01-01T00:00:00Z"


def iso(moment: datetime) -> str:
    """RFC 3339 as Alertmanager writes it."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def alert(
    node: str | None,
    *,
    status: str = "firing",
    fingerprint: str | None = None,
    starts_at: datetime | None = None,
    ends_at: datetime | None = None,
    label: str = "hostname",
    **labels: str,
) -> dict[str, Any]:
    """One alert about ``node`` (an Xid 48 on GPU 2 unless ``labels`` say otherwise)."""
    all_labels = {"alertname": "GpuXidError", "xid": "48", "gpu": "2", "severity": "critical"}
    if node is not None:
        all_labels[label] = node
    all_labels.update(labels)
    starts = starts_at or datetime.now(UTC)
    return {
        "status": status,
        "labels": all_labels,
        "annotations": {"summary": f"Xid on {node}"},
        "startsAt": iso(starts),
        "endsAt": iso(ends_at) if ends_at else (ZERO_TIME if status == "firing" else iso(starts)),
        "generatorURL": "http://prometheus/graph",
        "fingerprint": fingerprint or uuid.uuid4().hex[:16],
    }


def payload(*alerts: dict[str, Any], status: str | None = None) -> dict[str, Any]:
    """A version 4 webhook body holding ``alerts``."""
    firing = any(a["status"] == "firing" for a in alerts)
    return {
        "version": "4",
        "groupKey": '{}:{alertname="GpuXidError"}',
        "truncatedAlerts": 0,
        "status": status or ("firing" if firing else "resolved"),
        "receiver": "gpu-remediation",
        "groupLabels": {"alertname": "GpuXidError"},
        "commonLabels": {"alertname": "GpuXidError"},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "alerts": list(alerts),
    }


@dataclass
class Receiver:
    """A running receiver: its URL, starter and an HTTP client (no token by default)."""

    url: str
    starter: IncidentStarter
    http: httpx.AsyncClient
    temporal: Client

    def workflow_id(self, node: str) -> str:
        return self.starter.workflow_id(node)

    async def post(self, body: Any, *, headers: dict[str, str] | None = None) -> httpx.Response:
        """POST to the alerts endpoint with the right token (unless ``headers`` say otherwise)."""
        return await self.http.post(
            ALERTS_PATH, json=body, headers=AUTH if headers is None else headers
        )

    async def started(self, node: str) -> bool:
        """Whether the node's workflow exists (strongly consistent: describe, not visibility)."""
        return await describe(self.temporal, self.workflow_id(node)) is not None


async def describe(client: Client, workflow_id: str) -> WorkflowExecutionDescription | None:
    """The latest run of ``workflow_id``, or None when there is none."""
    try:
        return await client.get_workflow_handle(workflow_id).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise


async def reports_received(client: Client, workflow_id: str) -> int:
    """Evidence reports the latest run received (its start's and its signals')."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return len(received_reports(history.events))


@asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn on 127.0.0.1 (a port of its own); yield the base URL."""
    # proto must be IPPROTO_TCP: asyncio only disables Nagle on such sockets, and
    # without it every keep-alive request stalls 40 ms on delayed ACKs.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()


@asynccontextmanager
async def receiver(
    client: Client,
    *,
    cluster: str | None = None,
    task_queue: str | None = None,
    semaphore_workflow_id: str | None = None,
    policy: Policy | None = None,
    **options: Any,
) -> AsyncIterator[Receiver]:
    """Run the receiver for a cluster of its own (no worker unless the test runs one)."""
    starter = IncidentStarter(
        client,
        cluster=cluster or f"rx{uuid.uuid4().hex[:8]}",
        policy=policy or load_policy(),
        task_queue=task_queue or f"tq-{uuid.uuid4()}",
        semaphore_workflow_id=semaphore_workflow_id or f"test-semaphore/{uuid.uuid4()}",
    )
    app = create_app(starter, TOKEN, client=client, **options)
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        yield Receiver(url, starter, http, client)
