"""The alert storm's verdict: the ratio against the run's target, one run per node, deliveries."""

from collections import Counter

from bench.alert_storm import PhaseResult, _result


def phase(side: str, workflows_per_s: float, nodes: int = 100) -> PhaseResult:
    seconds = nodes / workflows_per_s
    return PhaseResult(
        side=side,
        round=1,
        workflows=nodes,
        alerts=nodes * (10 if side == "receiver" else 1),
        seconds=seconds,
        workflows_per_s=workflows_per_s,
        alerts_per_s=nodes / seconds,
        server_cpu_s=1.0,
        python_cpu_s=1.0,
        other_cpu_s=0.0,
    )


def verdict(receiver_rate: float, outcomes: Counter[str], runs: Counter[str]) -> dict[str, object]:
    phases = [phase("bare", 100.0), phase("direct", 95.0), phase("receiver", receiver_rate)]
    return _result(
        phases,
        outcomes,
        runs,
        quick=True,
        count=100,
        copies=10,
        batch=100,
        connections=8,
        in_flight=64,
        rounds=1,
        target_ratio=0.9,
        name="alert_storm_10k",
    )


ONE_RUN_EACH = Counter({f"gpu-{i}": 1 for i in range(100)})


def test_a_storm_at_the_target_ratio_with_one_run_per_node_passes() -> None:
    result = verdict(90.0, Counter(delivered=100, duplicate=900), ONE_RUN_EACH)
    assert (result["name"], result["ratio"], result["target_ratio"]) == (
        "alert_storm_10k",
        0.9,
        0.9,
    )
    assert result["ok"]


def test_a_storm_below_the_target_ratio_misses_it() -> None:
    assert not verdict(85.0, Counter(delivered=100, duplicate=900), ONE_RUN_EACH)["ok"]


def test_a_node_with_two_runs_is_a_duplicate_incident_and_fails_the_storm() -> None:
    runs = ONE_RUN_EACH + Counter({"gpu-7": 1})
    result = verdict(95.0, Counter(delivered=100, duplicate=900), runs)
    assert result["workflows_with_more_than_one_run"] == 1
    assert not result["ok"]


def test_retried_posts_may_lose_delivered_counts_but_never_add_any() -> None:
    retried = Counter(delivered=96, duplicate=904, retried_posts=2)
    assert verdict(95.0, retried, ONE_RUN_EACH)["ok"]
    assert not verdict(95.0, Counter(delivered=96, duplicate=904), ONE_RUN_EACH)["ok"]
    assert not verdict(95.0, Counter(delivered=101, retried_posts=1), ONE_RUN_EACH)["ok"]
