"""deploy/'s NetworkPolicies: who reaches the services, what they reach, who reaches Temporal.

The policies are read as a CNI applies them (a pod selected by a policy admits
only what one of its rules lists: peers and ports); the peers below stand for
Alertmanager, Prometheus, a tenant's pod, the node agent and the services.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.manifests import built, deployments, find, generated_config_maps
from tests.deploy.support import DEPLOY, yaml_documents

Labels = dict[str, str]
SERVICES = ("gpu-remediation-worker", "gpu-remediation-receiver", "gpu-remediation-watcher")
POLICIES = [d for d in built() if d["kind"] == "NetworkPolicy"]
[TEMPORAL_POLICY] = yaml_documents(DEPLOY / "temporal" / "network-policy.yaml")

ALERTMANAGER = (
    {"kubernetes.io/metadata.name": "monitoring"},
    {"app.kubernetes.io/name": "alertmanager"},
)
PROMETHEUS = (
    {"kubernetes.io/metadata.name": "monitoring"},
    {"app.kubernetes.io/name": "prometheus"},
)
TENANT = ({"kubernetes.io/metadata.name": "team-a"}, {"app": "trainer"})
MONITORING_OTHER = (
    {"kubernetes.io/metadata.name": "monitoring"},
    {"app.kubernetes.io/name": "grafana"},
)


def selects(selector: dict[str, Any], labels: Labels) -> bool:
    """A LabelSelector (matchLabels and matchExpressions In/NotIn/Exists) against labels."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values", [])
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and labels.get(key) in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
    return True


def peer_matches(peer: dict[str, Any], policy_ns: str, ns_labels: Labels, pod: Labels) -> bool:
    if "ipBlock" in peer:
        return False  # the peers here are pods
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], ns_labels):
            return False
    elif ns_labels.get("kubernetes.io/metadata.name") != policy_ns:
        return False
    return selects(peer.get("podSelector") or {}, pod)


def ingress_allowed(policy: dict[str, Any], source: tuple[Labels, Labels], port: int) -> bool:
    ns = policy["metadata"]["namespace"]
    return any(
        any(peer_matches(p, ns, *source) for p in rule.get("from", []))
        and any(entry["port"] == port for entry in rule.get("ports", []))
        for rule in policy["spec"].get("ingress", [])
    )


def pod_labels(name: str) -> Labels:
    labels: Labels = find(deployments(), "Deployment", name)["spec"]["template"]["metadata"][
        "labels"
    ]
    return labels


def policy_for(name: str) -> dict[str, Any]:
    [policy] = [p for p in POLICIES if selects(p["spec"]["podSelector"], pod_labels(name))]
    return policy


def container_ports(name: str) -> dict[str, int]:
    [container] = find(deployments(), "Deployment", name)["spec"]["template"]["spec"]["containers"]
    return {p["name"]: p["containerPort"] for p in container["ports"]}


def egress_ports(policy: dict[str, Any]) -> set[tuple[str, int]]:
    return {
        (p.get("protocol", "TCP"), p["port"])
        for rule in policy["spec"]["egress"]
        for p in rule.get("ports", [])
    }


def temporal_namespace_and_port() -> tuple[str, int]:
    settings = find(generated_config_maps(), "ConfigMap", "gpu-remediation-settings")["data"]
    host, _, port = settings["TEMPORAL_ADDRESS"].rpartition(":")
    return host.split(".")[1], int(port)


@pytest.mark.parametrize("service", SERVICES)
def test_each_service_is_isolated_both_ways_by_its_own_policy(service: str) -> None:
    policy = policy_for(service)
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    assert (
        policy["metadata"]["namespace"]
        == find(deployments(), "Deployment", service)["metadata"]["namespace"]
    )


def test_the_receiver_is_reached_only_by_alertmanager_and_prometheus_on_its_port() -> None:
    policy = policy_for("gpu-remediation-receiver")
    port = container_ports("gpu-remediation-receiver")["http"]
    assert ingress_allowed(policy, ALERTMANAGER, port)
    assert ingress_allowed(policy, PROMETHEUS, port)
    for other in (TENANT, MONITORING_OTHER):
        assert not ingress_allowed(policy, other, port)
    assert not ingress_allowed(policy, ALERTMANAGER, port + 1)
    [rule] = policy["spec"]["ingress"]
    assert [p["port"] for p in rule["ports"]] == [port]


def test_the_receiver_reaches_only_dns_and_temporal() -> None:
    policy = policy_for("gpu-remediation-receiver")
    namespace, port = temporal_namespace_and_port()
    assert egress_ports(policy) == {("UDP", 53), ("TCP", 53), ("TCP", port)}
    assert not any("ipBlock" in peer for r in policy["spec"]["egress"] for peer in r["to"])
    [temporal_rule] = [
        r for r in policy["spec"]["egress"] if any(p["port"] == port for p in r["ports"])
    ]
    [peer] = temporal_rule["to"]
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": namespace}


@pytest.mark.parametrize(
    ("service", "metrics_port"),
    [("gpu-remediation-worker", "metrics"), ("gpu-remediation-watcher", "metrics")],
)
def test_worker_and_watcher_reach_dns_temporal_and_https_and_only_prometheus_reaches_them(
    service: str, metrics_port: str
) -> None:
    policy = policy_for(service)
    namespace, port = temporal_namespace_and_port()
    assert egress_ports(policy) == {("UDP", 53), ("TCP", 53), ("TCP", port), ("TCP", 443)}
    [temporal_rule] = [
        r for r in policy["spec"]["egress"] if any(p["port"] == port for p in r["ports"])
    ]
    [peer] = temporal_rule["to"]
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": namespace}
    metrics = container_ports(service)[metrics_port]
    assert ingress_allowed(policy, PROMETHEUS, metrics)
    assert not ingress_allowed(policy, TENANT, metrics)
    assert not ingress_allowed(policy, ALERTMANAGER, metrics)


def test_only_the_services_and_temporals_own_pods_reach_the_frontend() -> None:
    namespace, port = temporal_namespace_and_port()
    assert TEMPORAL_POLICY["metadata"]["namespace"] == namespace
    assert TEMPORAL_POLICY["spec"]["policyTypes"] == ["Ingress"]
    services_ns = {"kubernetes.io/metadata.name": "gpu-remediation"}
    for service in SERVICES:
        assert ingress_allowed(TEMPORAL_POLICY, (services_ns, pod_labels(service)), port)
    assert ingress_allowed(
        TEMPORAL_POLICY,
        ({"kubernetes.io/metadata.name": namespace}, {"app.kubernetes.io/component": "web"}),
        port,
    )
    agent = find(built(), "DaemonSet", "gpu-health-agent")
    agent_ns = {"kubernetes.io/metadata.name": agent["metadata"]["namespace"]}
    for outsider in (
        TENANT,
        PROMETHEUS,
        (agent_ns, agent["spec"]["template"]["metadata"]["labels"]),
        (services_ns, {"app.kubernetes.io/part-of": "gpu-remediation"}),
    ):
        assert not ingress_allowed(TEMPORAL_POLICY, outsider, port), outsider
