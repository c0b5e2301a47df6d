"""Where the ladder's time goes: the ladder benchmark with one feature switched off.

Diagnostic only (not part of ``make bench``): runs the ladder phase of
``bench.ladder`` once as is and once per variant, on a fresh server each, and
compares wall time and CPU (server + Python) per incident. Variants patch
passed-through modules for the run (no project file changes):

* ``no_upserts``: ``workflow.upsert_search_attributes`` does nothing (6 per incident);
* ``no_details``: ``workflow.set_current_details`` does nothing;
* ``no_record_step``: ``NodeActions.record`` returns at once (no record_step activity);
* ``unsandboxed``: the worker runs workflows without the sandbox.

Run: ``.venv/bin/python -m bench.ladder_profile [--workflows 200]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from collections.abc import Iterator
from typing import Any
from unittest import mock

from temporalio import workflow
from temporalio.worker import UnsandboxedWorkflowRunner

from bench.ladder import ladder_phase
from workflows.node_actions import NodeActions


def _nothing(*_args: Any, **_kwargs: Any) -> None:
    return None


async def _no_record(*_args: Any, **_kwargs: Any) -> None:
    return None


@contextlib.contextmanager
def _variant(name: str) -> Iterator[dict[str, Any]]:
    if name == "no_upserts":
        with mock.patch.object(workflow, "upsert_search_attributes", _nothing):
            yield {}
    elif name == "no_details":
        with mock.patch.object(workflow, "set_current_details", _nothing):
            yield {}
    elif name == "no_record_step":
        with mock.patch.object(NodeActions, "record", _no_record):
            yield {}
    elif name == "unsandboxed":
        yield {"workflow_runner": UnsandboxedWorkflowRunner()}
    else:
        yield {}


VARIANTS = ["as_is", "no_upserts", "no_details", "no_record_step", "unsandboxed", "as_is_again"]


async def run(workflows: int, in_flight: int) -> list[dict[str, Any]]:
    """Run every variant; return one row each (also printed)."""
    rows: list[dict[str, Any]] = []
    for name in VARIANTS:
        with _variant(name) as options:
            phase, activities, _ = await ladder_phase(workflows, in_flight, "reboot", **options)
        cpu = phase.server_cpu_s + phase.python_cpu_s
        row = {
            "variant": name,
            "seconds": phase.seconds,
            "activities": activities,
            "events": phase.history_events_per_workflow,
            "server_cpu_ms_per_incident": round(1000 * phase.server_cpu_s / workflows, 1),
            "python_cpu_ms_per_incident": round(1000 * phase.python_cpu_s / workflows, 1),
            "cpu_ms_per_incident": round(1000 * cpu / workflows, 1),
            "other_cpu_s": phase.other_cpu_s,
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=200)
    parser.add_argument("--in-flight", type=int, default=100)
    args = parser.parse_args()
    asyncio.run(run(args.workflows, args.in_flight))


if __name__ == "__main__":
    main()
