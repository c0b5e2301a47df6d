"""Today's admission workflow replays recorded admissions (made by make_admission_histories)."""

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from worker import WORKFLOWS

HISTORIES = sorted((Path(__file__).parent / "histories").glob("admission_*.json"))


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_recorded_admission_replays(path: Path) -> None:
    history = load(path)
    replayer = Replayer(workflows=list(WORKFLOWS), data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=True)
    assert result.replay_failure is None


def load(path: Path) -> WorkflowHistory:
    record = json.loads(path.read_text())
    return WorkflowHistory.from_json(record["workflow_id"], record["history"])


def test_the_admitted_and_dead_on_arrival_paths_are_recorded() -> None:
    assert {p.stem for p in HISTORIES} >= {"admission_admitted", "admission_dead_on_arrival"}
