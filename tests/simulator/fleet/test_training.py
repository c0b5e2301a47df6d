"""An attempt's timeline: periodic saves, requested saves, and an exact split of GPU time."""

from __future__ import annotations

import pytest

from simulator.fleet.training import Attempt, Ending, JobStats, Why


def attempt(resumed_from: float = 0.0) -> Attempt:
    # 100 s of work, a save every 30 s of work taking 5 s.
    return Attempt(
        started_at=1000.0, resumed_from=resumed_from, total=100.0, interval=30.0, cost=5.0
    )


def run_until(a: Attempt, until: float) -> None:
    """Let the attempt's own events happen up to ``until``."""
    while True:
        at, kind = a.next_event()
        if at > until or kind == "done":
            return
        if kind == "checkpoint":
            a.begin_save(at, Why.PERIODIC)
        else:
            a.finish_save(at)


def test_periodic_saves_pause_training_and_the_run_ends_after_its_work() -> None:
    a = attempt()
    assert a.next_event() == (1030.0, "checkpoint")
    run_until(a, 1200.0)
    # Saves at 30, 60, 90 s of work, 5 s each: done at 100 s of work + 15 s of saving.
    assert a.next_event() == (1115.0, "done")
    assert a.saved == 90.0
    usage = a.usage(1115.0, gpus=8, ending=Ending.COMPLETED)
    assert usage.allocated == 115.0 * 8
    assert usage.productive == 100.0 * 8
    assert usage.checkpointing == 15.0 * 8
    assert usage.lost == 0.0


def test_an_interruption_loses_the_work_since_the_last_checkpoint() -> None:
    a = attempt(resumed_from=20.0)
    run_until(a, 1050.0)  # a save at 50 s of work (1030-1035), then 15 s more
    assert a.saved == 50.0
    assert a.lost_work(1050.0) == pytest.approx(15.0)
    usage = a.usage(1050.0, gpus=1, ending=Ending.FAULT)
    assert (usage.productive, usage.checkpointing) == (30.0, 5.0)
    assert usage.lost == pytest.approx(15.0)
    assert usage.allocated == usage.productive + usage.checkpointing + usage.lost


def test_a_requested_save_is_charged_apart_and_restarts_the_periodic_clock() -> None:
    a = attempt()
    a.begin_save(1012.0, Why.REQUESTED)
    assert a.next_event() == (1017.0, "saved")
    assert a.finish_save(1017.0) == 12.0
    assert a.last_save_requested
    # The next periodic save is 30 s of work after the requested one.
    assert a.next_event() == (1047.0, "checkpoint")
    usage = a.usage(1020.0, gpus=2, ending=Ending.EVICTED)
    assert (usage.requested, usage.productive, usage.lost) == (10.0, 24.0, 6.0)


def test_a_running_attempt_counts_unsaved_work_and_a_save_in_flight() -> None:
    a = attempt()
    run_until(a, 1032.0)  # saving since 1030
    assert a.saving
    usage = a.usage(1032.0, gpus=1, ending=None)
    assert (usage.productive, usage.checkpointing, usage.lost) == (30.0, 2.0, 0.0)


def test_losses_are_charged_to_what_ended_the_attempt() -> None:
    stats = JobStats()
    a = attempt()
    run_until(a, 1040.0)
    stats.record(a.usage(1040.0, 1, Ending.FAULT), Ending.FAULT)
    b = attempt(resumed_from=30.0)
    stats.record(b.usage(1010.0, 1, Ending.REBOOTED), Ending.REBOOTED)
    assert stats.lost_to_faults == pytest.approx(5.0)
    assert stats.lost_to_remediation == pytest.approx(10.0)
    assert Ending.EVICTED.by_remediation
    assert not Ending.EVICTED.spends_budget
    assert Ending.DELETED.spends_budget


def test_a_slow_rank_stretches_training_and_its_time_is_charged_to_slowness() -> None:
    # Issue 37: from 10 s in, a rank's node runs 2x slower (rate 0.5) until 30 s.
    a = attempt()
    assert a.set_rate(1010.0, 0.5)
    assert a.next_event() == (1050.0, "checkpoint")  # 20 s of work left at half speed
    assert not a.set_rate(1020.0, 0.5)  # the same pace: nothing moves
    assert a.set_rate(1030.0, 1.0)  # 20 s at half speed: 10 s of work, 10 s lost
    assert a.work_at(1030.0) == pytest.approx(20.0)
    assert a.next_event() == (1040.0, "checkpoint")
    usage = a.usage(1040.0, gpus=2, ending=None)
    assert usage.slowed == pytest.approx(10.0 * 2)
    assert usage.productive == pytest.approx(30.0 * 2)
    assert usage.lost == 0.0
    assert usage.allocated == pytest.approx(usage.productive + usage.slowed)


def test_slowness_during_a_save_costs_nothing_more() -> None:
    a = attempt()
    a.set_rate(1000.0, 0.5)
    a.begin_save(1020.0, Why.REQUESTED)  # 10 s of work, 10 s lost to slowness
    a.set_rate(1022.0, 1.0)  # while saving: the save itself is not slower
    a.finish_save(1025.0)
    usage = a.usage(1025.0, gpus=1, ending=None)
    assert (usage.productive, usage.requested) == (pytest.approx(10.0), pytest.approx(5.0))
    assert usage.slowed == pytest.approx(10.0)


def test_a_restart_holds_its_nodes_before_it_trains_and_that_time_is_lost() -> None:
    a = Attempt(
        started_at=1000.0, resumed_from=30.0, total=100.0, interval=30.0, cost=5.0, startup=50.0
    )
    assert a.work_at(1040.0) == 30.0  # still loading its checkpoint
    assert a.work_at(1060.0) == 40.0
    a.begin_save(1020.0, Why.REQUESTED)  # asked during the startup: saves once it trains
    assert a.next_event() == (1055.0, "saved")
    usage = a.usage(1055.0, 1, None)
    assert usage.requested == 5.0
    assert usage.productive == 0.0


def test_a_hung_attempt_neither_trains_nor_saves_and_its_time_is_lost_as_hung() -> None:
    a = attempt()
    run_until(a, 1020.0)
    assert a.hang(1020.0)
    assert not a.hang(1030.0)  # hung already
    assert a.work_at(1500.0) == 20.0
    a.begin_save(1100.0, Why.REQUESTED)
    assert not a.saving
    usage = a.usage(1620.0, 2, Ending.FAULT)
    assert usage.hung == 600.0 * 2
    assert usage.lost == 620.0 * 2  # 20 s of unsaved work and 600 s hung
    assert usage.productive == 0.0


def test_a_hang_during_a_save_cuts_the_save_short() -> None:
    a = attempt()
    run_until(a, 1032.0)  # saving since 1030 (30 s of work)
    assert a.saving
    a.hang(1032.0)
    assert not a.saving
    usage = a.usage(1100.0, 1, Ending.EVICTED)
    assert usage.productive == 0.0  # the save never completed
    assert usage.checkpointing == 0.0
    assert usage.hung == 68.0
    assert usage.lost == 100.0


def test_job_stats_count_hangs_and_the_timeouts_that_ended_them() -> None:
    stats = JobStats()
    assert (stats.hangs, stats.hang_timeouts) == (0, 0)
