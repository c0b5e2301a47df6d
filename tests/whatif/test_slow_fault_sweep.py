"""``--slow-fault-multiplier``: the slow faults' rate, and only theirs, scaled (issue 37)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.fleet.faults import FaultKind
from whatif.options import CompareError, compare_fleet, options_from
from whatif.sweep import parse_sweep

pytestmark = pytest.mark.unit

SLOW_MIX = Path(__file__).parents[2] / "bench" / "mixes" / "llama3-slow.yaml"


def test_the_multiplier_scales_the_slow_kinds_and_leaves_the_hard_faults_alone() -> None:
    plain, _ = compare_fleet(options_from(nodes=40, fault_mix=str(SLOW_MIX)))
    scaled, _ = compare_fleet(
        options_from(nodes=40, fault_mix=str(SLOW_MIX), slow_fault_multiplier=3)
    )
    assert plain.fault_mix is not None
    assert scaled.fault_mix is not None
    assert scaled.fault_mix.rates == plain.fault_mix.rates
    assert scaled.fault_mix.extra_rates[FaultKind.GPU_SLOW] == pytest.approx(
        3 * plain.fault_mix.extra_rates[FaultKind.GPU_SLOW]
    )
    assert set(scaled.fault_mix.extra_rates) == set(plain.fault_mix.extra_rates)


def test_a_mix_without_slow_faults_or_a_negative_multiplier_is_refused() -> None:
    with pytest.raises(CompareError, match="--slow-fault-multiplier: the fault mix has no slow"):
        compare_fleet(options_from(nodes=40, slow_fault_multiplier=2))
    with pytest.raises(CompareError, match="--slow-fault-multiplier"):
        options_from(nodes=40, fault_mix=str(SLOW_MIX), slow_fault_multiplier=-1)


def test_the_slow_fault_multiplier_is_a_sweep_axis() -> None:
    sweep = parse_sweep(
        "slow-fault-multiplier=0,1,4", options_from(nodes=40, fault_mix=str(SLOW_MIX))
    )
    assert [o.slow_fault_multiplier for o in sweep.options] == [0.0, 1.0, 4.0]
    with pytest.raises(CompareError, match="slow-fault-multiplier"):
        parse_sweep("slow-fault-multiplier=1,2", options_from(nodes=40))
