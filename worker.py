"""The remediation worker: runs the workflows and activities of gpu-remediation.

Connects with settings from the environment (``TEMPORAL_ADDRESS``,
``TEMPORAL_NAMESPACE``, ``TEMPORAL_API_KEY``, ``TEMPORAL_TLS*`` or a TOML
profile, read by ``temporalio.envconfig``), always with the pydantic data
converter, and shuts down gracefully on SIGINT/SIGTERM: running activities
get ``GRACEFUL_SHUTDOWN`` to finish before the worker exits, and workflows
simply continue on another worker.

Run: ``python worker.py`` (or ``make worker``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from activities.temporal import TemporalActivities
from gpu_remediation.ids import TASK_QUEUE
from gpu_remediation.temporal_setup import connect
from workflows.node_remediation import NodeRemediationWorkflow
from workflows.permit_guard import PermitGuardWorkflow
from workflows.replacement_semaphore import ReplacementSemaphoreWorkflow

WORKFLOWS: Sequence[type] = (
    NodeRemediationWorkflow,
    ReplacementSemaphoreWorkflow,
    PermitGuardWorkflow,
)
# Longer than any activity needs to notice cancellation and stop cleanly; the
# Kubernetes Deployment's terminationGracePeriodSeconds must exceed it.
GRACEFUL_SHUTDOWN = timedelta(seconds=30)

log = logging.getLogger("gpu_remediation.worker")


def build_worker(
    client: Client,
    activities: Sequence[Callable[..., Any]],
    task_queue: str = TASK_QUEUE,
    **options: Any,
) -> Worker:
    """Create a worker with every workflow of the project and the given activities.

    The Temporal activities (semaphore bootstrap) are always added, so any
    worker can host the replacement semaphore.

    Args:
        client: A client using the pydantic data converter.
        activities: Activity implementations (Kubernetes, AWS, or test doubles).
        task_queue: Task queue to poll.
        **options: Further ``temporalio.worker.Worker`` options.
    """
    return Worker(
        client,
        task_queue=task_queue,
        workflows=list(WORKFLOWS),
        activities=[TemporalActivities(client).ensure_semaphore, *activities],
        graceful_shutdown_timeout=GRACEFUL_SHUTDOWN,
        **options,
    )


def production_activities(client: Client) -> list[Callable[..., Any]]:
    """The activity implementations available in this build.

    The Kubernetes and AWS activities register here as they are implemented;
    until then a workflow that reaches one of them fails that activity with
    Temporal's "activity not registered" error, visible in the UI, and retries
    it once a worker that has it is deployed.
    """
    return []


async def main() -> None:
    """Connect, run until a signal arrives, then drain and exit."""
    logging.basicConfig(level=os.environ.get("LOG_LEVEL", "INFO"))
    client = await connect()
    task_queue = os.environ.get("GPU_REMEDIATION_TASK_QUEUE", TASK_QUEUE)
    worker = build_worker(client, production_activities(client), task_queue)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        log.info("worker polling task queue %s", task_queue)
        await stop.wait()
        log.info("shutting down (up to %s for running activities)", GRACEFUL_SHUTDOWN)


if __name__ == "__main__":
    asyncio.run(main())
