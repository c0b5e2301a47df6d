"""Every operator command fails clearly: unreachable Temporal, no incident, bad input."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from gpu_remediation.policy_loader import load_policy
from tests.cli.conftest import closed_port, invoke, parsed
from tests.workflows.node_support import manual
from triggers.starter import IncidentStarter

COMMANDS = [
    ["status"],
    ["status", "gpu-1"],
    ["run", "gpu-1", "--runbook", "auto"],
    ["pause", "gpu-1"],
    ["pause", "--all"],
    ["approve", "gpu-1"],
    ["abort", "gpu-1"],
    ["budget"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: "-".join(c))
async def test_unreachable_temporal_exits_3_quickly_naming_the_address(
    command: list[str],
) -> None:
    address = f"127.0.0.1:{closed_port()}"
    started = time.monotonic()
    result = await invoke(*command, "--address", address)
    assert result.exit_code == 3
    assert f"Temporal unreachable at {address}" in result.stderr
    assert result.stdout == ""
    assert time.monotonic() - started < 5


async def test_an_unknown_namespace_exits_3(temporal_args: list[str]) -> None:
    address = temporal_args[1]
    result = await invoke("status", "--address", address, "--namespace", "no-such-namespace")
    assert result.exit_code == 3
    assert f"Temporal at {address} has no namespace 'no-such-namespace'" in result.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["run", "GPU_1", "--runbook", "auto"],
        ["status", "bad_name"],
        ["pause", "gpu..1"],
        ["approve", "Node1"],
        ["skip", "x" * 300, "--to", "reboot"],
    ],
    ids=["run", "status", "pause", "approve", "skip"],
)
async def test_an_invalid_node_name_exits_2_without_connecting(command: list[str]) -> None:
    # The closed port proves no connection is attempted: that would exit 3.
    result = await invoke(*command, "--address", f"127.0.0.1:{closed_port()}")
    assert result.exit_code == 2
    assert "not a valid Kubernetes node name" in result.stderr


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--runbook", "replace", "--force"], "--force needs a --reason"),
        (["--runbook", "reboot", "--force", "--reason", "x"], "--force applies only to"),
        (["--runbook", "rma"], "'rma' is not one of"),
        (["--runbook", "auto", "--requested-by", "x" * 300], "requested_by"),
        (["--runbook", "auto", "--cluster", "bad cluster"], "invalid cluster name"),
        (["--runbook", "auto", "--policy", "missing.yaml"], "does not exist"),
    ],
    ids=[
        "force-without-reason",
        "force-not-replace",
        "runbook",
        "requested-by",
        "cluster",
        "policy",
    ],
)
async def test_invalid_run_input_exits_2_with_the_reason(
    extra: list[str], message: str, temporal_args: list[str]
) -> None:
    result = await invoke("run", "gpu-1", *extra, *temporal_args)
    assert result.exit_code == 2
    assert message in result.stderr


async def test_an_invalid_policy_file_exits_2_naming_the_field(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("rungs:\n  reboot: {max_attempts: 0}\n")
    result = await invoke("run", "gpu-1", "--runbook", "auto", "--policy", str(policy))
    assert result.exit_code == 2
    assert "rungs.reboot.max_attempts" in result.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["status", "gpu-none"],
        ["pause", "gpu-none"],
        ["resume", "gpu-none"],
        ["approve", "gpu-none"],
        ["skip", "gpu-none", "--to", "reboot"],
        ["retry", "gpu-none"],
        ["abort", "gpu-none"],
    ],
    ids=lambda c: c[0],
)
async def test_a_node_without_an_incident_exits_4(
    command: list[str], temporal_args: list[str]
) -> None:
    cluster = f"c{uuid.uuid4().hex[:8]}"
    result = await invoke(*command, *temporal_args, "--cluster", cluster)
    assert result.exit_code == 4
    assert f"node gpu-none has no incident in cluster {cluster}" in result.stderr
    assert result.stdout == ""


async def test_a_query_nobody_answers_fails_after_the_timeout_with_a_hint(
    dev_client: Client, task_queue: str, temporal_args: list[str]
) -> None:
    # An incident on a task queue no worker polls: its state query cannot be answered.
    cluster = f"c{uuid.uuid4().hex[:8]}"
    starter = IncidentStarter(
        dev_client, cluster=cluster, policy=load_policy(), task_queue=task_queue
    )
    await starter.report("gpu-1", [manual("reboot")])
    result = await invoke("status", "gpu-1", *temporal_args, "--cluster", cluster, "--timeout", "1")
    assert result.exit_code == 1
    assert "no answer to the state query within 1s" in result.stderr
    assert "is a remediation worker running" in result.stderr

    # The list still shows the incident, from visibility, and says what failed.
    listing = await invoke(
        "status", "--json", *temporal_args, "--cluster", cluster, "--timeout", "1"
    )
    (row,) = parsed(listing)["incidents"]
    assert row["node"] == "gpu-1"
    assert "no answer to the state query" in row["error"]
    assert "warning: gpu-remediation/" in listing.stderr
    await dev_client.get_workflow_handle(starter.workflow_id("gpu-1")).terminate("test over")
