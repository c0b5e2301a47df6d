"""The chaos plan: seeded, inside the run's window, every kind named or refused."""

from __future__ import annotations

import pytest

from demo.chaos.driver import KINDS, WINDOW, parse_kinds, plan
from demo.run import DemoError, options_from


def test_the_same_seed_plans_the_same_faults_and_another_seed_other_times() -> None:
    first = plan(7, KINDS, 2, 100.0)
    assert first == plan(7, KINDS, 2, 100.0)
    assert first != plan(8, KINDS, 2, 100.0)
    assert [kind for _, kind in first].count("worker_kill") == 2
    assert len(first) == 2 * len(KINDS)
    assert first == sorted(first)


def test_faults_fall_inside_the_window_leaving_the_end_for_settling() -> None:
    times = [at for at, _ in plan(3, KINDS, 10, 50.0)]
    assert min(times) >= 50.0 * WINDOW[0]
    assert max(times) <= 50.0 * WINDOW[1]


def test_kinds_are_all_or_a_list_and_an_unknown_one_is_refused_by_name() -> None:
    assert parse_kinds("all") == KINDS
    assert parse_kinds("watcher_restart, worker_kill") == ("worker_kill", "watcher_restart")
    with pytest.raises(ValueError, match="reboot_the_moon"):
        parse_kinds("worker_kill,reboot_the_moon")


def test_the_demo_refuses_an_unknown_chaos_kind_naming_the_option() -> None:
    with pytest.raises(DemoError, match=r"--chaos-kinds: .*reboot_the_moon"):
        options_from(chaos=True, chaos_kinds="reboot_the_moon")
