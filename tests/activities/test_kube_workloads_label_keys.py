"""Jobs of every framework are found by their label: Kubeflow's, and keys a policy adds."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from temporalio.testing import ActivityEnvironment

from activities.kube_workloads import WorkloadActivities
from gpu_remediation import job_contracts as j
from gpu_remediation.policy import DEFAULT_JOB_LABEL_KEYS
from gpu_remediation.policy_loader import parse_policy
from gpu_remediation.settings import Settings
from simulator.kube_api import KubeStore

ENV = ActivityEnvironment()
NODE = {"node": "gpu-1", "incident_id": "gpu-remediation/default/gpu-1"}
RAY = "ray.io/cluster"


@pytest.fixture
def workloads(api: Any, settings: Settings) -> WorkloadActivities:
    return WorkloadActivities(client.CoreV1Api(api), settings)


async def jobs_on_gpu_1(workloads: WorkloadActivities, keys: list[str]) -> list[Any]:
    found = await ENV.run(workloads.find_node_jobs, j.FindNodeJobsInput(**NODE, label_keys=keys))
    return list(found.jobs)


async def test_a_kubeflow_training_job_is_found_by_its_job_name_label(
    store: KubeStore, workloads: WorkloadActivities
) -> None:
    for i, node in enumerate(["gpu-1", "gpu-2"]):
        store.put_pod(
            "ml",
            f"llama-worker-{i}",
            node_name=node,
            gpus=8,
            labels={"training.kubeflow.org/job-name": "llama"},
        )
    [job] = await jobs_on_gpu_1(workloads, list(DEFAULT_JOB_LABEL_KEYS))
    assert (job.label_key, job.name, job.nodes) == ("training.kubeflow.org/job-name", "llama", 2)


async def test_a_label_key_the_policy_adds_names_another_framework_s_jobs(
    store: KubeStore, workloads: WorkloadActivities
) -> None:
    store.put_pod("ml", "ray-head", node_name="gpu-1", gpus=8, labels={RAY: "tuner"})
    assert await jobs_on_gpu_1(workloads, list(DEFAULT_JOB_LABEL_KEYS)) == []
    keys = ", ".join([*DEFAULT_JOB_LABEL_KEYS, RAY])
    policy = parse_policy(f"jobs: {{label_keys: [{keys}]}}")
    [job] = await jobs_on_gpu_1(workloads, list(policy.jobs.label_keys))
    assert (job.label_key, job.name) == (RAY, "tuner")
