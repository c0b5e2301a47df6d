"""The simulator benchmark's targets and summary: 2 GiB above 2,000 nodes, fan-out spans."""

from typing import Any

from bench.simulator import summary_rows, target_mb


def test_the_rss_target_is_1_gib_up_to_2000_nodes_and_2_gib_above() -> None:
    assert target_mb(2000) == 1024
    assert target_mb(10_000) == 2048


def result(node_windows: list[int], pod_windows: list[int], lost: int) -> dict[str, Any]:
    fan_out = [{"name": f"nodes-{i}", "committed": n} for i, n in enumerate(node_windows)] + [
        {"name": f"pods-{i}", "committed": n} for i, n in enumerate(pod_windows)
    ]
    return {
        "name": "simulator_10k",
        "nodes": 10_000,
        "pods_listed": 9000,
        "rss_loaded_mb": 900.0,
        "target_mb": 2048.0,
        "list_nodes_median_s": 1.2,
        "list_nodes_typed_median_s": 9.5,
        "list_pods_median_s": 0.8,
        "target_list_s": 3.0,
        "fan_out": fan_out,
        "fan_out_lost": lost,
        "fan_out_in_order": True,
    }


def test_the_rows_state_each_target_and_the_events_each_watch_was_owed() -> None:
    rows = summary_rows(result([120, 120], [300, 340], lost=0))
    assert rows[0] == (
        "simulator_10k",
        "RSS, 10000 nodes listed and watched",
        "900 MiB",
        "<= 2048 MiB",
    )
    assert rows[1][2:] == ("1.20 s / 9.50 s", "< 3 s (JSON)")
    assert rows[3] == (
        "simulator_10k",
        "4 watches, 120 node + 300-340 pod events: lost/dup/extra",
        "0 (in order: True)",
        "0",
    )
