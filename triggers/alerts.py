"""Alertmanager webhook (version 4): the payload's models and the alert-to-evidence mapping.

The receiver (``triggers.receiver``) validates every request body as a
:class:`ReceivedPayload` before it acts on anything: the envelope as a whole
(a broken one is refused with everything in it), each alert on its own, so
that one bad alert (too many labels, an oversized annotation, a broken time)
is refused alone as a :class:`RefusedAlert` and the others of its group go
on. :class:`WebhookPayload` is the same body with every alert required valid
(the published schema). The receiver then maps each valid alert with
:func:`map_alerts`: the node comes from the first configured label the alert
carries (``TriggerPolicy.alert_node_labels``), the evidence is an
:class:`~gpu_remediation.models.AlertEvidence` whose labels the classifier reads
(Xid value, DCGM metric, and a stated fault class only where the policy trusts
one: ``TriggerPolicy.trust_alert_fault_class``). An alert's times are the
sender's: the evidence is never observed later than the receiver's own clock
(``received_at``), so an alert dated in the future cannot defer a repair.
Everything here is pure (the clock is an argument), so it is tested without a
server.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    model_validator,
)

from gpu_remediation.catalog import ALERT_FAULT_CLASS_LABEL, ALERT_XID_LABELS
from gpu_remediation.ids import is_valid_node_name
from gpu_remediation.models import AlertEvidence

SOURCE = "alertmanager"
"""``source`` of the evidence (followed by ``/<receiver>``)."""

MAX_ALERTS = 10_000
"""Alerts per payload; Alertmanager's ``max_alerts`` truncates larger groups."""

_MESSAGE_ANNOTATIONS = ("summary", "description", "message")
_MAX_MESSAGE = 4096  # AlertEvidence.message
_MAX_SOURCE = 128  # AlertEvidence.source
# Alertmanager writes fingerprints as 16 hex digits; other senders of the same
# format may use other ids, so allow a bounded, printable set.
_FINGERPRINT = r"^[A-Za-z0-9_.:-]{1,128}$"
_HOST_PORT = re.compile(r"^(?P<host>[^:\[\]]+):\d{1,5}$")

LabelName = Annotated[str, Field(min_length=1, max_length=256)]
# Labels travel into the node workflow's evidence: keep them small enough for
# Temporal's payload limits (Prometheus labels are short in practice).
Labels = Annotated[dict[LabelName, Annotated[str, Field(max_length=1024)]], Field(max_length=64)]
Annotations = Annotated[
    dict[LabelName, Annotated[str, Field(max_length=65536)]], Field(max_length=128)
]


def _time_text(value: Any) -> Any:
    # A time is RFC 3339 text, as in JSON; the lax parse below takes text only,
    # so an alert validated from Python objects (one alert at a time, see
    # ReceivedPayload) reads its times exactly as the JSON parser does.
    if isinstance(value, str | datetime):
        return value
    raise ValueError("Input should be a valid datetime (RFC 3339 text)")


Time = Annotated[AwareDatetime, BeforeValidator(_time_text), Field(strict=False)]
"""An aware time, written as RFC 3339 text (a number is not a time)."""


class _Webhook(BaseModel):
    # Unknown fields are ignored, not refused: Alertmanager adds fields within
    # version "4" (truncatedAlerts came later), and a 4xx answer makes it drop
    # the notification for good. Strict: no coercion (a number is not a time).
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True, strict=True)


class Alert(_Webhook):
    """One alert of a notification."""

    status: Literal["firing", "resolved"]
    labels: Labels
    annotations: Annotations = Field(default_factory=dict)
    starts_at: Time = Field(alias="startsAt")
    ends_at: Time = Field(alias="endsAt", description="0001-01-01T00:00:00Z while the alert fires.")
    generator_url: str = Field(default="", alias="generatorURL", max_length=4096)
    fingerprint: str = Field(pattern=_FINGERPRINT)

    @model_validator(mode="after")
    def _resolved_has_an_end(self) -> Alert:
        if self.status == "resolved" and zero_time(self.ends_at):
            raise ValueError("a resolved alert needs endsAt (the time it resolved)")
        return self


