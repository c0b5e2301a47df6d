"""The ground-truth recorder over the emulator's real store: boots, problems, claims, taints."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from demo.chaos.recorder import GroundTruthRecorder
from gpu_remediation.policy_loader import parse_policy
from simulator.kube_api import NODECLAIMS, NODES, KubeStore

GPU = {"nvidia.com/gpu.present": "true"}


class _Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def _recording() -> tuple[KubeStore, GroundTruthRecorder, _Clock]:
    clock = _Clock()
    store = KubeStore()
    recorder = GroundTruthRecorder(parse_policy("{}").triggers, clock=clock).attach(store)
    return store, recorder, clock


def test_each_new_boot_id_of_a_node_is_recorded_once_in_order() -> None:
    store, recorder, clock = _recording()
    store.put_node("gpu-0001", labels=GPU, boot_id="b0", provider_id="aws:///zone/i-0abc")
    clock.advance(5)
    store.set_node_ready("gpu-0001", False)  # a change that keeps the boot
    store.set_node_boot_id("gpu-0001", "b1")
    record = recorder.records()["gpu-0001"]
    assert [b.boot_id for b in record.boot_ids] == ["b0", "b1"]
    assert record.instance_id == "i-0abc"
    assert recorder.node_for_instance() == {"i-0abc": "gpu-0001"}


def test_a_trigger_condition_in_a_problem_status_is_an_episode_with_its_grace() -> None:
    store, recorder, clock = _recording()
    store.put_node("gpu-0001", labels=GPU)
    store.set_node_condition("gpu-0001", "EfaHealthProblem", "True", reason="EfaHealthCheckFailed")
    clock.advance(40)
    store.set_node_condition("gpu-0001", "EfaHealthProblem", "False", reason="EfaIsHealthy")
    store.set_node_condition("gpu-0001", "GpuHealthProblem", "True", reason="GpuHealthCheckFailed")
    (closed, still) = recorder.records()["gpu-0001"].episodes
    assert (closed.condition, closed.grace_s) == ("EfaHealthProblem", 30.0)
    assert closed.end is not None
    assert (closed.end - closed.start).total_seconds() == 40
    assert (still.condition, still.end) == ("GpuHealthProblem", None)


def test_a_deleted_node_ends_its_problems_and_keeps_its_last_cordon_and_taints() -> None:
    store, recorder, clock = _recording()
    store.put_node(
        "gpu-0001",
        labels=GPU,
        unschedulable=True,
        taints=[{"key": "gpu-remediation.io/quarantine", "effect": "NoSchedule"}],
    )
    store.set_node_ready("gpu-0001", False)
    store.put_nodeclaim("gpu-0001", node_pool="gpu", finalizers=())
    clock.advance(10)
    store.delete_object(NODECLAIMS, "gpu-0001")
    store.delete_object(NODES, "gpu-0001")
    record = recorder.records()["gpu-0001"]
    assert record.claim_deleted_at == [clock.now]
    assert record.deleted_at == clock.now
    assert record.unschedulable
    assert [t.key for t in record.taints] == ["gpu-remediation.io/quarantine"]
    (episode,) = record.episodes
    assert (episode.condition, episode.end) == ("Ready", clock.now)


def test_a_node_outside_the_watchers_selector_is_recorded_as_unwatched() -> None:
    store, recorder, _ = _recording()
    store.put_node("cpu-0001")
    assert not recorder.records()["cpu-0001"].watched


def test_a_problem_past_its_grace_and_slack_is_owed_until_the_node_goes() -> None:
    store, recorder, clock = _recording()
    store.put_node("gpu-0001", labels=GPU)
    store.put_node("gpu-0002", labels=GPU)
    store.set_node_condition("gpu-0001", "EfaHealthProblem", "True", reason="EfaHealthCheckFailed")
    clock.advance(32)
    assert recorder.owed_problems(clock.now, 3.0) == set()  # grace 30 s + 3 s not yet
    clock.advance(1)
    assert recorder.owed_problems(clock.now, 3.0) == {"gpu-0001"}
    store.delete_object(NODES, "gpu-0001")
    assert recorder.owed_problems(clock.now, 3.0) == set()
