"""The time-factor check: same faults and outcomes within noise, or it says what differs."""

from __future__ import annotations

from typing import Any

import pytest

from whatif.factor_check import judge


def row(digest: str = "abc", **over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "availability": 0.9990,
        "mttr_p50_s": 1800.0,
        "nodes_replaced": 10,
        "reboots": 5,
        "resets": 3,
        "escalations": 1,
        "timeline": {"digest": digest},
    }
    return {**base, **over}


def test_equal_outcomes_at_two_factors_pass() -> None:
    check = judge((600, 1200), {"graded": row()}, {"graded": row()})
    assert check.same_faults
    assert check.passed


def test_small_differences_within_the_noise_bounds_pass() -> None:
    other = row(availability=0.9975, nodes_replaced=12, reboots=7, mttr_p50_s=3600.0)
    assert judge((600, 1200), {"graded": row()}, {"graded": other}).passed


def test_a_different_fault_timeline_fails_even_with_equal_outcomes() -> None:
    check = judge((600, 1200), {"graded": row("abc")}, {"graded": row("def")})
    assert not check.same_faults
    assert not check.passed


def test_outcomes_beyond_the_noise_bounds_are_named() -> None:
    other = row(availability=0.9950, nodes_replaced=20)
    check = judge((600, 1200), {"graded": row()}, {"graded": other})
    assert not check.passed
    assert check.policies[0].disagreements == ["availability", "nodes_replaced"]


def test_runs_of_different_policies_cannot_be_judged() -> None:
    with pytest.raises(ValueError, match="policies differ"):
        judge((600, 1200), {"graded": row()}, {"replace-always": row()})


def test_mttr_split_separates_real_latency_from_simulated_work() -> None:
    from whatif.factor_check import PolicyDelta

    # 600 s of simulated work plus 0.5 real s of latency at factors 1000 and 4000.
    delta = PolicyDelta("graded", {"mttr_p50_s": (600 + 500.0, 600 + 2000.0)}, [])
    split = delta.mttr_split((1000.0, 4000.0))
    assert split == {"latency_real_s": 0.5, "work_sim_s": 600.0, "at_1x_s": 600.5}
    assert PolicyDelta("x", {"mttr_p50_s": (0.0, 5.0)}, []).mttr_split((1, 2)) is None
