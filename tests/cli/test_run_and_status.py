"""`remediate run` and `remediate status` against the dev server and a worker."""

from __future__ import annotations

from typing import Any

from tests.cli.conftest import Cli, parsed
from tests.conftest import assert_eventually


async def waiting_for_approval(cli: Cli, node: str) -> dict[str, Any]:
    return await assert_eventually(
        lambda: cli.status_json(node),
        lambda shown: shown["state"]["waiting_for"] == "approval of replace",
        message=f"{node} waits for approval of its replacement",
    )


async def test_run_opens_an_incident_that_status_lists_and_shows(cli: Cli) -> None:
    opened = parsed(await cli.run("gpu-1", "replace", "--policy", str(cli.policy_file), "--json"))
    assert opened["incident"] == "opened"
    assert opened["workflow_id"].endswith("/gpu-1")
    assert opened["requested_by"]

    shown = await waiting_for_approval(cli, "gpu-1")
    assert shown["open"] is True
    state = shown["state"]
    assert state["fault_class"] == "hardware_failure"
    (evidence,) = state["evidence"]
    assert evidence["kind"] == "manual"
    assert evidence["runbook"] == "replace"
    assert evidence["force"] is False
    assert any(d["action"] == "waiting for approval of replace" for d in state["decisions"])

    listing = parsed(await cli.node_command("status", "--json"))
    assert listing["cluster"] == cli.cluster.name
    (row,) = listing["incidents"]
    assert row["node"] == "gpu-1"
    assert row["pool"] == "gpu-pool"
    assert row["fault_class"] == "hardware_failure"
    assert row["waiting_for"] == "approval of replace"
    assert row["error"] is None

    table = await cli.node_command("status")
    assert table.exit_code == 0, table.stderr
    assert "gpu-1" in table.stdout
    assert "approval of replace" in table.stdout

    detail = await cli.node_command("status", "gpu-1")
    assert detail.exit_code == 0, detail.stderr
    for text in ("Evidence", "runbook replace", "Decision log", "waiting for approval of replace"):
        assert text in detail.stdout


async def test_run_on_a_node_with_an_open_incident_feeds_it(cli: Cli) -> None:
    parsed(await cli.run("gpu-2", "replace", "--policy", str(cli.policy_file), "--json"))
    await waiting_for_approval(cli, "gpu-2")
    again = parsed(await cli.run("gpu-2", "diagnose", "--reason", "second look", "--json"))
    assert again["incident"] == "existing"
    shown = await assert_eventually(
        lambda: cli.status_json("gpu-2"),
        lambda shown: len(shown["state"]["evidence"]) == 2,
        message="the second request reaches the same incident",
    )
    assert shown["state"]["evidence"][1]["message"] == "second look"


async def test_a_forced_replace_records_who_and_why_and_bypasses_the_breaker(cli: Cli) -> None:
    cli.cluster.fleet.pool_unhealthy = 9  # the breaker is open for the pool
    result = await cli.run(
        "gpu-3", "replace", "--force", "--reason", "RMA confirmed", "--requested-by", "bob"
    )
    assert result.exit_code == 0, result.stderr
    assert "forced" in result.stdout
    shown = await assert_eventually(
        lambda: cli.status_json("gpu-3"),
        lambda shown: not shown["open"],
        message="the forced replacement finishes",
    )
    state = shown["state"]
    assert state["outcome"] == "replaced"
    assert state["evidence"][0]["force"] is True
    assert state["evidence"][0]["message"] == "RMA confirmed"
    actions = {(d["stage"], d["action"], d["reason"]) for d in state["decisions"]}
    forced = "forced by bob (name given by the requester, not authenticated)"
    assert ("breaker", "bypassed", forced) in actions
    assert ("replace", "permit bypassed", forced) in actions


async def test_dry_run_opens_an_incident_that_changes_nothing(cli: Cli) -> None:
    result = parsed(await cli.run("gpu-4", "reboot", "--dry-run", "--json"))
    assert result["dry_run"] is True
    shown = await assert_eventually(
        lambda: cli.status_json("gpu-4"),
        lambda shown: not shown["open"],
        message="the dry run ends",
    )
    assert shown["state"]["outcome"] == "dry_run"
    assert shown["state"]["dry_run"] is True
    assert shown["status"] == "completed"
    assert cli.cluster.fleet.side_effects() == []


async def test_dry_run_is_refused_while_the_node_has_an_open_incident(cli: Cli) -> None:
    parsed(await cli.run("gpu-5", "replace", "--policy", str(cli.policy_file), "--json"))
    result = await cli.run("gpu-5", "replace", "--dry-run")
    assert result.exit_code == 1
    assert "already has an open incident" in result.stderr
    shown = await cli.status_json("gpu-5")
    assert shown["state"]["dry_run"] is False
    assert len(shown["state"]["evidence"]) == 1


async def test_status_of_a_cluster_without_incidents_says_so(cli: Cli) -> None:
    assert parsed(await cli.node_command("status", "--json"))["incidents"] == []
    result = await cli.node_command("status")
    assert result.exit_code == 0
    assert "No open incidents" in result.stdout
