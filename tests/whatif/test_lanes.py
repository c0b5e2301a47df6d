"""A policy in a child process: what it is told, and a failure named by its policy."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from rich.console import Console

from demo.server import free_port
from whatif.lanes import lane_spec, run_lanes
from whatif.options import CompareError, CompareOptions, options_from
from whatif.runner import CompareRun


def _compare(tmp_path: Path) -> CompareRun:
    options = options_from(
        nodes=4,
        pools="h100",
        duration="1h",
        time_factor=600,
        policies="no-automation,replace-always",
        workloads=False,
        live=False,
        parallel=2,
    )
    return CompareRun(options, ui=Console(quiet=True), run_dir=tmp_path)


def test_the_spec_carries_the_options_tag_and_directory(tmp_path: Path) -> None:
    compare = _compare(tmp_path)
    spec = lane_spec(compare, 1, "127.0.0.1:7233", "default")
    assert CompareOptions.model_validate(spec["options"]) == compare.options
    assert (spec["index"], spec["tag"], spec["run_dir"]) == (1, compare.tag, str(tmp_path))


async def test_a_lane_that_cannot_reach_temporal_fails_naming_its_policy(tmp_path: Path) -> None:
    compare = _compare(tmp_path)
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(CompareError) as failed:
        await asyncio.wait_for(run_lanes(compare, address, "default"), 120)
    message = str(failed.value)
    assert "(child process, exit" in message
    assert "'no-automation'" in message or "'replace-always'" in message
