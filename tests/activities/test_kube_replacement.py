"""NodeClaims, waiting for replacement capacity, and the breaker's pool count."""

import asyncio
import threading
from datetime import UTC, datetime, timedelta

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.kubernetes import HELD_ANNOTATION, KubernetesActivities
from gpu_remediation import contracts as c
from simulator.kube_api import NODECLAIMS, NODES, KubeApiServer, KubeStore

ENV = ActivityEnvironment()
PROVIDER = "aws:///us-west-2a/i-0123456789abcdef0"


def delete_claim(provider_id: str = PROVIDER) -> c.DeleteNodeClaimInput:
    return c.DeleteNodeClaimInput(node="gpu-1", incident_id="i", provider_id=provider_id)


async def test_the_node_claim_is_found_by_provider_id_and_deleted(
    store: KubeStore, kube_activities: KubernetesActivities
) -> None:
    store.put_nodeclaim("h100-abcde", node_pool="h100", provider_id=PROVIDER, node_name="gpu-1")
    store.put_nodeclaim(
        "h100-other", node_pool="h100", provider_id="aws:///us-west-2a/i-0fffffffffffffff0"
    )
    result = await ENV.run(kube_activities.delete_node_claim, delete_claim())
    assert result.node_claim == "h100-abcde"
    # Karpenter's finalizer keeps it until the instance is gone.
    assert store.get(NODECLAIMS, "h100-abcde")["metadata"].get("deletionTimestamp")
    assert not store.get(NODECLAIMS, "h100-other")["metadata"].get("deletionTimestamp")


async def test_a_node_claim_already_deleted_is_done(
    store: KubeStore, kube_activities: KubernetesActivities
) -> None:
    result = await ENV.run(kube_activities.delete_node_claim, delete_claim())
    assert result == c.DeleteNodeClaimResult(node_claim=None, already_gone=True)


async def test_waiting_ends_when_the_old_node_is_gone_and_new_capacity_is_ready(
    store: KubeStore, kube_activities: KubernetesActivities
) -> None:
    store.put_node("gpu-1", node_pool="h100")
    store.put_node("gpu-old-peer", node_pool="h100")
    since = datetime.now(UTC) - timedelta(milliseconds=1)

    def karpenter() -> None:
        store.delete(NODES, "gpu-1")
        store.put_node("gpu-9", node_pool="h100")

    threading.Timer(0.2, karpenter).start()
    result = await ENV.run(
        kube_activities.wait_for_replacement,
        c.WaitForReplacementInput(
            node="gpu-1", incident_id="i", node_pool="h100", timeout_s=5, since=since
        ),
    )
    assert result == c.ReplacementResult(old_node_gone=True, new_node="gpu-9")


async def test_a_node_that_turns_ready_later_is_found_by_watching_not_by_listing_again(
    kube: KubeApiServer, store: KubeStore, kube_activities: KubernetesActivities
) -> None:
    store.put_node("gpu-1", node_pool="h100")
    since = datetime.now(UTC) - timedelta(milliseconds=1)
    threading.Timer(0.1, lambda: store.delete(NODES, "gpu-1")).start()
    # Karpenter's new node registers NotReady, then its kubelet reports Ready.
    threading.Timer(0.3, lambda: store.put_node("gpu-9", node_pool="h100", ready=False)).start()
    threading.Timer(0.6, lambda: store.set_node_ready("gpu-9")).start()

    result = await ENV.run(
        kube_activities.wait_for_replacement,
        c.WaitForReplacementInput(
            node="gpu-1", incident_id="i", node_pool="h100", timeout_s=5, since=since
        ),
    )

    assert result == c.ReplacementResult(old_node_gone=True, new_node="gpu-9")
    pool = [r for r in kube.requests() if r.method == "GET" and r.path == "/api/v1/nodes"]
    lists = [r for r in pool if "watch=" not in r.query]
    assert len(lists) == 1, [r.query for r in pool]  # the pool listed once, then watched
    assert any("watch=" in r.query for r in pool)


async def test_waiting_past_the_timeout_says_what_is_missing(
    store: KubeStore, kube_activities: KubernetesActivities
) -> None:
    store.put_node("gpu-1", node_pool="h100")
    with pytest.raises(ApplicationError, match="old node gone: False") as err:
        await ENV.run(
            kube_activities.wait_for_replacement,
            c.WaitForReplacementInput(
                node="gpu-1",
                incident_id="i",
                node_pool="h100",
                timeout_s=0.2,
                since=datetime.now(UTC),
            ),
        )
    assert err.value.type == "ReplacementIncomplete"


def wait_input(node: str, since: datetime, timeout_s: float = 5) -> c.WaitForReplacementInput:
    return c.WaitForReplacementInput(
        node=node, incident_id=f"i-{node}", node_pool="h100", timeout_s=timeout_s, since=since
    )


