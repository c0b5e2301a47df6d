"""`remediate pause|resume|approve|skip|retry|abort`: the workflow's validated updates."""

from __future__ import annotations

import asyncio
from typing import Any

from gpu_remediation.ids import Activities
from tests.cli.conftest import Cli, parsed
from tests.conftest import assert_eventually


async def open_replacement(cli: Cli, node: str) -> dict[str, Any]:
    """An incident waiting for approval of its replacement."""
    parsed(await cli.run(node, "replace", "--policy", str(cli.policy_file), "--json"))
    return await assert_eventually(
        lambda: cli.status_json(node),
        lambda shown: shown["state"]["waiting_for"] == "approval of replace",
        message=f"{node} waits for approval",
    )


async def test_pause_and_resume_are_recorded_and_repeats_refused(cli: Cli) -> None:
    await open_replacement(cli, "gpu-1")
    paused = parsed(
        await cli.node_command("pause", "gpu-1", "--by", "carol", "--reason", "maint", "--json")
    )
    assert paused["action"] == "pause"
    assert paused["state"]["paused"] is True
    assert paused["state"]["decisions"][-1]["reason"] == "carol: maint"

    again = await cli.node_command("pause", "gpu-1")
    assert again.exit_code == 1
    assert "pause refused: already paused" in again.stderr

    resumed = await cli.node_command("resume", "gpu-1")
    assert resumed.exit_code == 0, resumed.stderr
    assert "resume accepted" in resumed.stdout
    assert (await cli.status_json("gpu-1"))["state"]["paused"] is False


async def test_approving_the_wrong_rung_prints_the_validators_reason(cli: Cli) -> None:
    await open_replacement(cli, "gpu-2")
    result = await cli.node_command("approve", "gpu-2", "--rung", "reboot")
    assert result.exit_code == 1
    assert "approve refused: reboot is not waiting for approval; replace is" in result.stderr
    assert result.stdout == ""


async def test_approve_without_a_rung_approves_what_waits_and_the_node_is_replaced(
    cli: Cli,
) -> None:
    fleet = cli.cluster.fleet
    fleet.replace_gate = asyncio.Event()
    await open_replacement(cli, "gpu-3")
    approved = parsed(await cli.node_command("approve", "gpu-3", "--json"))
    assert approved["state"]["decisions"][-1]["action"] == "approved replace"

    # While the replacement runs, the node holds a permit of the test's semaphore.
    budget = await assert_eventually(
        lambda: cli.budget("--json"),
        lambda result: result.exit_code == 0 and parsed(result)["holders"],
        message="the replacement holds a permit",
    )
    (holder,) = parsed(budget)["holders"]
    assert holder["node"] == f"{cli.cluster.name}/gpu-3"
    fleet.replace_gate.set()
    shown = await assert_eventually(
        lambda: cli.status_json("gpu-3"),
        lambda shown: not shown["open"],
        message="the replacement finishes",
    )
    assert shown["state"]["outcome"] == "replaced"


async def test_approve_with_nothing_waiting_says_what_the_incident_waits_for(cli: Cli) -> None:
    # A manual "auto" request is classified unknown, which has a grace period.
    parsed(await cli.run("gpu-4", "auto", "--json"))
    await assert_eventually(
        lambda: cli.status_json("gpu-4"),
        lambda shown: (shown["state"]["waiting_for"] or "").startswith("grace period"),
        message="the incident waits out its grace period",
    )
    inferred = await cli.node_command("approve", "gpu-4")
    assert inferred.exit_code == 1
    assert "nothing is waiting for approval on gpu-4 (stage grace" in inferred.stderr
    explicit = await cli.node_command("approve", "gpu-4", "--rung", "replace")
    assert explicit.exit_code == 1
    assert "approve refused: no step is waiting for approval" in explicit.stderr


