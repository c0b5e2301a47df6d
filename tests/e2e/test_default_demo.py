"""``make demo`` as a new user runs it: the default scenario tells the whole story.

The default scenario (demo/scenarios/default.yaml) is what the README and
docs/getting-started.md promise: a job that speaks the checkpoint handshake is
asked to save before its node is drained and completes elsewhere, the project
fails no job run, a replacement node is admitted only after its burn-in, and the
first node Karpenter launches is caught dead on arrival. One run of the real
command (about two minutes) checks all of it from its JSON summary.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    return {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("TEMPORAL_", "GPU_REMEDIATION_", "AWS_"))
    }


@pytest.fixture(scope="module")
async def default_demo() -> dict[str, Any]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cli.main",
        "demo",
        "--port",
        "0",
        "--ui-port",
        "0",
        "--json",
        cwd=REPO,
        env=_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=280)
    assert process.returncode == 0, stderr.decode()[-3000:]
    summary: dict[str, Any] = json.loads(stdout.decode().strip().splitlines()[-1])
    return summary


pytestmark = pytest.mark.timeout(300)


def test_a_job_that_speaks_the_handshake_checkpoints_before_its_drain_and_resumes(
    default_demo: dict[str, Any],
) -> None:
    jobs = default_demo["jobs"]
    assert jobs["checkpoint_requests"] >= 1
    assert jobs["checkpoints_answered"] >= 1
    assert jobs["restarts_from_checkpoint"] >= 1
    assert jobs["runs_succeeded"] > 0


def test_the_project_fails_no_job_run_and_costs_handshake_jobs_nothing(
    default_demo: dict[str, Any],
) -> None:
    jobs = default_demo["jobs"]
    assert jobs["runs_failed"] == 0
    assert jobs["runs_failed_by_remediation"] == 0
    assert jobs["remediation_caused_failures_handshake"] == 0
    assert jobs["success_rate"] == 1.0


def test_a_replacement_is_admitted_after_burn_in_and_a_dead_on_arrival_node_is_caught(
    default_demo: dict[str, Any],
) -> None:
    admission = default_demo["admission"]
    assert admission["dead_on_arrival"] >= 1
    assert admission["nodes_admitted"] >= 1
    assert admission["ready_to_schedulable_p50_s"] > 0


def test_slow_gpus_are_caught_and_repaired_while_their_gangs_run_slower(
    default_demo: dict[str, Any],
) -> None:
    # One the agent's GpuDegraded condition shows, one only the job's step times do:
    # that straggler report got the idle node diagnosed, and the diagnostic named it.
    assert default_demo["by_fault_class"]["gpu_degraded"] == {"repaired": 2}
    assert default_demo["started_by"]["straggler"] == 1
    assert default_demo["rung_attempts"]["diagnose"] == 1
    assert default_demo["jobs"]["gpu_hours_lost_to_slowness"] > 0


def test_every_rung_of_the_ladder_is_shown_within_the_replacement_cap(
    default_demo: dict[str, Any],
) -> None:
    assert {"gpu_reset", "reboot", "replace"} <= default_demo["rungs_used"].keys()
    assert {"repaired", "replaced", "application_fault", "transient"} <= default_demo[
        "outcomes"
    ].keys()
    assert 0 < default_demo["max_concurrent_replacements"] <= default_demo["replacement_cap"]
