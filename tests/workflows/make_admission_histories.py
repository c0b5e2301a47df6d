"""Regenerate tests/workflows/histories/admission_*.json from real runs.

Each scenario runs the admission workflow on a dev server with the real
admission activities against the Kubernetes API emulator and a scripted
diagnostic. Run: ``.venv/bin/python -m tests.workflows.make_admission_histories``.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from gpu_remediation.search_attributes import ALL_SEARCH_ATTRIBUTES
from gpu_remediation.temporal_setup import dev_server_path
from simulator.kube_api import KubeApiServer, KubeStore
from tests.workflows.admission_support import (
    AdmissionHandle,
    ScriptedDiag,
    admission_worker,
    put_gated_node,
    start,
)

HISTORIES = Path(__file__).parent / "histories"
Scenario = Callable[[Client, KubeStore, str], Awaitable[AdmissionHandle]]


async def admitted(client: Client, store: KubeStore, queue: str) -> AdmissionHandle:
    put_gated_node(store, "gpu-ok")
    return (await start(client, queue, "gpu-ok"))[1]


async def dead_on_arrival(client: Client, store: KubeStore, queue: str) -> AdmissionHandle:
    put_gated_node(store, "gpu-doa")
    return (await start(client, queue, "gpu-doa"))[1]


SCENARIOS: dict[str, tuple[Scenario, bool]] = {
    "admitted": (admitted, False),
    "dead_on_arrival": (dead_on_arrival, True),
}


async def main() -> None:
    """Record every scenario as ``admission_<name>.json``."""
    env = await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter,
        dev_server_existing_path=str(dev_server_path()),
        search_attributes=ALL_SEARCH_ATTRIBUTES,
    )
    try:
        for name, (scenario, fail) in SCENARIOS.items():
            store = KubeStore()
            queue = f"history-{uuid.uuid4()}"
            with KubeApiServer(store) as kube:
                async with admission_worker(env.client, kube, queue, ScriptedDiag(fail=fail)):
                    handle = await scenario(env.client, store, queue)
                    await handle.result()
                    history = await handle.fetch_history()
                    if fail:  # the incident it started is not part of the recording
                        async for ex in env.client.list_workflows(f"TaskQueue = '{queue}'"):
                            if ex.id != handle.id and ex.close_time is None:
                                await env.client.get_workflow_handle(ex.id).terminate("recorded")
            store.close()
            record = {"workflow_id": handle.id, "history": json.loads(history.to_json())}
            path = HISTORIES / f"admission_{name}.json"
            path.write_text(json.dumps(record, indent=1))
            print(f"recorded {path.name} ({len(history.events)} events)")
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
