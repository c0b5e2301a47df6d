"""Requests are read strictly, answers are written within the contract's bounds."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from checkpoint_client.protocol import (
    MAX_ANSWER_BYTES,
    MAX_REQUEST_BYTES,
    Answer,
    ProtocolError,
    parse_answer,
    parse_request,
    parse_time,
)

INCIDENT = "gpu-remediation/prod/ip-10-0-1-7.ec2.internal/6f1c2d3e"


def request(**fields: object) -> str:
    body: dict[str, object] = {
        "version": 1,
        "incident": INCIDENT,
        "node": "ip-10-0-1-7.ec2.internal",
        "deadline": "2026-12-04T13:10:00Z",
        "urgency": "checkpoint_first",
        "reason": "gpu_reset_required: Xid 48 on GPU 3",
    }
    body.update(fields)
    return json.dumps({k: v for k, v in body.items() if v is not ...})


def test_the_contract_example_request_parses() -> None:
    parsed = parse_request(request())
    assert parsed.incident == INCIDENT
    assert parsed.deadline == datetime(2026, 12, 4, 13, 10, tzinfo=UTC)
    assert parsed.urgent
    assert not parse_request(request(urgency="when_idle")).urgent


def test_unknown_fields_are_ignored_for_newer_systems() -> None:
    assert parse_request(request(priority=3)).incident == INCIDENT


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ("not json", "request: not JSON"),
        ("[1]", "expected a JSON object"),
        (request(version=2), "request.version"),
        (request(version=True), "request.version"),
        (request(incident=""), "request.incident"),
        (request(incident=...), "request.incident"),
        (request(deadline="tomorrow"), "request.deadline"),
        (request(deadline="2026-12-04 13:10:00"), "request.deadline"),
        (request(urgency="immediate"), "request.urgency"),
        (request(reason=7), "request.reason"),
        (request(reason="x" * MAX_REQUEST_BYTES), "more than 4096"),
    ],
)
def test_a_malformed_request_names_the_field(raw: str, field: str) -> None:
    with pytest.raises(ProtocolError) as err:
        parse_request(raw)
    assert field in str(err.value)


def test_times_with_fractions_and_offsets_are_read_in_utc() -> None:
    assert parse_time("2026-12-04T15:10:00.123456789+02:00", "t") == datetime(
        2026, 12, 4, 13, 10, 0, 123456, tzinfo=UTC
    )


def test_an_answer_round_trips_in_the_contracts_shape() -> None:
    saved = datetime(2026, 12, 4, 13, 4, 31, 999, tzinfo=timezone(timedelta(hours=1)))
    text = Answer(INCIDENT, 12800, saved).to_json()
    assert json.loads(text) == {
        "version": 1,
        "incident": INCIDENT,
        "step": 12800,
        "saved_at": "2026-12-04T12:04:31Z",
    }
    assert parse_answer(text) == Answer(
        INCIDENT, 12800, datetime(2026, 12, 4, 12, 4, 31, tzinfo=UTC)
    )


def test_a_refusal_carries_null_step_and_time() -> None:
    text = Answer(INCIDENT, None, None, refused="optimizer state not shardable").to_json()
    assert json.loads(text)["step"] is None
    assert parse_answer(text).refused == "optimizer state not shardable"


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (Answer(INCIDENT, -1, datetime.now(UTC)), "answer.step"),
        (Answer(INCIDENT, None, datetime.now(UTC)), "required unless refused"),
        (Answer(INCIDENT, 3, None, refused="no"), "refusal carries"),
        (Answer(INCIDENT, None, None, refused="x" * MAX_ANSWER_BYTES), "more than the contract"),
    ],
)
def test_an_invalid_or_oversized_answer_is_refused_before_writing(answer: Answer, why: str) -> None:
    with pytest.raises(ProtocolError) as err:
        answer.to_json()
    assert why in str(err.value)
