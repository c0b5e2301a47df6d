"""Record tests/workflows/histories/semaphore_*.json from a real dev server run.

Run ``.venv/bin/python -m tests.workflows.make_semaphore_history NAME`` after an
intended change to the semaphore's commands (and only then): the replay test
fails on any unintended one. A patched change (``workflow.patched``) keeps the
older files and records the new path beside them under a new NAME (``v0_1``:
the semaphore as released in 0.1.0).
The run exercises every path of the workflow:
grants, FIFO waiters, duplicate requests, releases, a guard releasing for a
terminated holder, an undeliverable grant, updates (accepted and rejected),
a lease expiry, and ends with continue-as-new, which closes the run.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from datetime import timedelta
from pathlib import Path

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from gpu_remediation.semaphore_models import ForceReleaseInput, SetCapacityInput
from gpu_remediation.temporal_setup import dev_server_path
from tests.conftest import assert_eventually
from tests.workflows.semaphore_holders import GrantRecorderWorkflow, SemaphoreHolderWorkflow
from tests.workflows.semaphore_support import (
    holder_ids,
    holder_status,
    release_permit,
    request_permit,
    semaphore_state,
    semaphore_worker,
    start_holder,
    start_recorder,
    start_semaphore,
    waiter_ids,
)
from workflows.replacement_semaphore import ReplacementSemaphoreWorkflow

HISTORIES = Path(__file__).parent / "histories"
SEMAPHORE_ID = "history/replacement-semaphore"
CONTINUE_AS_NEW_AFTER_EVENTS = 150


async def record(client: Client) -> str:
    """Drive one semaphore run through every path; return its history as JSON."""
    task_queue = f"history-{uuid.uuid4()}"
    async with semaphore_worker(client, task_queue):
        semaphore = await start_semaphore(
            client,
            task_queue,
            SEMAPHORE_ID,
            capacity=1,
            continue_as_new_after_events=CONTINUE_AS_NEW_AFTER_EVENTS,
        )
        first_run = client.get_workflow_handle(SEMAPHORE_ID, run_id=semaphore.result_run_id)

        # Real holders: one holds, one waits and is then terminated (its guard withdraws it).
        first = await start_holder(client, task_queue, SEMAPHORE_ID, "first")
        await assert_eventually(lambda: holder_status(first), lambda s: s.held)
        doomed = await start_holder(client, task_queue, SEMAPHORE_ID, "doomed")
        await assert_eventually(
            lambda: semaphore_state(client, SEMAPHORE_ID), lambda s: waiter_ids(s) == ["doomed"]
        )
        await doomed.terminate("history: waiter dies")
        await assert_eventually(
            lambda: semaphore_state(client, SEMAPHORE_ID), lambda s: not s.waiters
        )

        # A duplicate request re-sends the grant; a request of a closed run is reclaimed.
        recorder = await start_recorder(client, task_queue, f"{SEMAPHORE_ID}/recorder")
        closed = await start_recorder(client, task_queue, f"{SEMAPHORE_ID}/closed")
        await closed.signal(GrantRecorderWorkflow.finish)
        await closed.result()
        await request_permit(client, SEMAPHORE_ID, closed, "closed-run")
        await request_permit(client, SEMAPHORE_ID, recorder, "short-lease", timedelta(seconds=2))
        await first.signal(SemaphoreHolderWorkflow.finish)
        await first.result()
        await assert_eventually(
            lambda: semaphore_state(client, SEMAPHORE_ID),
            lambda s: holder_ids(s) == ["short-lease"],
        )
        await request_permit(client, SEMAPHORE_ID, recorder, "short-lease", timedelta(seconds=2))

        # Updates: rejected, accepted; then the short lease expires.
        try:
            await semaphore.execute_update(
                ReplacementSemaphoreWorkflow.set_capacity, SetCapacityInput(capacity=0)
            )
        except WorkflowUpdateFailedError:
            pass
        else:
            raise AssertionError("capacity 0 was accepted")
        await request_permit(client, SEMAPHORE_ID, recorder, "forced")
        await semaphore.execute_update(
            ReplacementSemaphoreWorkflow.set_capacity, SetCapacityInput(capacity=2)
        )
        await semaphore.execute_update(
            ReplacementSemaphoreWorkflow.force_release,
            ForceReleaseInput(request_id="forced", reason="history"),
        )
        await assert_eventually(
            lambda: semaphore_state(client, SEMAPHORE_ID),
            lambda s: not s.holders,
            timeout=10,
            message="short lease expired",
        )

        # Cycles until the run continues as new.
        cycle = 0
        while (await first_run.describe()).status == WorkflowExecutionStatus.RUNNING:
            cycle += 1
            await request_permit(client, SEMAPHORE_ID, recorder, f"cycle-{cycle}")
            await release_permit(client, SEMAPHORE_ID, f"cycle-{cycle}")
            await asyncio.sleep(0.05)
        assert (await first_run.describe()).status == WorkflowExecutionStatus.CONTINUED_AS_NEW
        await recorder.terminate("history recorded")
        return (await first_run.fetch_history()).to_json()


async def main() -> None:
    """Start a dev server, record the history and write it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", help="file name: histories/semaphore_NAME.json")
    name = parser.parse_args().name
    if not name.replace("_", "").isalnum():
        parser.error(f"name must be letters, digits and underscores, got {name!r}")
    env = await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter,
        dev_server_existing_path=str(dev_server_path()),
    )
    try:
        history = await record(env.client)
    finally:
        await env.shutdown()
    path = HISTORIES / f"semaphore_{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(history + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    asyncio.run(main())
