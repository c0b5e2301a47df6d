"""The checkpoint relay: jobs' answers and watched pods' ends reach their incident.

Real parts: the Kubernetes API emulator over HTTP (the job writes its answer
with the official client, as the client helper does), the dev server, and the
node workflow with the scripted fleet's activities.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client as k8s
from temporalio.testing import WorkflowEnvironment

from gpu_remediation.ids import Activities as A
from gpu_remediation.ids import Signals
from gpu_remediation.jobs import (
    ANSWER_ANNOTATION,
    INCIDENT_ANNOTATION,
    REQUEST_ANNOTATION,
    CheckpointRequest,
)
from gpu_remediation.models import Outcome, Urgency
from simulator.kube_api import PODS
from tests.conftest import assert_eventually
from tests.doubles import FakeFleet, fake_pod_uid
from tests.triggers.watcher_support import Emulator, emulator
from tests.workflows.job_support import answer_json, job, on_node, requested_incident
from tests.workflows.node_support import cluster, xid
from triggers.checkpoint_relay import CheckpointRelay


@asynccontextmanager
async def relay(emu: Emulator, client: Any, cluster_name: str) -> AsyncIterator[CheckpointRelay]:
    r = CheckpointRelay(
        emu.api_client(), client, cluster_name, watch_timeout=5, backoff_initial=0.05
    )
    stop = asyncio.Event()
    task = asyncio.create_task(r.run(stop))
    try:
        yield r
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)


def job_pods(emu: Emulator, fleet: FakeFleet, *names: str, node: str = "gpu-r1") -> None:
    """The jobs' pods, before the incident asks: the fake fleet asks them by their real uids."""
    for name in names:
        emu.store.put_pod("ml", name, node_name=node, gpus=8)

    def uid(pod: str) -> str:
        namespace, name = pod.split("/")
        if name not in names:
            return fake_pod_uid(pod)  # a pod of the job on another node, not in this test
        return str(emu.store.get(PODS, name, namespace)["metadata"]["uid"])

    fleet.pod_uid = uid


async def asked_pod(
    emu: Emulator, name: str, incident: str, node: str = "gpu-r1", job: str | None = None
) -> None:
    """A job's pod as the worker leaves it: the request, and the incident's watch mark."""
    request = CheckpointRequest(
        incident=incident,
        node=node,
        deadline=datetime.now(UTC) + timedelta(minutes=10),
        urgency=Urgency.CHECKPOINT_FIRST,
        job=job,
    )
    annotations = {REQUEST_ANNOTATION: request.annotation(), INCIDENT_ANNOTATION: incident}
    pods, _ = emu.store.list_objects(PODS, "ml")
    if not any(pod["metadata"]["name"] == name for pod in pods):
        emu.store.put_pod("ml", name, node_name=node, gpus=8)
    core = k8s.CoreV1Api(emu.api_client())
    body = {"metadata": {"annotations": annotations}}
    await asyncio.to_thread(core.patch_namespaced_pod, name, "ml", body)


async def write_answer(emu: Emulator, pod: str, value: str) -> None:
    """What a job does: merge-patch the answer onto its own pod."""
    core = k8s.CoreV1Api(emu.api_client())
    body = {"metadata": {"annotations": {ANSWER_ANNOTATION: value}}}
    await asyncio.to_thread(core.patch_namespaced_pod, pod, "ml", body)


async def test_a_job_s_answer_on_its_pod_reaches_the_waiting_incident(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(node_jobs=[on_node(job())])
    with emulator() as emu:
        job_pods(emu, fleet, "llm-0")
        async with cluster(dev_env, task_queue, fleet) as c, relay(emu, c.client, c.name) as r:
            handle = await c.report("gpu-r1", xid(48))
            await assert_eventually(lambda: c.state(handle), lambda s: s.checkpoint == "asked")
            incident = requested_incident(fleet)
            await asked_pod(emu, "llm-0", incident)
            await write_answer(emu, "llm-0", answer_json(incident, step=4242))
            result = await handle.result()
            state = await c.state(handle)
    assert result.outcome == Outcome.REPAIRED
    assert state.checkpoint == "saved at step 4242"
    assert [out.signal for out in r.sent] == [Signals.CHECKPOINT_ANSWER]


async def test_each_job_s_answer_is_relayed_with_its_job_and_the_node_waits_for_both(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(node_jobs=[on_node(job("llm"), job("eval"))])
    with emulator() as emu:
        job_pods(emu, fleet, "llm-0", "eval-0")
        async with cluster(dev_env, task_queue, fleet) as c, relay(emu, c.client, c.name) as r:
            handle = await c.report("gpu-r1", xid(48))
            await assert_eventually(lambda: c.state(handle), lambda s: s.checkpoint == "asked")
            incident = requested_incident(fleet)
            await asked_pod(emu, "llm-0", incident, job="ml/llm")
            await asked_pod(emu, "eval-0", incident, job="ml/eval")
            await write_answer(emu, "llm-0", answer_json(incident, step=11))
            await assert_eventually(
                lambda: c.state(handle),
                lambda s: s.checkpoint == "ml/llm: saved at step 11; ml/eval: asked",
            )
            assert fleet.called(A.DRAIN_GPU_PODS) == 0
            await write_answer(emu, "eval-0", answer_json(incident, step=22))
            result = await handle.result()
            state = await c.state(handle)
    assert result.outcome == Outcome.REPAIRED
    assert state.checkpoint == "ml/llm: saved at step 11; ml/eval: saved at step 22"
    assert [out.payload.job for out in r.sent] == ["ml/llm", "ml/eval"]  # type: ignore[attr-defined]


async def test_a_watched_pod_that_ends_wakes_a_when_idle_incident(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(node_jobs=[on_node(job(supported=False))])
    with emulator() as emu:
        async with cluster(dev_env, task_queue, fleet) as c, relay(emu, c.client, c.name):
            handle = await c.report("gpu-r1", xid(63))  # row remap pending: when_idle
            await assert_eventually(
                lambda: c.state(handle), lambda s: s.checkpoint == "waiting for the jobs to end"
            )
            await asked_pod(emu, "eval-0", requested_incident(fleet))
            fleet.node_jobs = [on_node()]
            await asyncio.to_thread(emu.store.delete, PODS, "eval-0", "ml")
            result = await handle.result()
            state = await c.state(handle)
    assert result.outcome == Outcome.REPAIRED
    assert state.checkpoint == "the jobs ended"


async def test_answers_are_relayed_once_and_only_to_incidents_of_this_cluster(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    with emulator() as emu:
        async with relay(emu, dev_env.client, "here") as r:
            mine = f"gpu-remediation/here/gpu-r1/{uuid.uuid4()}"  # no such run
            foreign = f"gpu-remediation/elsewhere/gpu-r2/{uuid.uuid4()}"
            await asked_pod(emu, "llm-0", mine)
            await asked_pod(emu, "llm-1", foreign, node="gpu-r2")
            await write_answer(emu, "llm-0", answer_json(mine))
            await write_answer(emu, "llm-1", answer_json(foreign))
            core = k8s.CoreV1Api(emu.api_client())
            body = {"metadata": {"annotations": {"unrelated": json.dumps({"x": 1})}}}
            await asyncio.to_thread(core.patch_namespaced_pod, "llm-0", "ml", body)
            await asyncio.sleep(1.0)  # the relay has seen every change above by now
            assert r.sent == []  # the run is not there: dropped, not retried
            assert not r._outbox
