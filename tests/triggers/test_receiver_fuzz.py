"""Property-based fuzzing of the receiver over HTTP (hypothesis).

Payloads are built field by field, each field valid or broken, so the test knows
what the answer must be: 401 without the token, 422 when a field of the
envelope is broken, else 200 with every broken alert refused on its own and
every other alert mapped as the node-label rules say. Arbitrary JSON and bytes
must be refused with 422. Whatever the answer, a node's incident exists exactly
when an accepted payload carried a valid firing alert naming it.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest_asyncio
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from temporalio.testing import WorkflowEnvironment

from tests.triggers.receiver_support import AUTH, ZERO_TIME, Receiver, receiver

NODE_LABELS = ("hostname", "Hostname", "node", "instance")
SLOTS = 3
_examples = itertools.count()


@dataclass
class Case:
    """A generated request and what the receiver must make of it."""

    body: bytes
    headers: dict[str, str]
    valid: bool
    """Whether the envelope is valid (its alerts may not be)."""
    # Per alert of a valid payload: its status, the slot of the node it names,
    # and whether the alert itself is valid.
    alerts: list[tuple[str, int | None, bool]] = field(default_factory=list)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def fuzz_rx(dev_env: WorkflowEnvironment) -> AsyncIterator[Receiver]:
    async with receiver(dev_env.client) as rx:
        yield rx


def _pick(draw: st.DrawFn, valid: st.SearchStrategy[Any], broken: st.SearchStrategy[Any]) -> Any:
    """Draw a valid value mostly, a broken one (marked by a wrapper) sometimes."""
    # About one field in 40 is broken: half of the structured payloads stay valid.
    if draw(st.integers(0, 39)) == 17:  # not 0: hypothesis favours boundary values
        return _Broken(draw(broken))
    return draw(valid)


@dataclass
class _Broken:
    value: Any


_MISSING = object()
_times = st.sampled_from(
    ["2026-12-01T10:00:00Z", "2026-12-01T12:00:00+02:00", "2026-11-30T23:59:59.123456789Z"]
)
_bad_times = st.sampled_from(["yesterday", "2026-12-01T10:00:00", 5, None, "", _MISSING])
_label_values = st.text(alphabet="abcXYZ09-_ :", max_size=12)


@st.composite
def _node_labels(draw: st.DrawFn) -> tuple[dict[str, str], int | None]:
    """Node labels, and the slot whose node they name (None: no node)."""
    names = draw(st.lists(st.sampled_from(NODE_LABELS), unique=True, max_size=2))
    labels: dict[str, str] = {}
    forms: dict[str, int | None] = {}
    for name in names:
        slot = draw(st.integers(0, SLOTS - 1))
        form = draw(st.sampled_from(["plain", "port", "upper", "empty", "invalid"]))
        value = {
            "plain": f"@N{slot}@",
            "port": f"@N{slot}@:9400",
            "upper": f"@U{slot}@",
            "empty": "",
            "invalid": draw(st.sampled_from(["GPU_1!", "-bad", "a..b", "[::1]:9400", "x" * 300])),
        }[form]
        labels[name] = value
        forms[name] = None if form in ("invalid", "empty") else slot
    # The rule under test: the first configured label with a non-empty value decides.
    for name in NODE_LABELS:
        if labels.get(name):
            return labels, forms[name]
    return labels, None


@st.composite
def _alert(draw: st.DrawFn) -> tuple[dict[str, Any], bool, str, int | None]:
    node_labels, slot = draw(_node_labels())
    status = _pick(
        draw,
        st.sampled_from(["firing", "resolved"]),
        st.sampled_from(["pending", "", 1, None, "FIRING", _MISSING]),
    )
    extra_labels = draw(
        st.dictionaries(
            st.sampled_from(["xid", "gpu", "severity", "alertname", "fault_class", "value"]),
            _label_values,
            max_size=3,
        )
    )
    labels: Any = {**extra_labels, **node_labels}
    labels = _pick(
        draw,
        st.just(labels),
        st.sampled_from([[1, 2], "labels", {"gpu": 3}, {"a": None}, _MISSING]),
    )
    fingerprint = _pick(
        draw,
        st.sampled_from(["a1b2c3d4e5f60718", "0000000000000001", "ffff"]),
        st.sampled_from(["", "has space", 5, "x" * 200, _MISSING]),
    )
    starts = _pick(draw, _times, _bad_times)
    if status == "resolved":
        ends = _pick(draw, _times, st.sampled_from([ZERO_TIME, "later", _MISSING]))
    else:
        ends = _pick(
            draw, st.sampled_from([ZERO_TIME]) | _times, st.sampled_from(["later", 1, _MISSING])
        )
    annotations = _pick(
        draw,
        st.dictionaries(st.sampled_from(["summary", "xid", "value"]), _label_values, max_size=2),
        st.sampled_from(["text", [1], {"summary": 1}]),
    )
    raw: dict[str, Any] = {
        "status": status,
        "labels": labels,
        "annotations": annotations,
        "startsAt": starts,
        "endsAt": ends,
        "generatorURL": "http://prometheus/graph",
        "fingerprint": fingerprint,
    }
    if draw(st.booleans()):
        raw["somethingNew"] = draw(_label_values)
    valid = not any(isinstance(v, _Broken) for v in raw.values())
    clean = {k: (v.value if isinstance(v, _Broken) else v) for k, v in raw.items()}
    clean = {k: v for k, v in clean.items() if v is not _MISSING}
    return clean, valid, str(status), slot


@st.composite
def structured(draw: st.DrawFn) -> Case:
    alerts = draw(st.lists(_alert(), min_size=1, max_size=4))
    body: dict[str, Any] = {
        "version": _pick(draw, st.just("4"), st.sampled_from(["3", 4, None, _MISSING])),
        "groupKey": _pick(draw, st.just("{}:{}"), st.sampled_from([None, 1, _MISSING])),
        "truncatedAlerts": _pick(draw, st.integers(0, 3), st.sampled_from([-1, "x"])),
        "status": _pick(draw, st.sampled_from(["firing", "resolved"]), st.just("pending")),
        "receiver": _pick(draw, st.just("gpu-remediation"), st.sampled_from([5, None, _MISSING])),
        "groupLabels": _pick(draw, st.just({"alertname": "GpuXid"}), st.just("x")),
        "commonLabels": {},
        "commonAnnotations": _pick(draw, st.just({}), st.just([1])),
        "externalURL": "http://alertmanager:9093",
        "alerts": _pick(
            draw, st.just([a[0] for a in alerts]), st.sampled_from([[], "alerts", _MISSING])
        ),
    }
    valid = not any(isinstance(v, _Broken) for v in body.values())
    clean = {k: (v.value if isinstance(v, _Broken) else v) for k, v in body.items()}
    clean = {k: v for k, v in clean.items() if v is not _MISSING}
    headers = draw(
        st.sampled_from([AUTH] * 9 + [{}, {"Authorization": "Bearer nope-nope-nope-nope"}])
    )
    return Case(
        body=json.dumps(clean).encode(),
        headers=headers,
        valid=valid,
        alerts=[(a[2], a[3], a[1]) for a in alerts] if valid else [],
    )


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
arbitrary = st.one_of(
    _json.map(lambda v: Case(json.dumps(v).encode(), AUTH, valid=False)),
    st.binary(max_size=64).map(lambda b: Case(b, AUTH, valid=False)),
)


@settings(
    max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(case=st.one_of(structured(), structured(), arbitrary))
async def test_no_payload_crashes_the_receiver_or_starts_what_it_should_not(
    fuzz_rx: Receiver, case: Case
) -> None:
    # Fresh node names per example, so each example's incidents are its own.
    run = next(_examples)
    nodes = [f"fz{run}-slot{slot}" for slot in range(SLOTS)]
    body = case.body
    for slot in range(SLOTS):
        body = body.replace(f"@N{slot}@".encode(), f"fz{run}-slot{slot}".encode())
        body = body.replace(f"@U{slot}@".encode(), f"FZ{run}-SLOT{slot}".encode())
    response = await fuzz_rx.http.post("/v1/alerts", content=body, headers=case.headers)
    event(f"status {response.status_code}")
    should_start: set[str] = set()
    if case.headers != AUTH:
        assert response.status_code == 401, response.text
    elif not case.valid:
        assert response.status_code == 422, response.text
        assert response.json()["problems"], response.text
    else:
        assert response.status_code == 200, response.text
        results = response.json()["results"]
        assert len(results) == len(case.alerts)
        for index, (result, (status, slot, alert_valid)) in enumerate(
            zip(results, case.alerts, strict=True)
        ):
            assert result["index"] == index
            if not alert_valid:
                event("an alert refused alone")
                assert result["outcome"] == "refused", (result, body)
                assert result["detail"].startswith("invalid alert: "), result
                assert result["node"] is None
                continue
            node = None if slot is None else nodes[slot]
            assert result["node"] == node, (result, body)
            if node is None:
                assert result["outcome"] in ("unmapped", "unknown_node")
            elif status == "firing":
                assert result["outcome"] in ("delivered", "duplicate")
                should_start.add(node)
            else:
                assert result["outcome"] in ("delivered", "duplicate", "no_incident")
    for node in nodes:
        assert await fuzz_rx.started(node) == (node in should_start), (node, body)
