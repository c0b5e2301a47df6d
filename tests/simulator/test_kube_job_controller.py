"""The emulator's job controller applies a Job's podFailurePolicy, as Kubernetes does.

The point for gpu-remediation: an eviction (DisruptionTarget) restarts the pod of a
Job that ignores disruptions without spending its backoffLimit, while a Job
without that rule pays for it. Jobs are created and pods evicted over HTTP with
the official client.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from simulator.kube_api import JOBS, PODS, KubeStore
from simulator.kube_api.job_controller import JobController, pod_failure_action
from tests.conftest import assert_eventually

NS = "ml"
IGNORE_DISRUPTIONS = {
    "rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
        {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}},
    ]
}


@pytest.fixture
def controller(kube_store: KubeStore) -> Iterator[JobController]:
    ctl = JobController(kube_store).start()
    yield ctl
    ctl.stop()


@pytest.fixture
def batch(api_client: Any) -> Any:
    return client.BatchV1Api(api_client)


def create_job(batch: Any, name: str, *, backoff_limit: int, policy: Any = None) -> None:
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "backoffLimit": backoff_limit,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeName": "gpu-1",
                    "restartPolicy": "Never",
                    "containers": [{"name": "train", "image": "trainer:1"}],
                },
            },
            **({"podFailurePolicy": policy} if policy else {}),
        },
    }
    batch.create_namespaced_job(NS, body)


async def eventually(condition: Callable[[], bool]) -> None:
    async def probe() -> bool:
        return condition()

    await assert_eventually(probe, bool)


def pods_of(store: KubeStore, job: str) -> list[dict[str, Any]]:
    items, _ = store.list_objects(PODS, NS)
    return [p for p in items if p["metadata"]["labels"].get("batch.kubernetes.io/job-name") == job]


async def one_running_pod(store: KubeStore, job: str) -> dict[str, Any]:
    await eventually(lambda: len(pods_of(store, job)) == 1)
    [pod] = pods_of(store, job)
    store.set_container_running(NS, pod["metadata"]["name"])
    return pod


def evict(core: Any, name: str) -> None:
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=NS))
    core.create_namespaced_pod_eviction(name, NS, body)


def job_status(batch: Any, name: str) -> Any:
    return batch.read_namespaced_job_status(name, NS).status


def condition_types(status: Any) -> set[str]:
    return {c.type for c in status.conditions or [] if c.status == "True"}


async def test_an_evicted_pod_of_a_job_that_ignores_disruptions_restarts_without_spending_a_retry(
    kube_store: KubeStore, controller: JobController, batch: Any, core: Any
) -> None:
    create_job(batch, "llm", backoff_limit=0, policy=IGNORE_DISRUPTIONS)
    first = await one_running_pod(kube_store, "llm")
    evict(core, first["metadata"]["name"])

    def replaced() -> bool:
        pods = pods_of(kube_store, "llm")
        return len(pods) == 1 and pods[0]["metadata"]["uid"] != first["metadata"]["uid"]

    await eventually(replaced)
    await eventually(controller.idle)
    status = job_status(batch, "llm")
    assert not status.failed
    assert "Failed" not in condition_types(status)


async def test_without_the_rule_an_eviction_counts_and_a_zero_backoff_limit_fails_the_job(
    kube_store: KubeStore, controller: JobController, batch: Any, core: Any
) -> None:
    create_job(batch, "eval", backoff_limit=0)
    pod = await one_running_pod(kube_store, "eval")
    evict(core, pod["metadata"]["name"])
    await eventually(lambda: "Failed" in condition_types(job_status(batch, "eval")))
    status = job_status(batch, "eval")
    assert status.failed == 1
    assert {c.reason for c in status.conditions} == {"BackoffLimitExceeded"}
    assert pods_of(kube_store, "eval") == []


async def test_a_counted_failure_within_the_backoff_limit_gets_a_new_pod(
    kube_store: KubeStore, controller: JobController, batch: Any
) -> None:
    create_job(batch, "sweep", backoff_limit=2, policy=IGNORE_DISRUPTIONS)
    pod = await one_running_pod(kube_store, "sweep")
    kube_store.terminate_container(NS, pod["metadata"]["name"], 1, log="oom")
    await eventually(lambda: job_status(batch, "sweep").failed == 1)
    await eventually(lambda: len(pods_of(kube_store, "sweep")) == 2)
    assert "Failed" not in condition_types(job_status(batch, "sweep"))


async def test_an_exit_code_matching_a_fail_job_rule_fails_the_job_at_once(
    kube_store: KubeStore, controller: JobController, batch: Any
) -> None:
    create_job(batch, "bad", backoff_limit=5, policy=IGNORE_DISRUPTIONS)
    pod = await one_running_pod(kube_store, "bad")
    kube_store.terminate_container(NS, pod["metadata"]["name"], 42, log="bad config")
    await eventually(lambda: "Failed" in condition_types(job_status(batch, "bad")))
    assert {c.reason for c in job_status(batch, "bad").conditions} == {"PodFailurePolicy"}


async def test_the_project_s_own_host_command_jobs_are_left_to_their_kubelet(
    kube_store: KubeStore, controller: JobController
) -> None:
    kube_store.create_object(
        JOBS,
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "gpu-reset-1",
                "namespace": NS,
                "labels": {"app.kubernetes.io/managed-by": "gpu-remediation"},
            },
            "spec": {
                "template": {
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}
                }
            },
        },
        NS,
    )
    await eventually(controller.idle)
    assert pods_of(kube_store, "gpu-reset-1") == []


def test_rules_apply_in_order_and_only_non_zero_exit_codes_match() -> None:
    disrupted_and_42 = {
        "status": {
            "conditions": [{"type": "DisruptionTarget", "status": "True"}],
            "containerStatuses": [{"name": "train", "state": {"terminated": {"exitCode": 42}}}],
        }
    }
    assert pod_failure_action(IGNORE_DISRUPTIONS, disrupted_and_42) == "Ignore"
    exited_0 = {"status": {"containerStatuses": [{"state": {"terminated": {"exitCode": 0}}}]}}
    not_in = {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [1]}}]}
    assert pod_failure_action(not_in, exited_0) == "Count"
    assert pod_failure_action(None, disrupted_and_42) == "Count"