class WebhookEnvelope(_Webhook):
    """What Alertmanager's webhook body (``version`` "4") says besides its alerts."""

    version: Literal["4"]
    group_key: str = Field(alias="groupKey", max_length=16384)
    truncated_alerts: int = Field(default=0, ge=0, alias="truncatedAlerts")
    status: Literal["firing", "resolved"]
    receiver: str = Field(max_length=1024)
    group_labels: Labels = Field(default_factory=dict, alias="groupLabels")
    common_labels: Labels = Field(default_factory=dict, alias="commonLabels")
    common_annotations: Annotations = Field(default_factory=dict, alias="commonAnnotations")
    external_url: str = Field(default="", alias="externalURL", max_length=4096)


class WebhookPayload(WebhookEnvelope):
    """The body Alertmanager posts to a webhook receiver (``version`` "4"), every alert valid."""

    alerts: list[Alert] = Field(min_length=1, max_length=MAX_ALERTS)


_ALERT_PROBLEMS = 5
"""Problems named per refused alert (then a count of the rest)."""


@dataclass(frozen=True, slots=True)
class RefusedAlert:
    """An alert of a received payload that is not a valid alert; the payload's others go on.

    Attributes:
        problems: What is wrong, by path within the alert (``labels: ...``).
        fingerprint: Its ``fingerprint`` as sent, when that is a string (shortened).
        alertname: Its ``alertname`` label as sent, when there is one (shortened).
        status: Its ``status`` when that is valid, else None.
    """

    problems: tuple[str, ...]
    fingerprint: str = ""
    alertname: str = ""
    status: Literal["firing", "resolved"] | None = None

    @property
    def reason(self) -> str:
        """The problems in one line."""
        return "invalid alert: " + "; ".join(self.problems)


def _sent_text(value: object, limit: int) -> str:
    if not isinstance(value, str):
        return ""
    return value if len(value) <= limit else value[: limit - 3] + "..."


def _alert_or_refusal(raw: object) -> Alert | RefusedAlert:
    """Validate one alert of a received payload; a refusal names what is wrong."""
    if isinstance(raw, Alert):
        return raw
    try:
        return Alert.model_validate(raw)
    except ValidationError as err:
        fields = raw if isinstance(raw, dict) else {}
        labels = fields.get("labels")
        status = fields.get("status")
        return RefusedAlert(
            problems=tuple(payload_problems(err, limit=_ALERT_PROBLEMS)),
            fingerprint=_sent_text(fields.get("fingerprint"), 128),
            alertname=_sent_text(
                labels.get("alertname") if isinstance(labels, dict) else None, 128
            ),
            status=status if status in ("firing", "resolved") else None,
        )


class ReceivedPayload(WebhookEnvelope):
    """A webhook body as the receiver takes it: the envelope valid, each alert valid or refused.

    The envelope's fields are validated as in :class:`WebhookPayload`, and the
    alert list must be a list of 1 to ``MAX_ALERTS`` entries; each entry is then
    validated on its own, becoming an :class:`Alert` or a :class:`RefusedAlert`.
    """

    alerts: list[Annotated[Alert | RefusedAlert, PlainValidator(_alert_or_refusal)]] = Field(
        min_length=1, max_length=MAX_ALERTS
    )


