"""The chaos soak's summary rows: violations against a target of none, faults by kind."""

from typing import Any

from bench.chaos_soak import summary_rows


def _result(**overrides: Any) -> dict[str, Any]:
    result: dict[str, Any] = {
        "nodes": 500,
        "simulated_hours": 24.0,
        "faults_injected": {"worker_kill": 24, "receiver_kill": 24},
        "faults_total": 48,
        "incidents": 61,
        "violations": [],
        "wall_s": 812.4,
        "peak_rss_mib": 2100,
    }
    return {**result, **overrides}


def test_the_rows_give_violations_against_none_and_every_kind_with_its_count() -> None:
    (verdict, figures) = summary_rows(_result(violations=["incidents_lost: gpu-0001: ..."]))

    assert verdict[0] == "chaos_soak"
    assert "48 faults (worker_kill 24, receiver_kill 24)" in verdict[1]
    assert (verdict[2], verdict[3]) == ("1", "0")
    assert figures[2] == "61 / 812 s / 2100 MiB"
