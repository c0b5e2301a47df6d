"""Job discovery and the checkpoint request, over HTTP against the Kubernetes API emulator."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client
from temporalio.testing import ActivityEnvironment

from activities.kube_workloads import WorkloadActivities
from gpu_remediation import job_contracts as j
from gpu_remediation.jobs import (
    INCIDENT_ANNOTATION,
    OPT_IN_ANNOTATION,
    OPT_IN_VALUE,
    REQUEST_ANNOTATION,
    CheckpointRequest,
)
from gpu_remediation.models import Urgency
from gpu_remediation.policy import DEFAULT_JOB_LABEL_KEYS
from gpu_remediation.settings import Settings
from simulator.kube_api import PODS, KubeStore

ENV = ActivityEnvironment()
KEYS = list(DEFAULT_JOB_LABEL_KEYS)
JOBSET = "jobset.sigs.k8s.io/jobset-name"
INCIDENT = "gpu-remediation/default/gpu-1/run-a"
NODE = {"node": "gpu-1", "incident_id": "gpu-remediation/default/gpu-1"}


@pytest.fixture
def workloads(api: Any, settings: Settings) -> WorkloadActivities:
    return WorkloadActivities(client.CoreV1Api(api), settings)


def gang(store: KubeStore, name: str, nodes: list[str], *, opted_in: bool = True) -> None:
    """A JobSet with one 8-GPU pod per node."""
    for i, node in enumerate(nodes):
        store.put_pod(
            "ml",
            f"{name}-{i}",
            node_name=node,
            gpus=8,
            labels={JOBSET: name},
            annotations={OPT_IN_ANNOTATION: OPT_IN_VALUE} if opted_in else None,
        )


def annotations(store: KubeStore, name: str) -> dict[str, str]:
    return dict(store.get(PODS, name, "ml")["metadata"].get("annotations") or {})


async def find(workloads: WorkloadActivities) -> j.NodeJobs:
    return await ENV.run(workloads.find_node_jobs, j.FindNodeJobsInput(**NODE, label_keys=KEYS))


async def request(workloads: WorkloadActivities, jobs: list[Any], incident: str = INCIDENT) -> Any:
    return await ENV.run(
        workloads.request_checkpoint,
        j.RequestCheckpointInput(
            **NODE,
            request_incident=incident,
            deadline=datetime.now(UTC) + timedelta(minutes=10),
            urgency=Urgency.CHECKPOINT_FIRST,
            reason="Xid 48",
            label_keys=KEYS,
            jobs=jobs,
        ),
    )


async def test_the_node_s_gpu_pods_are_grouped_by_job_with_the_nodes_each_spans(
    store: KubeStore, workloads: WorkloadActivities
) -> None:
    gang(store, "llm", ["gpu-1", "gpu-2", "gpu-3"])
    gang(store, "eval", ["gpu-1"], opted_in=False)
    store.put_pod("ml", "notebook", node_name="gpu-1", gpus=1)  # names no job
    store.put_pod("ml", "sidecar", node_name="gpu-1", labels={JOBSET: "cpu-only"})  # no GPU
    found = await find(workloads)
    by_name = {job.name: job for job in found.jobs}
    assert set(by_name) == {"llm", "eval"}
    assert (by_name["llm"].nodes, by_name["llm"].pods, by_name["llm"].pods_on_node) == (3, 3, 1)
    assert by_name["llm"].checkpoint_supported
    assert not by_name["eval"].checkpoint_supported
    assert (found.gpu_pods, found.unowned_pods) == (3, 1)


async def test_a_pod_is_named_by_the_first_label_key_it_carries(
    store: KubeStore, workloads: WorkloadActivities
) -> None:
    store.put_pod(
        "ml",
        "worker-0",
        node_name="gpu-1",
        gpus=8,
        labels={"batch.kubernetes.io/job-name": "llm-job-0", JOBSET: "llm"},
    )
    [job] = (await find(workloads)).jobs
    assert (job.label_key, job.name) == (JOBSET, "llm")


async def test_the_request_goes_on_every_pod_of_an_opted_in_job_and_the_mark_on_the_node_s_pods(
    store: KubeStore, workloads: WorkloadActivities
) -> None:
    gang(store, "llm", ["gpu-1", "gpu-2"])
    gang(store, "eval", ["gpu-1"], opted_in=False)
    found = await find(workloads)
    result = await request(workloads, found.jobs)
    assert (result.requested_pods, result.watched_pods) == (2, 2)
    for pod in ("llm-0", "llm-1"):
        sent = CheckpointRequest.model_validate_json(annotations(store, pod)[REQUEST_ANNOTATION])
        assert (sent.incident, sent.node, sent.urgency) == (INCIDENT, "gpu-1", "checkpoint_first")
    assert REQUEST_ANNOTATION not in annotations(store, "eval-0")
    assert annotations(store, "eval-0")[INCIDENT_ANNOTATION] == INCIDENT
    assert INCIDENT_ANNOTATION not in annotations(store, "llm-1")  # on another node


async def test_each_job_s_request_names_that_job(
    store: KubeStore, workloads: WorkloadActivities
) -> None:
    gang(store, "llm", ["gpu-1", "gpu-2"])
    gang(store, "eval", ["gpu-1"])
    found = await find(workloads)
    result = await request(workloads, found.jobs)
    assert result.requested_pods == 3
    named = {
        pod: json.loads(annotations(store, pod)[REQUEST_ANNOTATION])["job"]
        for pod in ("llm-0", "llm-1", "eval-0")
    }
    assert named == {"llm-0": "ml/llm", "llm-1": "ml/llm", "eval-0": "ml/eval"}


async def test_a_repeated_request_writes_nothing_new(
    store: KubeStore, workloads: WorkloadActivities
) -> None:
    gang(store, "llm", ["gpu-1"])
    found = await find(workloads)
    await request(workloads, found.jobs)
    version = store.get(PODS, "llm-0", "ml")["metadata"]["resourceVersion"]
    first = annotations(store, "llm-0")[REQUEST_ANNOTATION]
    # A retry after an ambiguous timeout carries the same input (from history).
    await ENV.run(
        workloads.request_checkpoint,
        j.RequestCheckpointInput(
            **NODE,
            request_incident=INCIDENT,
            deadline=CheckpointRequest.model_validate_json(first).deadline,
            urgency=Urgency.CHECKPOINT_FIRST,
            reason="Xid 48",
            label_keys=KEYS,
            jobs=found.jobs,
        ),
    )
    assert store.get(PODS, "llm-0", "ml")["metadata"]["resourceVersion"] == version


async def test_another_incident_s_pending_request_is_not_overwritten(
    store: KubeStore, workloads: WorkloadActivities
) -> None:
    gang(store, "llm", ["gpu-1", "gpu-2"])
    found = await find(workloads)
    other = "gpu-remediation/default/gpu-2/run-b"
    await request(workloads, found.jobs, incident=other)
    result = await request(workloads, found.jobs)
    assert result.requested_pods == 0
    sent = json.loads(annotations(store, "llm-0")[REQUEST_ANNOTATION])
    assert sent["incident"] == other


async def test_withdraw_removes_only_this_incident_s_annotations(
    store: KubeStore, workloads: WorkloadActivities
) -> None:
    gang(store, "llm", ["gpu-1", "gpu-2"])
    found = await find(workloads)
    await request(workloads, found.jobs)
    store.put_pod(
        "ml", "keep", node_name="gpu-1", gpus=8, annotations={INCIDENT_ANNOTATION: "someone-else"}
    )
    result = await ENV.run(
        workloads.withdraw_checkpoint,
        j.WithdrawCheckpointInput(
            **NODE, request_incident=INCIDENT, label_keys=KEYS, jobs=found.jobs
        ),
    )
    assert result.cleared_pods == 2
    assert REQUEST_ANNOTATION not in annotations(store, "llm-0")
    assert INCIDENT_ANNOTATION not in annotations(store, "llm-0")
    assert REQUEST_ANNOTATION not in annotations(store, "llm-1")
    assert annotations(store, "keep")[INCIDENT_ANNOTATION] == "someone-else"
    assert annotations(store, "llm-0")[OPT_IN_ANNOTATION] == OPT_IN_VALUE