def _shorten(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def payload_problems(err: ValidationError, limit: int = 20) -> list[str]:
    """Name each problem of an invalid payload by its path, e.g. ``alerts.0.status: ...``.

    Args:
        err: The error from validating a :class:`WebhookPayload`.
        limit: At most this many problems are listed (then a count of the rest).
    """
    problems = []
    for error in err.errors(include_url=False):
        path = ".".join(str(part) for part in error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        got = error.get("input")
        if error["type"] not in ("missing", "json_invalid") and not isinstance(got, dict | list):
            message += f" (got {_shorten(got)})"
        problems.append(f"{path}: {message}" if path else message)
    if len(problems) > limit:
        problems = [*problems[:limit], f"... and {len(problems) - limit} more problems"]
    return problems


# ------------------------------------------------------------------ mapping


@dataclass(frozen=True, slots=True)
class NodeLookup:
    """Which node an alert names, or why it names none."""

    node: str | None
    label: str | None = None
    problem: Literal["unmapped", "unknown_node"] | None = None
    detail: str = ""


@functools.lru_cache(maxsize=16384)  # a storm repeats the same few thousand values
def node_name_from_label(value: str) -> str | None:
    """Return the node name a label value stands for, or None if it is not one.

    Exporters label targets ``host:port`` (Prometheus' ``instance``): the port is
    dropped. Like the kubelet, which names a node after its hostname lowercased
    and trimmed, the value is lowercased and trimmed. The result must be a valid
    Kubernetes node name.
    """
    candidate = value.strip().lower()
    match = _HOST_PORT.fullmatch(candidate)
    if match:
        candidate = match.group("host")
    return candidate if is_valid_node_name(candidate) else None


def find_node(labels: dict[str, str], node_labels: Sequence[str]) -> NodeLookup:
    """Return the node named by the first of ``node_labels`` that the alert carries.

    An empty value counts as absent (as in Prometheus). A present label whose
    value is not a node name is not skipped in favour of a later label: later
    labels such as ``instance`` often name the exporter's host rather than the
    faulty node, and guessing could remediate the wrong machine.
    """
    for name in node_labels:
        value = labels.get(name)
        if not value:
            continue
        node = node_name_from_label(value)
        if node is None:
            detail = f"label {name}={_shorten(value)} is not a valid Kubernetes node name"
            return NodeLookup(None, name, "unknown_node", detail)
        return NodeLookup(node, name)
    wanted = ", ".join(node_labels)
    return NodeLookup(None, None, "unmapped", f"no node label (looked for {wanted})")


def report_id(alert: Alert) -> str:
    """Idempotency key of an alert's report: one per firing episode and polarity.

    Alertmanager repeats a firing alert (same fingerprint and ``startsAt``) every
    ``repeat_interval`` and retries failed notifications; all of these carry the
    same key, so the node workflow drops them. The resolution of the episode is
    a different report, and a new episode (new ``startsAt``) is new evidence.
    """
    # In UTC: the same instant written with another offset is the same episode.
    started = alert.starts_at.astimezone(UTC).isoformat()
    return f"{SOURCE}/{alert.fingerprint}/{started}/{alert.status}"


def _message(alert: Alert, common: dict[str, str]) -> str:
    text = next(
        (
            source[name]
            for name in _MESSAGE_ANNOTATIONS
            for source in (alert.annotations, common)
            if source.get(name)
        ),
        "",
    )
    severity = alert.labels.get("severity")
    if severity:
        text = f"[{severity}] {text}" if text else f"[{severity}]"
    return text[:_MAX_MESSAGE]


def _evidence_labels(alert: Alert, trust_fault_class: bool) -> dict[str, str]:
    labels = dict(alert.labels)
    if not trust_fault_class:
        # Unless the policy says every rule sets or clears it, the label may come
        # from any scraped series: the class is then the Xid's or the metric's.
        labels.pop(ALERT_FAULT_CLASS_LABEL, None)
    # Prometheus' advice is to keep the value ({{ $value }}, here the Xid code)
    # out of labels, so rules often carry it as an annotation: lift it where the
    # classifier looks for it.
    if not any(labels.get(name) for name in ALERT_XID_LABELS):
        for name in ALERT_XID_LABELS:
            if alert.annotations.get(name):
                labels[name] = alert.annotations[name][:64]
                break
    return labels


def alert_time(alert: Alert) -> datetime:
    """When the alert says its news happened: ``endsAt`` if resolved, else ``startsAt``."""
    return alert.ends_at if alert.status == "resolved" else alert.starts_at


def future_skew(alert: Alert, received_at: datetime) -> timedelta | None:
    """How far :func:`alert_time` lies after ``received_at``, or None when it does not."""
    moment = alert_time(alert)
    return moment - received_at if moment > received_at else None


def ignores_fault_class(alert: Alert, trust_fault_class: bool) -> bool:
    """Whether the alert carries a ``fault_class`` label that its evidence drops."""
    return not trust_fault_class and bool(alert.labels.get(ALERT_FAULT_CLASS_LABEL))


def alert_evidence(
    alert: Alert,
    receiver: str,
    common_annotations: dict[str, str],
    *,
    received_at: datetime,
    trust_fault_class: bool = False,
) -> AlertEvidence:
    """The evidence an alert stands for.

    A firing alert is observed at ``startsAt`` (the node workflow measures grace
    from there); a resolved one clears it (same key: the fingerprint) at
    ``endsAt``. Either time is clamped to ``received_at``: the sender's clock
    (or a forged payload) cannot date evidence in the future, where it would
    defer the repair by the difference (the condition watcher does the same
    with ``lastTransitionTime``). Earlier times are kept.

    Args:
        alert: The alert.
        receiver: The payload's receiver name (part of the evidence's source).
        common_annotations: The payload's common annotations (message fallback).
        received_at: The receiver's clock when the payload arrived (aware).
        trust_fault_class: Keep a ``fault_class`` label (the policy's
            ``triggers.trust_alert_fault_class``); otherwise it is dropped.
    """
    return AlertEvidence(
        observed_at=min(alert_time(alert), received_at),
        source=f"{SOURCE}/{receiver}"[:_MAX_SOURCE] if receiver else SOURCE,
        cleared=alert.status == "resolved",
        message=_message(alert, common_annotations),
        labels=_evidence_labels(alert, trust_fault_class),
        fingerprint=alert.fingerprint,
    )


@dataclass(frozen=True, slots=True)
class MappedAlert:
    """An alert with its node (when it names one) and idempotency key."""

    index: int
    alert: Alert
    lookup: NodeLookup
    report_id: str
    payload: WebhookEnvelope
    received_at: datetime
    trust_fault_class: bool = False

    def evidence(self) -> AlertEvidence:
        """The evidence to deliver (built on demand: duplicates never need it)."""
        return alert_evidence(
            self.alert,
            self.payload.receiver,
            self.payload.common_annotations,
            received_at=self.received_at,
            trust_fault_class=self.trust_fault_class,
        )

    @property
    def skew(self) -> timedelta | None:
        """How far the alert's time lies in the receiver's future (clamped), if it does."""
        return future_skew(self.alert, self.received_at)

    @property
    def ignored_fault_class(self) -> bool:
        """Whether the alert's ``fault_class`` label is dropped (not trusted)."""
        return ignores_fault_class(self.alert, self.trust_fault_class)


def map_alerts(
    payload: WebhookPayload | ReceivedPayload,
    node_labels: Sequence[str],
    *,
    received_at: datetime | None = None,
    trust_fault_class: bool = False,
) -> list[MappedAlert]:
    """Map every valid alert of a payload to its node and report id, in payload order.

    Refused alerts (see :func:`refused_alerts`) are left out; each mapped
    alert keeps its index in the payload.

    Args:
        payload: The validated notification.
        node_labels: Labels that may name the node, in order.
        received_at: The receiver's clock when the payload arrived (aware; now
            when omitted): no evidence is observed later than this.
        trust_fault_class: Keep the alerts' ``fault_class`` labels.

    Raises:
        ValueError: If ``received_at`` is naive.
    """
    labels = tuple(node_labels)
    now = received_at or datetime.now(UTC)
    if now.utcoffset() is None:
        raise ValueError("received_at must be timezone-aware")
    return [
        MappedAlert(
            index,
            alert,
            find_node(alert.labels, labels),
            report_id(alert),
            payload,
            now,
            trust_fault_class,
        )
        for index, alert in enumerate(payload.alerts)
        if isinstance(alert, Alert)
    ]


def refused_alerts(payload: ReceivedPayload) -> list[tuple[int, RefusedAlert]]:
    """The payload's refused alerts, each with its index in the payload."""
    return [(i, a) for i, a in enumerate(payload.alerts) if isinstance(a, RefusedAlert)]


def zero_time(value: datetime) -> bool:
    """Whether ``value`` is Go's zero time (Alertmanager's "no end yet")."""
    return value.year <= 1
