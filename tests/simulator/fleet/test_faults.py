"""Fault kinds, the Llama 3 fault mix and scenario files (no fleet needed)."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest

from gpu_remediation import catalog
from simulator.fleet import FAULTS, FaultKind, FaultMix, Fix, Scenario, ScenarioError
from simulator.fleet.faults import LLAMA3_NODE_HOURS, LemonModel


def first(mix: FaultMix, seed: int, count: int = 50) -> list[tuple[float, str, float, float]]:
    return [
        (p.at, p.kind.value, p.ordinal, p.gpu_draw)
        for p in itertools.islice(mix.events(seed, nodes=500), count)
    ]


def test_the_fault_mix_is_deterministic_for_a_seed() -> None:
    mix = FaultMix.llama3(multiplier=50)
    assert first(mix, seed=3) == first(FaultMix.llama3(multiplier=50), seed=3)
    assert first(mix, seed=3) != first(mix, seed=4)


def test_the_default_mix_is_the_llama3_table_plus_false_positives() -> None:
    mix = FaultMix()
    interruptions = sum(r for k, r in mix.rates.items() if k is not FaultKind.FALSE_POSITIVE)
    assert interruptions * LLAMA3_NODE_HOURS == pytest.approx(419)
    # Faults only a replacement fixes and false positives are both in it.
    replace_only = [k for k, r in mix.rates.items() if r > 0 and FAULTS[k].fix is Fix.REPLACE]
    assert set(replace_only) >= {FaultKind.ROW_REMAP_FAILURE, FaultKind.EFA_DEVICE_MISSING}
    assert mix.rates[FaultKind.FALSE_POSITIVE] > 0


def test_the_mix_draws_faults_at_its_rate() -> None:
    mix = FaultMix.llama3(multiplier=100)
    horizon = 3600.0 * 24 * 30
    count = sum(1 for _ in itertools.takewhile(lambda p: p.at < horizon, mix.events(1, 500)))
    expected = mix.per_node_hour() * 500 * horizon / 3600
    assert expected * 0.9 < count < expected * 1.1


def test_every_xid_the_hardware_reports_is_in_the_catalog() -> None:
    for info in FAULTS.values():
        if info.xid is not None:
            assert catalog.xid_info(info.xid) is not None, info.kind
        if info.dcgm_error is not None:
            assert info.dcgm_error in catalog.DCGM_ERRORS, info.kind
        if info.efa_check is not None:
            assert info.efa_check in catalog.EFA_CHECKS, info.kind


def test_a_scenario_file_is_read_with_durations(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(
        "events:\n"
        "  - {at: 2m, fault: fallen_off_bus, node: h100-0003, gpu: 2}\n"
        "  - {at: 30s, fault: false_positive, pool: h100, fraction: 0.5, xid: 64}\n"
    )
    scenario = Scenario.load(path)
    assert [e.at.total_seconds() for e in scenario.ordered()] == [30.0, 120.0]
    assert scenario.ordered()[0].xid == 64


@pytest.mark.parametrize(
    ("event", "problem"),
    [
        ("{at: 1m, fault: meltdown}", "fault"),
        ("{at: 1m, fault: host_hang, gpu: 2}", "node fault"),
        ("{at: 1m, fault: xid_reset, node: a, pool: b}", "either node or pool"),
        ("{at: 1m, fault: xid_reset, pool: b, count: 2, fraction: 0.5}", "count or fraction"),
        ("{at: -5s, fault: xid_reset}", "at"),
        ("{at: 1m, fault: efa_link, xid: 79}", "reports no Xid"),
    ],
)
def test_a_bad_scenario_is_refused_naming_the_problem(
    tmp_path: Path, event: str, problem: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(f"events:\n  - {event}\n")
    with pytest.raises(ScenarioError, match=problem):
        Scenario.load(path)


def test_a_fault_mix_file_overrides_rates(tmp_path: Path) -> None:
    path = tmp_path / "mix.yaml"
    path.write_text("rates: {fallen_off_bus: 0.01, false_positive: 0.002}\nmultiplier: 2\n")
    mix = FaultMix.load(path)
    assert mix.per_node_hour() == pytest.approx(0.024)
    bad = tmp_path / "bad.yaml"
    bad.write_text("rates: {fallen_off_bus: -1}\n")
    with pytest.raises(ScenarioError, match="rates"):
        FaultMix.load(bad)


def test_lemon_hosts_add_faults_on_their_slots_and_leave_the_base_plan_as_it_was() -> None:
    # Issue 36: 2% of 500 slots hold lemons that fault 11x as often (an assumption here).
    base = FaultMix.llama3(multiplier=100)
    lemony = base.model_copy(update={"lemons": LemonModel(share=0.02, factor=11)})
    horizon = 3600.0 * 24 * 30
    planned = list(itertools.takewhile(lambda p: p.at < horizon, lemony.events(1, 500)))
    plain = list(itertools.takewhile(lambda p: p.at < horizon, base.events(1, 500)))
    assert [p for p in planned if not p.lemon] == plain
    extra = [p for p in planned if p.lemon]
    assert len({p.ordinal for p in extra}) == 10  # 2% of 500 slots
    # Each lemon slot gets factor - 1 = 10 times a slot's share of the base faults.
    expected = base.per_node_hour() * 10 * 10 * horizon / 3600
    assert expected * 0.85 < len(extra) < expected * 1.15
    assert [p.at for p in planned] == sorted(p.at for p in planned)


def test_a_lemon_model_is_refused_when_it_makes_no_lemons_or_slows_faults() -> None:
    with pytest.raises(ValueError, match="greater than 1"):
        LemonModel(share=0.1, factor=0.5)
    with pytest.raises(ValueError, match="greater than 0"):
        LemonModel(share=0, factor=3)


def test_faults_that_last_a_drawn_time_keep_the_plan_and_stay_in_their_range(
    tmp_path: Path,
) -> None:
    # Issue 37: fail-slows come and go (Greyhound: under a minute to nearly ten hours).
    path = tmp_path / "slow.yaml"
    path.write_text(
        "rates: {gpu_slow: 0.01, fallen_off_bus: 0.01}\n"
        "lasts: {gpu_slow: {shortest: 1m, longest: 10h}}\n"
    )
    lasting = FaultMix.load(path)
    plain = lasting.model_copy(update={"lasts": {}})
    planned = list(itertools.islice(lasting.events(3, 500), 400))
    assert [dataclasses.replace(p, lasts=None) for p in planned] == list(
        itertools.islice(plain.events(3, 500), 400)
    )
    slow = [p.lasts for p in planned if p.kind is FaultKind.GPU_SLOW]
    assert all(p.lasts is None for p in planned if p.kind is FaultKind.FALLEN_OFF_BUS)
    assert slow
    assert all(s is not None and 60 <= s <= 36_000 for s in slow)
    # Log-uniform: about half the draws below the range's geometric middle (~24.5 min).
    below = sum(1 for s in slow if s is not None and s < (60 * 36_000) ** 0.5)
    assert 0.35 < below / len(slow) < 0.65
    assert list(itertools.islice(lasting.events(3, 500), 400)) == planned  # deterministic


def test_a_duration_range_must_be_ordered(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("lasts: {gpu_slow: {shortest: 2h, longest: 1h}}\n")
    with pytest.raises(ScenarioError, match="shorter than shortest"):
        FaultMix.load(path)


def test_only_slowdowns_and_faults_with_nothing_to_fix_may_last(tmp_path: Path) -> None:
    path = tmp_path / "hard.yaml"
    path.write_text("lasts: {fallen_off_bus: {shortest: 1m, longest: 1h}}\n")
    with pytest.raises(ScenarioError, match=r"cannot end hard faults \['fallen_off_bus'\]"):
        FaultMix.load(path)
    path.write_text(
        "lasts: {network_outage: {shortest: 1m, longest: 1h}, efa_degraded: "
        "{shortest: 1m, longest: 1h}}\n"
    )
    assert set(FaultMix.load(path).lasts) == {FaultKind.NETWORK_OUTAGE, FaultKind.EFA_DEGRADED}


def test_extra_rates_add_faults_and_leave_the_base_plan_as_it_was() -> None:
    base = FaultMix.llama3(multiplier=100)
    more = base.model_copy(update={"extra_rates": {FaultKind.GPU_THROTTLED: 0.001}})
    horizon = 3600.0 * 24 * 30
    planned = list(itertools.takewhile(lambda p: p.at < horizon, more.events(1, 500)))
    plain = list(itertools.takewhile(lambda p: p.at < horizon, base.events(1, 500)))
    assert [p for p in planned if p.kind is not FaultKind.GPU_THROTTLED] == plain
    added = [p for p in planned if p.kind is FaultKind.GPU_THROTTLED]
    expected = 0.001 * 100 * 500 * horizon / 3600  # times the multiplier too
    assert expected * 0.9 < len(added) < expected * 1.1
    assert [p.at for p in planned] == sorted(p.at for p in planned)
