"""`remediate budget`: the replacement semaphore's capacity, holders and waiters."""

from __future__ import annotations

import asyncio

import pytest

from tests.cli.conftest import Cli, closed_port, invoke, parsed
from tests.conftest import assert_eventually


async def test_budget_before_the_first_replacement_says_the_semaphore_does_not_exist(
    cli: Cli,
) -> None:
    result = await cli.budget()
    assert result.exit_code == 4
    assert "does not exist yet (it is created with the first step it caps)" in result.stderr


async def test_a_steps_budget_is_its_own_semaphore_and_an_unknown_step_is_refused(
    cli: Cli,
) -> None:
    result = await cli.budget("--step", "reboot")
    assert result.exit_code == 4
    assert "-reboot does not exist yet" in result.stderr
    refused = await cli.budget("--step", "format_disk")
    assert refused.exit_code == 2
    assert "format_disk" in refused.stderr


async def test_budget_shows_holders_and_waiters_and_set_capacity_lets_a_waiter_in(
    cli: Cli,
) -> None:
    fleet = cli.cluster.fleet
    fleet.replace_gate = asyncio.Event()
    for node in ("gpu-1", "gpu-2", "gpu-3"):
        parsed(await cli.run(node, "replace", "--json"))
    # The default policy allows two replacements at once: the third waits in line.
    full = await assert_eventually(
        lambda: cli.budget("--json"),
        lambda result: result.exit_code == 0 and len(parsed(result)["waiters"]) == 1,
        message="two hold a permit and one waits",
    )
    state = parsed(full)
    assert state["capacity"] == 2
    assert len(state["holders"]) == 2
    (waiter,) = state["waiters"]
    assert waiter["position"] == 1
    assert waiter["node"].startswith(f"{cli.cluster.name}/gpu-")

    table = await cli.budget()
    assert table.exit_code == 0, table.stderr
    assert "capacity 2, 2 holding, 1 waiting" in table.stdout
    assert "Waiters (in order)" in table.stdout

    changed = parsed(await cli.budget("--set-capacity", "3", "--json"))
    assert changed["previous_capacity"] == 2
    assert changed["capacity"] == 3
    assert len(changed["holders"]) == 3
    assert changed["waiters"] == []
    fleet.replace_gate.set()


@pytest.mark.parametrize("capacity", ["0", "1001", "two"])
async def test_an_invalid_capacity_is_refused_before_anything_is_sent(capacity: str) -> None:
    # The closed port proves nothing is sent: connecting would exit 3.
    result = await invoke(
        "budget", "--set-capacity", capacity, "--address", f"127.0.0.1:{closed_port()}"
    )
    assert result.exit_code == 2
    assert "--set-capacity" in result.stderr
