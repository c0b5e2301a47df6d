"""Label and field selectors on lists (pods across namespaces, nodes)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from simulator.kube_api import KubeStore
from simulator.kube_api.selectors import parse_label_selector


@pytest.fixture
def pods(kube_store: KubeStore) -> None:
    kube_store.put_pod("a", "p1", node_name="n1", labels={"app": "train", "tier": "gpu"})
    kube_store.put_pod("a", "p2", node_name="n2", labels={"app": "serve"}, phase="Pending")
    kube_store.put_pod("b", "p3", node_name="n1", labels={"app": "train"})
    kube_store.put_pod("b", "p4", labels={"app": "batch", "tier": "cpu"}, phase="Pending")


def names(listing: Any) -> list[str]:
    return [p.metadata.name for p in listing.items]


@pytest.mark.usefixtures("pods")
@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=train", ["p1", "p3"]),
        ("app==train", ["p1", "p3"]),
        ("app!=train", ["p2", "p4"]),
        ("app in (serve, batch)", ["p2", "p4"]),
        ("app notin (train,serve)", ["p4"]),
        ("tier", ["p1", "p4"]),
        ("!tier", ["p2", "p3"]),
        ("app=train,tier=gpu", ["p1"]),
        ("tier!=gpu", ["p2", "p3", "p4"]),
    ],
)
def test_label_selectors(core: Any, selector: str, expected: list[str]) -> None:
    assert names(core.list_pod_for_all_namespaces(label_selector=selector)) == expected


@pytest.mark.usefixtures("pods")
def test_field_selectors(core: Any) -> None:
    assert names(core.list_pod_for_all_namespaces(field_selector="spec.nodeName=n1")) == [
        "p1",
        "p3",
    ]
    assert names(core.list_pod_for_all_namespaces(field_selector="spec.nodeName=")) == ["p4"]
    assert names(core.list_namespaced_pod("a", field_selector="status.phase=Pending")) == ["p2"]
    assert names(
        core.list_pod_for_all_namespaces(field_selector="spec.nodeName=n1,metadata.name!=p1")
    ) == ["p3"]
    assert names(core.list_namespaced_pod("b", field_selector="metadata.name=p4")) == ["p4"]


@pytest.mark.usefixtures("pods")
def test_unsupported_field_or_bad_selector_is_400(core: Any) -> None:
    with pytest.raises(ApiException) as err:
        core.list_pod_for_all_namespaces(field_selector="spec.foo=bar")
    assert err.value.status == 400
    assert "field label not supported: spec.foo" in err.value.body
    with pytest.raises(ApiException) as err:
        core.list_pod_for_all_namespaces(label_selector="app in (a")
    assert err.value.status == 400


def test_node_selectors(core: Any, kube_store: KubeStore) -> None:
    kube_store.put_node("g1", node_pool="gpu")
    kube_store.put_node("g2", node_pool="gpu", unschedulable=True)
    kube_store.put_node("c1", node_pool="cpu")
    pool = core.list_node(label_selector="karpenter.sh/nodepool=gpu")
    assert names(pool) == ["g1", "g2"]
    assert names(core.list_node(field_selector="metadata.name=c1")) == ["c1"]
    assert names(core.list_node(field_selector="spec.unschedulable=true")) == ["g2"]


def test_pagination(core: Any, kube_store: KubeStore) -> None:
    for i in range(5):
        kube_store.put_node(f"n{i}")
    first = core.list_node(limit=2)
    assert names(first) == ["n0", "n1"]
    assert first.metadata.remaining_item_count == 3
    second = core.list_node(limit=2, _continue=first.metadata._continue)
    assert names(second) == ["n2", "n3"]
    third = core.list_node(limit=2, _continue=second.metadata._continue)
    assert names(third) == ["n4"]
    assert third.metadata._continue is None


def test_empty_selector_value_and_whitespace() -> None:
    selector = parse_label_selector(" a = , b ")
    assert selector.matches({"a": "", "b": "x"})
    assert not selector.matches({"a": "x", "b": "x"})
