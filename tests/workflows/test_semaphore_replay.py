"""Today's semaphore code replays a recorded history: determinism is kept.

The history was recorded from a real run by ``make_semaphore_history``; if this
fails after a change, the change would break running semaphores (use
``workflow.patched``), unless the change is meant to and is deployed safely.
"""

from __future__ import annotations

from pathlib import Path

from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from workflows.replacement_semaphore import ReplacementSemaphoreWorkflow

HISTORY = Path(__file__).parent / "histories" / "semaphore_basic.json"


async def test_recorded_semaphore_history_replays() -> None:
    history = WorkflowHistory.from_json("replacement-semaphore", HISTORY.read_text())
    event_types = {event.event_type for event in history.events}
    # The recording covers the paths worth protecting (see make_semaphore_history).
    assert len(event_types) >= 12, event_types

    replayer = Replayer(
        workflows=[ReplacementSemaphoreWorkflow], data_converter=pydantic_data_converter
    )
    result = await replayer.replay_workflow(history, raise_on_replay_failure=True)
    assert result.replay_failure is None
