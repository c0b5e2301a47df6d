"""``remediate demo --chaos``: the system keeps every promise while its own parts are killed.

One short run of the real command on a small fleet: the worker SIGKILLed and
restarted, the watcher crashed and started afresh, the Temporal server
stopped and restarted on its database, the Alertmanager receiver SIGKILLed and
restarted (alerts from the simulated Alertmanager are the second trigger
path), Kubernetes API 429/500/410 and latency bursts, SSM and EC2 throttling,
at seeded times, while a scenario's faults climb the ladder (resets, reboots, a
replacement). The JSON summary's ``chaos`` section must name every fault kind
injected and every invariant, with no violation.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from demo.chaos.driver import KINDS
from simulator.fleet import PoolSpec
from simulator.kube_api import NODES
from tests.conftest import assert_eventually
from tests.e2e.conftest import MakeStack, fleet_call, settled_incidents

REPO = Path(__file__).resolve().parents[2]

SCENARIO = """\
events:
  - {at: 1m, fault: fallen_off_bus, node: gpu-0002}
  - {at: 90s, fault: xid_reset, node: gpu-0001}
  - {at: 2m, fault: row_remap_failure, node: gpu-0004}
  - {at: 3m, fault: application, node: gpu-0003, clears_after: 2m}
  - {at: 5m, fault: fallen_off_bus, node: gpu-0005}
  - {at: 6m, fault: xid_reset, node: gpu-0006}
"""
INVARIANTS = {
    "incidents_lost",
    "duplicate_incidents",
    "reboots_per_decision",
    "resets_done_twice",
    "replacements_done_twice",
    "replacements_within_cap",
    "permits_leaked",
    "nodes_left_quarantined",
    "workflows_failed_or_stuck",
    "steps_within_budget",
    "actions_on_pinned_machine",
}

pytestmark = pytest.mark.timeout(200)


def _env() -> dict[str, str]:
    return {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("TEMPORAL_", "GPU_REMEDIATION_", "AWS_"))
    }


@pytest.fixture(scope="module")
async def chaos_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], str]:
    scenario = tmp_path_factory.mktemp("chaos") / "scenario.yaml"
    scenario.write_text(SCENARIO)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cli.main",
        "demo",
        "--port",
        "0",
        "--ui-port",
        "0",
        # Thirty nodes: the pool's breaker (20%) lets six be worked on at once.
        "--nodes",
        "30",
        "--pools",
        "gpu",
        "--no-workloads",
        "--scenario",
        str(scenario),
        "--time-factor",
        "60",
        "--duration",
        "12m",
        # A worker killed mid-activity leaves it to the server's timeouts: the
        # policy's `timeouts` (bookkeeping, heartbeat), scaled by the time factor
        # to their 10 s real floor (demo/policy.py). What is left after the run is
        # the last incidents' own ladder (about 40 s real here).
        "--settle-timeout",
        "90",
        "--seed",
        "5",
        "--chaos",
        "--chaos-faults",
        "1",
        "--json",
        cwd=REPO,
        env=_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=190)
    err = stderr.decode()
    lines = stdout.decode().strip().splitlines()
    assert lines, err[-3000:]
    assert process.returncode is not None
    return process.returncode, json.loads(lines[-1]), err


def test_a_short_chaos_run_injects_every_kind_and_keeps_every_invariant(
    chaos_run: tuple[int, dict[str, Any], str],
) -> None:
    code, summary, err = chaos_run
    chaos = summary["chaos"]
    assert chaos["violations"] == [], err[-3000:]
    assert code == 0, err[-3000:]
    assert {kind: chaos["faults_injected"].get(kind, 0) >= 1 for kind in KINDS} == dict.fromkeys(
        KINDS, True
    )
    assert set(chaos["invariants"]) == INVARIANTS
    # Alerts were the second trigger path: the receiver took some, none was lost.
    lost = chaos["invariants"]["incidents_lost"]["checked"]
    assert re.search(r"[1-9]\d* acknowledged by the receiver", lost), lost
    assert all(view["violations"] == [] for view in chaos["invariants"].values())
    # Each fault is logged with its time, and the run really remediated meanwhile.
    assert all(f["at_s"] >= 0 and f["sim_s"] >= 0 for f in chaos["faults"])
    assert summary["incidents"] >= 5
    # Which rungs run depends on when the pool's breaker opens under chaos; at
    # least two kinds of corrective action must have been judged.
    corrective = [r for r in ("gpu_reset", "reboot", "replace") if summary["rungs_used"].get(r)]
    assert len(corrective) >= 2, summary["rungs_used"]


async def test_a_fault_that_appears_while_the_watcher_is_down_gets_its_incident_from_the_fresh_one(
    make_stack: MakeStack,
) -> None:
    stack = await make_stack([PoolSpec(name="gpu", nodes=4)])
    await stack.crash_watcher()
    assert stack.watcher is None
    stack.fleet.inject("xid_reset", "gpu-0001", gpu=1)

    def problem() -> bool:
        node = stack.fleet.store.get(NODES, "gpu-0001")
        return any(
            c["type"] == "GpuHealthProblem" and c["status"] == "True"
            for c in node["status"]["conditions"]
        )

    await assert_eventually(
        lambda: fleet_call(problem),
        bool,
        timeout=20,
        message="the node agent reports the fault while no watcher runs",
    )
    assert await stack.book.refresh_list() == []  # nobody saw it
    stack.start_watcher()  # comes back as a crashed watcher does: listing from scratch

    (incident,) = await settled_incidents(stack, 1, timeout=60)
    assert incident.node == "gpu-0001"
    assert incident.result == "repaired"


async def test_evidence_that_clears_while_triage_reads_the_node_closes_the_incident_as_transient(
    make_stack: MakeStack,
) -> None:
    # Found by `remediate demo --chaos`: the recovery reached the incident while its
    # first read of the node was slow (there, held up by a Temporal restart).
    stack = await make_stack([PoolSpec(name="gpu", nodes=4)], time_factor=60)
    stack.fleet.kube.faults.inject(r"^/api/v1/nodes/gpu-0001$", method="GET", latency=3.0, times=1)
    # Xid 250 is outside NVIDIA's catalog: "unknown", with a grace period.
    stack.fleet.inject("false_positive", "gpu-0001", xid=250, clears_after=timedelta(seconds=60))

    (incident,) = await settled_incidents(stack, 1, timeout=15)

    assert incident.result == "transient"