async def test_concurrent_replacements_each_claim_a_different_new_node(
    store: KubeStore, kube_activities: KubernetesActivities
) -> None:
    since = datetime.now(UTC) - timedelta(milliseconds=1)
    store.put_node("gpu-new-a", node_pool="h100")
    store.put_node("gpu-new-b", node_pool="h100")

    first, second = await asyncio.gather(
        ENV.run(kube_activities.wait_for_replacement, wait_input("gpu-1", since)),
        ENV.run(kube_activities.wait_for_replacement, wait_input("gpu-2", since)),
    )

    assert {first.new_node, second.new_node} == {"gpu-new-a", "gpu-new-b"}
    for result, old in ((first, "gpu-1"), (second, "gpu-2")):
        assert result.new_node is not None
        node = store.get(NODES, result.new_node)
        assert node["metadata"]["annotations"]["gpu-remediation.io/replaces"] == old


async def test_a_node_claimed_by_another_replacement_is_not_taken(
    store: KubeStore, kube_activities: KubernetesActivities
) -> None:
    since = datetime.now(UTC) - timedelta(milliseconds=1)
    store.put_node("gpu-new-a", node_pool="h100")
    await ENV.run(kube_activities.wait_for_replacement, wait_input("gpu-1", since))

    with pytest.raises(ApplicationError, match=r"gpu-new-a \(replaces gpu-1\)"):
        await ENV.run(
            kube_activities.wait_for_replacement, wait_input("gpu-2", since, timeout_s=0.2)
        )


async def test_a_retried_wait_returns_the_node_it_claimed_before(
    store: KubeStore, kube_activities: KubernetesActivities
) -> None:
    since = datetime.now(UTC) - timedelta(milliseconds=1)
    store.put_node("gpu-new-a", node_pool="h100")
    first = await ENV.run(kube_activities.wait_for_replacement, wait_input("gpu-1", since))
    store.put_node("gpu-new-0", node_pool="h100")  # sorts first by name, same second

    again = await ENV.run(kube_activities.wait_for_replacement, wait_input("gpu-1", since))

    assert again == first


async def test_the_breaker_counts_unready_quarantined_and_npd_flagged_nodes(
    store: KubeStore, kube_activities: KubernetesActivities
) -> None:
    store.put_node("a", node_pool="h100")
    store.put_node("b", node_pool="h100", ready=False)
    store.put_node(
        "c", node_pool="h100", taints=[{"key": c.QUARANTINE_TAINT_KEY, "effect": "NoSchedule"}]
    )
    store.put_node(
        "d", node_pool="h100", conditions=[{"type": "GpuHealthProblem", "status": "True"}]
    )
    store.put_node(
        "e", node_pool="h100", conditions=[{"type": "AcceleratedHardwareReady", "status": "False"}]
    )
    store.put_node("x", node_pool="other", ready=False)
    pool = await ENV.run(kube_activities.check_breaker, c.CheckBreakerInput(node_pool="h100"))
    assert (pool.total, pool.unhealthy) == (5, 4)
    assert pool.unhealthy_nodes == ["b", "c", "d", "e"]


async def test_a_quarantined_node_held_by_the_breaker_counts_only_for_its_own_signals(
    store: KubeStore, kube_activities: KubernetesActivities
) -> None:
    store.put_node("a", node_pool="h100")
    store.put_node("held-ok", node_pool="h100")
    store.put_node("held-sick", node_pool="h100", ready=False)
    for name in ("held-ok", "held-sick"):
        node = {"node": name, "incident_id": "i"}
        await ENV.run(kube_activities.quarantine_node, c.QuarantineNodeInput(**node))
        await ENV.run(kube_activities.quarantine_node, c.QuarantineNodeInput(**node, held=True))
    pool = await ENV.run(kube_activities.check_breaker, c.CheckBreakerInput(node_pool="h100"))
    assert pool.unhealthy_nodes == ["held-sick"]
    # Unmarked (the hold is over: the ladder acts on it), its quarantine counts again.
    node = {"node": "held-ok", "incident_id": "i"}
    await ENV.run(kube_activities.quarantine_node, c.QuarantineNodeInput(**node, held=False))
    pool = await ENV.run(kube_activities.check_breaker, c.CheckBreakerInput(node_pool="h100"))
    assert pool.unhealthy_nodes == ["held-ok", "held-sick"]
    # Released, the mark goes with the quarantine.
    await ENV.run(kube_activities.release_node, c.ReleaseNodeInput(**node, uncordon=True))
    annotations = store.get(NODES, "held-ok")["metadata"].get("annotations") or {}
    assert HELD_ANNOTATION not in annotations


async def test_a_node_in_no_pool_is_judged_against_the_gpu_nodes_not_the_cluster(
    store: KubeStore, kube_activities: KubernetesActivities
) -> None:
    gpu = {"nvidia.com/gpu.present": "true"}
    for i in range(4):
        store.put_node(f"gpu-{i}", labels=gpu, ready=i >= 2)
    for i in range(10):
        store.put_node(f"cpu-{i}")
    pool = await ENV.run(
        kube_activities.check_breaker,
        c.CheckBreakerInput(node_pool=None, node_selector="nvidia.com/gpu.present=true"),
    )
    assert (pool.total, pool.unhealthy) == (4, 2)