async def test_skip_and_retry_refusals_name_the_reason(cli: Cli) -> None:
    await open_replacement(cli, "gpu-5")
    skip = await cli.node_command("skip", "gpu-5", "--to", "quarantine")
    assert skip.exit_code == 1
    assert "cannot skip to quarantine" in skip.stderr
    retry = await cli.node_command("retry", "gpu-5")
    assert retry.exit_code == 1
    assert "retry_step refused: no step has run yet" in retry.stderr
    skipped = parsed(await cli.node_command("skip", "gpu-5", "--to", "escalate", "--json"))
    assert skipped["state"]["decisions"][-1]["action"] == "skip to escalate"


async def test_abort_cleans_up_and_then_the_node_has_no_open_incident(cli: Cli) -> None:
    await open_replacement(cli, "gpu-6")
    result = await cli.node_command("abort", "gpu-6", "--leave-cordoned", "--reason", "manual")
    assert result.exit_code == 0, result.stderr
    shown = await assert_eventually(
        lambda: cli.status_json("gpu-6"),
        lambda shown: not shown["open"],
        message="the abort finishes",
    )
    assert shown["state"]["outcome"] == "aborted"
    (release,) = [arg for name, arg in cli.cluster.fleet.calls if name == Activities.RELEASE_NODE]
    assert release.uncordon is False  # type: ignore[attr-defined]

    closed = await cli.node_command("pause", "gpu-6")
    assert closed.exit_code == 4
    assert "gpu-6 has no open incident" in closed.stderr


async def test_pause_all_pauses_every_open_incident_and_resume_all_undoes_it(cli: Cli) -> None:
    await open_replacement(cli, "gpu-7")
    await open_replacement(cli, "gpu-8")
    assert (await cli.node_command("pause", "gpu-8")).exit_code == 0

    paused = parsed(await cli.node_command("pause", "--all", "--reason", "freeze", "--json"))
    results = {item["node"]: item for item in paused["incidents"]}
    assert set(results) == {"gpu-7", "gpu-8"}
    assert results["gpu-7"]["result"] == "accepted"
    # Already paused is reported, and is not a failure.
    assert results["gpu-8"]["result"] == "already paused"
    for node in ("gpu-7", "gpu-8"):
        assert (await cli.status_json(node))["state"]["paused"] is True

    resumed = await cli.node_command("resume", "--all")
    assert resumed.exit_code == 0, resumed.stderr
    for node in ("gpu-7", "gpu-8"):
        assert (await cli.status_json(node))["state"]["paused"] is False


async def test_pause_needs_a_node_or_all_but_not_both(cli: Cli) -> None:
    neither = await cli.node_command("pause")
    assert neither.exit_code == 2
    assert "NODE or --all" in neither.stderr
    both = await cli.node_command("pause", "gpu-9", "--all")
    assert both.exit_code == 2


async def test_abort_all_of_a_pool_stops_its_incidents_and_needs_a_reason(cli: Cli) -> None:
    await open_replacement(cli, "gpu-10")
    await open_replacement(cli, "gpu-11")
    unexplained = await cli.node_command("abort", "--all")
    assert unexplained.exit_code == 2
    assert "needs a --reason" in unexplained.stderr
    elsewhere = parsed(
        await cli.node_command("abort", "--all", "--pool", "other", "--reason", "x", "--json")
    )
    assert elsewhere["incidents"] == []
    assert elsewhere["pool"] == "other"

    stopped = parsed(
        await cli.node_command(
            "abort", "--all", "--pool", "gpu-pool", "--reason", "network outage", "--json"
        )
    )
    results = {item["node"]: item["result"] for item in stopped["incidents"]}
    assert results == {"gpu-10": "accepted", "gpu-11": "accepted"}
    for node in ("gpu-10", "gpu-11"):
        shown = await assert_eventually(
            lambda node=node: cli.status_json(node),  # type: ignore[misc]
            lambda shown: not shown["open"],
            message=f"{node}'s abort finishes",
        )
        assert shown["state"]["outcome"] == "aborted"


async def test_pool_applies_only_with_abort_all(cli: Cli) -> None:
    result = await cli.node_command("abort", "gpu-12", "--pool", "gpu-pool")
    assert result.exit_code == 2
    assert "--pool applies only with --all" in result.stderr
