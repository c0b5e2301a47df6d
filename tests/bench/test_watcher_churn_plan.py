"""The watcher benchmark's churn: fresh nodes turn True, each turns back False later, at a rate."""

import pytest

from bench.watcher import CONDITION, churn_plan, node_name, run_churn
from simulator.kube_api import KubeStore
from simulator.kube_api.resources import NODES


def test_the_plan_makes_rate_times_seconds_changes_evenly_spaced() -> None:
    plan = churn_plan(rate=100, seconds=3, hold_s=1, nodes=1000)
    assert len(plan) == 300
    assert [op.at for op in plan[:3]] == [0.0, 0.01, 0.02]
    assert plan[-1].at == pytest.approx(2.99)


def test_every_node_turns_true_once_before_it_turns_false() -> None:
    plan = churn_plan(rate=100, seconds=5, hold_s=1, nodes=1000)
    seen: dict[int, list[str]] = {}
    for op in plan:
        seen.setdefault(op.index, []).append(op.status)
    assert all(statuses in (["True"], ["True", "False"]) for statuses in seen.values())
    trues = sum(op.status == "True" for op in plan)
    assert trues - sum(op.status == "False" for op in plan) == 50  # the last second's Trues


def test_once_the_first_node_turned_back_each_node_stays_true_for_the_hold_time() -> None:
    plan = churn_plan(rate=100, seconds=5, hold_s=1, nodes=1000)
    went_true = {op.index: op.at for op in plan if op.status == "True"}
    holds = [op.at - went_true[op.index] for op in plan if op.status == "False"]
    # The first 50 nodes turned True before any turned back: they hold half as long.
    assert holds[0] == pytest.approx(0.51)
    assert min(holds[50:]) == pytest.approx(1.0, abs=0.02)
    assert max(holds) == pytest.approx(1.0, abs=0.02)


def test_a_plan_that_needs_more_nodes_than_the_cluster_has_is_refused() -> None:
    with pytest.raises(ValueError, match="needs"):
        churn_plan(rate=100, seconds=60, hold_s=2, nodes=1000)


def test_the_churn_sets_the_condition_and_records_when_each_true_was_committed() -> None:
    store = KubeStore()
    for index in range(20):
        store.put_node(node_name(index))
    done = run_churn(store, churn_plan(rate=50, seconds=0.4, hold_s=0.1, nodes=20))
    assert done["changes"] == 20
    assert sorted(done["trues"]) == [node_name(i) for i in range(len(done["trues"]))]
    conditions = {
        node["metadata"]["name"]: {c["type"]: c["status"] for c in node["status"]["conditions"]}
        for node in store.peek(NODES)
    }
    store.close()
    assert conditions[node_name(0)][CONDITION] == "False"
    last = node_name(len(done["trues"]) - 1)
    assert conditions[last][CONDITION] == "True"
