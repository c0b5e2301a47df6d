"""The relay's bounds: answers carry the pod's uid; floods are refused and counted, not lost."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client as k8s

from gpu_remediation.ids import Signals
from gpu_remediation.job_contracts import CheckpointAnswerReport
from gpu_remediation.jobs import ANSWER_ANNOTATION, REQUEST_ANNOTATION, CheckpointRequest
from gpu_remediation.models import Urgency
from triggers import checkpoint_relay
from triggers.checkpoint_relay import MAX_ANSWERS_PER_INCIDENT, CheckpointRelay

CLUSTER = "here"


def relay() -> CheckpointRelay:
    # Nothing here talks to Temporal or the API server: only _examine runs.
    return CheckpointRelay(k8s.ApiClient(), None, CLUSTER)  # type: ignore[arg-type]


def incident() -> str:
    return f"gpu-remediation/{CLUSTER}/gpu-1/{uuid.uuid4()}"


def pod(name: str, uid: str, request_incident: str, answer: str, job: str) -> dict[str, Any]:
    request = CheckpointRequest(
        incident=request_incident,
        node="gpu-1",
        deadline=datetime.now(UTC) + timedelta(minutes=10),
        urgency=Urgency.CHECKPOINT_FIRST,
        job=job,
    )
    return {
        "metadata": {
            "name": name,
            "namespace": "mallory",
            "uid": uid,
            "annotations": {REQUEST_ANNOTATION: request.annotation(), ANSWER_ANNOTATION: answer},
        },
        "status": {"phase": "Running"},
    }


def test_an_answer_carries_the_pods_uid_from_the_api_server() -> None:
    r = relay()
    r._examine("MODIFIED", pod("x-0", "uid-x0", incident(), '{"step": 1}', "team-a/train-llm"))
    [out] = list(r._outbox)
    assert out.signal == Signals.CHECKPOINT_ANSWER
    assert isinstance(out.payload, CheckpointAnswerReport)
    assert out.payload.pod_uid == "uid-x0"
    # The job the pod's annotation names travels for the log only.
    assert out.payload.job == "team-a/train-llm"


def test_a_pod_rewriting_its_answer_is_cut_off_at_the_cap_and_counted() -> None:
    r = relay()
    target = incident()
    for step in range(MAX_ANSWERS_PER_INCIDENT + 50):
        r._examine("MODIFIED", pod("x-0", "uid-x0", target, f'{{"step": {step}}}', "a/b"))
    assert len(r._outbox) == MAX_ANSWERS_PER_INCIDENT
    assert r.refused["answers_over_cap"] == 50
    # Another incident's answers are not held up by this one's flood.
    r._examine("MODIFIED", pod("y-0", "uid-y0", incident(), '{"step": 1}', "a/b"))
    assert len(r._outbox) == MAX_ANSWERS_PER_INCIDENT + 1


def test_a_full_outbox_refuses_the_newest_and_keeps_what_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(checkpoint_relay, "MAX_OUTBOX", 3)
    r = relay()
    first = incident()
    r._examine("MODIFIED", pod("real-0", "uid-real", first, '{"step": 7}', "a/b"))
    for i in range(5):
        r._examine("MODIFIED", pod(f"f-{i}", f"uid-f{i}", incident(), '{"step": 1}', "a/b"))
    assert len(r._outbox) == 3
    assert r._outbox[0].payload.pod_uid == "uid-real"  # type: ignore[attr-defined]
    assert r.refused["outbox_full"] == 3
