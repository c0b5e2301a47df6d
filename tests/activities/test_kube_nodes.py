"""The breaker's fast node listing: every page read, only the needed fields decoded."""

from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from activities.kube_nodes import list_node_summaries
from simulator.kube_api import KubeStore


async def test_every_page_of_a_large_pool_is_listed(store: KubeStore, api: Any) -> None:
    for i in range(7):
        store.put_node(f"n{i}", node_pool="h100", ready=i % 2 == 0)
    store.put_node("other", node_pool="a100")
    nodes = await list_node_summaries(k8s.CoreV1Api(api), "karpenter.sh/nodepool=h100", page_size=2)
    assert sorted(n.metadata.name for n in nodes) == [f"n{i}" for i in range(7)]
    ready = {
        n.metadata.name
        for n in nodes
        if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])  # type: ignore[union-attr]
    }
    assert ready == {"n0", "n2", "n4", "n6"}


async def test_an_api_error_is_raised_not_read_as_an_empty_pool(api: Any) -> None:
    with pytest.raises(ApiException):
        await list_node_summaries(k8s.CoreV1Api(api), "not a selector ===")
