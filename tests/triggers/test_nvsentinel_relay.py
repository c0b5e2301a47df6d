"""The NVSentinel relay decides from Temporal which incident took a request: a node
incident that closed without the request's report does not answer it, the request is
reported again. Real dev server, the Kubernetes emulator over HTTP, no worker (the runs
stay as they are)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import Client

from gpu_remediation import nvsentinel as nvs
from gpu_remediation.evidence_history import received_reports
from gpu_remediation.models import ConditionEvidence
from gpu_remediation.policy_loader import load_policy
from simulator.kube_api import EXTERNAL_REMEDIATION_REQUESTS as ERR
from simulator.kube_api import KubeStore
from triggers.nvsentinel import ExternalRemediationRelay
from triggers.starter import IncidentStarter


def _taken_request(store: KubeStore, node: str, taken: datetime) -> dict[str, Any]:
    """A request a relay took (its annotation) before it could report it."""
    return store.create(
        ERR,
        {
            "apiVersion": f"{nvs.GROUP}/{nvs.VERSION}",
            "kind": nvs.KIND,
            "metadata": {
                "name": f"err-{node}",
                "annotations": {nvs.PICKED_UP_ANNOTATION: taken.isoformat()},
            },
            "spec": {"healthEvent": {"nodeName": node, "recommendedAction": "RESTART_BM"}},
        },
    )


async def test_a_request_whose_report_never_landed_is_not_answered_by_another_incident(
    dev_client: Client, task_queue: str, store: KubeStore, api: Any
) -> None:
    starter = IncidentStarter(
        dev_client, cluster=f"c{uuid.uuid4().hex[:8]}", policy=load_policy(), task_queue=task_queue
    )
    node = "gpu-7"
    # The node's own incident (from a condition), opened and closed after the request
    # was taken, without its report: the relay had died between taking and reporting.
    taken = datetime.now(UTC) - timedelta(minutes=5)
    request = _taken_request(store, node, taken)
    condition = ConditionEvidence(
        observed_at=datetime.now(UTC), source="test", type="Ready", status="False"
    )
    workflow_id = await starter.report(node, [condition], report_id="condition-1")
    first = dev_client.get_workflow_handle(workflow_id)
    await first.terminate(reason="the node's other incident ended")
    first_run = (await first.describe()).run_id

    relay = ExternalRemediationRelay(
        api, starter, dev_client, watches=lambda name: name == node, ready=lambda: True
    )
    relay._listed([store.get(ERR, request["metadata"]["name"])])
    await relay.pass_once()

    answered = store.get(ERR, request["metadata"]["name"])
    conditions = (answered.get("status") or {}).get("conditions") or []
    assert not [c for c in conditions if c["type"] == nvs.COMPLETE]  # not the other's outcome
    latest = await dev_client.get_workflow_handle(workflow_id).describe()
    assert latest.run_id != first_run  # a new incident, for NVSentinel's word
    history = await dev_client.get_workflow_handle(
        workflow_id, run_id=latest.run_id
    ).fetch_history()
    report_ids = [report.report_id for report, _ in received_reports(history.events)]
    assert report_ids == [f"nvsentinel-{request['metadata']['uid']}"]
    await dev_client.get_workflow_handle(workflow_id).terminate(reason="end of the test")
