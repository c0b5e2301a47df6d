"""Today's semaphore code replays recorded histories: determinism is kept.

The histories were recorded from a real run by ``make_semaphore_history``; if this
fails after a change, the change would break running semaphores (use
``workflow.patched``), unless the change is meant to and is deployed safely.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from workflows.replacement_semaphore import ReplacementSemaphoreWorkflow

HISTORIES = sorted((Path(__file__).parent / "histories").glob("semaphore_*.json"))


def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json("replacement-semaphore", path.read_text())


def test_a_semaphore_history_is_recorded() -> None:
    # One per supported version of the semaphore's commands (ADR 007).
    assert len(HISTORIES) >= 1


# As deployed (outside the sandbox, ADR 008), and inside it: the sandbox's
# restrictions still hold for the semaphore's code.
RUNNERS: dict[str, WorkflowRunner] = {
    "unsandboxed": UnsandboxedWorkflowRunner(),
    "sandboxed": SandboxedWorkflowRunner(),
}


@pytest.mark.parametrize("runner", RUNNERS.values(), ids=RUNNERS.keys())
@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_recorded_semaphore_history_replays(path: Path, runner: WorkflowRunner) -> None:
    history = load(path)
    event_types = {event.event_type for event in history.events}
    # The recording covers the paths worth protecting (see make_semaphore_history).
    assert len(event_types) >= 12, event_types

    replayer = Replayer(
        workflows=[ReplacementSemaphoreWorkflow],
        data_converter=pydantic_data_converter,
        unsandboxed_workflow_runner=runner,
    )
    result = await replayer.replay_workflow(history, raise_on_replay_failure=True)
    assert result.replay_failure is None
