"""The Alertmanager webhook receiver: alerts in, node incidents out.

``POST /v1/alerts`` takes Alertmanager's webhook payload (version "4"),
authenticated with a bearer token. Each firing alert becomes evidence sent to
its node's incident through :class:`~triggers.starter.IncidentStarter`
(one incident per node however many alerts arrive); each
resolved alert is sent to the node's open incident as clearing evidence, and
starts nothing when no incident is open. Answers:

* 200 when every valid alert that names a node was delivered; alerts that
  name no node, or a value that is not a node name, and alerts that are
  refused (``refused``: the alert itself is invalid, e.g. 72 labels or a
  70 kB annotation, or Temporal refused its report as invalid) are reported
  per alert in the body, each with its index, fingerprint, alertname and
  reason. Validation is per alert: one bad alert never holds back its group;
* 401 without the right token; 413 for a body over the size limit (the bound
  on what one request may cost);
* 422 for a body whose envelope is not a valid version 4 webhook (not JSON,
  wrong version, no alert list, ...; nothing is started);
* 503 when Temporal could not take a report now (unavailable, INTERNAL, a
  timeout, ...) even after ``delivery_attempts`` tries within the request
  (a short backoff between them, all within ``delivery_timeout``):
  Alertmanager retries 5xx (never 4xx), and every report is idempotent, so its
  retry delivers nothing twice; 502 when Temporal refuses for a reason an
  operator must fix (permissions, unknown namespace; retried by Alertmanager
  too).

What an alert says is not all taken at its word (docs/security.md, "Alerts"):
a ``fault_class`` label is dropped unless the policy trusts it
(``triggers.trust_alert_fault_class``), and evidence is never observed later
than the receiver's clock (an alert dated in the future is observed now); both
are logged once per payload.

``GET /healthz`` (liveness), ``GET /readyz`` (Temporal reachable),
``GET /metrics`` (Prometheus: requests by route and status, latencies, alerts
by outcome), ``/openapi.json`` and ``/docs`` need no token.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal, get_args

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ValidationError
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.service import RPCError

# pydantic needs typing_extensions' TypedDict before Python 3.12 (it reads its schema).
from typing_extensions import TypedDict

from gpu_remediation.catalog import ALERT_FAULT_CLASS_LABEL
from triggers.alerts import (
    MappedAlert,
    ReceivedPayload,
    RefusedAlert,
    WebhookPayload,
    map_alerts,
    payload_problems,
    refused_alerts,
)
from triggers.metrics import ReceiverMetrics, RequestMetricsMiddleware
from triggers.report_outbox import backoff_delay
from triggers.starter import IncidentStarter, TemporalUnavailableError, is_invalid, is_transient

ALERTS_PATH = "/v1/alerts"
HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"
METRICS_PATH = "/metrics"

MIN_TOKEN_LENGTH = 16
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_IN_FLIGHT = 64
DEFAULT_DELIVERY_TIMEOUT = 10.0
DEFAULT_DELIVERY_ATTEMPTS = 3
"""Tries of one report within a request when Temporal fails transiently."""
RETRY_BACKOFF_INITIAL = 0.1
"""Seconds before the second try (doubling after each further failure)."""
RETRY_BACKOFF_MAX = 1.0
"""Longest pause between two tries within a request, seconds."""
DEFAULT_DEDUP_SIZE = 100_000
DEFAULT_DEDUP_TTL = 300.0
READY_TIMEOUT = timedelta(seconds=2)
_MAX_REMEMBERED_NODES = 100_000


log = logging.getLogger("gpu_remediation.receiver")

# Module level: FastAPI resolves the (postponed) annotations from module globals.
_BEARER = HTTPBearer(
    auto_error=False, description="The receiver's token (docs/getting-started.md, 'On Kubernetes')."
)
BearerCredentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)]

AlertOutcome = Literal[
    "delivered", "duplicate", "no_incident", "unmapped", "unknown_node", "refused"
]


class AlertResult(TypedDict):
    """What became of one alert of the payload."""

    index: int
    fingerprint: str
    alertname: str | None
    status: Literal["firing", "resolved"] | None
    """None for a refused alert whose status is not valid."""
    outcome: AlertOutcome
    node: str | None
    workflow_id: str | None
    detail: str


class ReceiveResult(TypedDict):
    """The answer to a delivered payload: counts, then one result per alert."""

    received: int
    delivered: int
    duplicates: int
    no_incident: int
    unmapped: int
    unknown_node: int
    refused: int
    truncated_alerts: int
    results: list[AlertResult]


class Problem(BaseModel):
    """An error answer, naming the problem(s)."""

    detail: str
    problems: list[str] = []


class Readiness(BaseModel):
    """The readiness answer."""

    ready: bool
    detail: str


class RecentDeliveries:
    """Collapses duplicate reports before they cost a Temporal call.

    Concurrent duplicates wait for the one delivery in flight; a report
    delivered less than ``ttl`` seconds ago is answered from a bounded LRU
    memory. It only saves calls: the node workflow drops repeated report ids
    too, so a restart or an evicted entry changes nothing but cost.

    Args:
        size: Reports remembered (0 disables the memory and the collapsing).
        ttl: Seconds a delivered report is remembered.
        clock: Monotonic clock (seconds).
    """

    def __init__(self, size: int, ttl: float, clock: Callable[[], float]) -> None:
        self._size = size
        self._ttl = ttl
        self._clock = clock
        self._done: OrderedDict[str, tuple[float, AlertOutcome]] = OrderedDict()
        self._pending: dict[str, asyncio.Future[AlertOutcome]] = {}

    @property
    def enabled(self) -> bool:
        """Whether duplicates are collapsed at all."""
        return self._size > 0

    def recent(self, key: str) -> AlertOutcome | None:
        """The outcome of ``key`` if it was delivered within the TTL."""
        hit = self._done.get(key)
        if hit is None:
            return None
        if hit[0] <= self._clock():
            del self._done[key]
            return None
        return hit[1]

    async def once(
        self, key: str, send: Callable[[], Awaitable[AlertOutcome]]
    ) -> tuple[AlertOutcome, bool]:
        """Deliver ``key`` once; return its outcome and whether this call was a duplicate."""
        if not self.enabled:
            return await send(), False
        known = self.recent(key)
        if known is not None:
            return known, True
        pending = self._pending.get(key)
        if pending is not None:
            return await asyncio.shield(pending), True
        future: asyncio.Future[AlertOutcome] = asyncio.get_running_loop().create_future()
        # Waiters may be gone by the time it fails: do not warn about it.
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._pending[key] = future
        try:
            outcome = await send()
        except asyncio.CancelledError:
            future.set_exception(TemporalUnavailableError("delivery interrupted"))
            raise
        except BaseException as err:
            future.set_exception(err)
            raise
        finally:
            del self._pending[key]
        future.set_result(outcome)
        if outcome == "delivered":
            self._done[key] = (self._clock() + self._ttl, outcome)
            self._done.move_to_end(key)
            while len(self._done) > self._size:
                self._done.popitem(last=False)
        return outcome, False


class AlertDelivery:
    """Delivers mapped alerts: evidence for firing ones, clearing evidence for resolved ones.

    Args:
        starter: Starts and feeds the node incidents.
        client: The starter's Temporal client (signals to open incidents, readiness).
        max_in_flight: Temporal calls in flight at once, over all requests.
        dedup: The memory of recent deliveries.
        attempts: Tries of one report when Temporal fails transiently (at least 1).
    """

    def __init__(
        self,
        starter: IncidentStarter,
        client: Client,
        max_in_flight: int,
        dedup: RecentDeliveries,
        attempts: int = DEFAULT_DELIVERY_ATTEMPTS,
    ) -> None:
        self._starter = starter
        self._client = client
        self._gate = asyncio.Semaphore(max_in_flight)
        self._dedup = dedup
        self._attempts = attempts
        self._workflow_ids: dict[str, str] = {}

    def _workflow_id(self, node: str) -> str:
        # Validating the names again for each of a storm's duplicates costs more
        # than the rest of their handling: remember them (a cluster's node count).
        known = self._workflow_ids.get(node)
        if known is None:
            if len(self._workflow_ids) >= _MAX_REMEMBERED_NODES:
                self._workflow_ids.clear()
            known = self._workflow_ids[node] = self._starter.workflow_id(node)
        return known

    async def deliver_all(self, mapped: Sequence[MappedAlert]) -> list[AlertResult]:
        """Deliver every alert that names a node; fail fast on the first Temporal error.

        A report Temporal fails transiently is tried again (``attempts`` in
        all) before it counts as an error. A report that is invalid (its
        evidence fails validation, or Temporal answers INVALID_ARGUMENT) is no
        error: its alert's outcome is ``refused`` and the others go on.

        Returns:
            One result per alert of ``mapped``, in payload order.

        Raises:
            TemporalUnavailableError: If Temporal could not take a report now.
            temporalio.service.RPCError: If Temporal refused a report otherwise.
        """
        # By position in ``mapped`` (refused alerts are not in it, so an alert's
        # index in the payload may be larger).
        results: list[AlertResult | None] = [None] * len(mapped)
        first: dict[str, asyncio.Task[Delivered]] = {}
        waiting: list[tuple[int, MappedAlert, str, asyncio.Task[Delivered], bool]] = []
        try:
            async with asyncio.TaskGroup() as group:
                for position, m in enumerate(mapped):
                    if m.lookup.node is None:
                        assert m.lookup.problem is not None
                        results[position] = _result(m, m.lookup.problem, detail=m.lookup.detail)
                        continue
                    workflow_id = self._workflow_id(m.lookup.node)
                    key = f"{workflow_id}|{m.report_id}"
                    known = self._dedup.recent(key) if self._dedup.enabled else None
                    if known is not None:
                        results[position] = _result(m, "duplicate", workflow_id)
                        continue
                    task = first.get(key) if self._dedup.enabled else None
                    duplicate = task is not None
                    if task is None:
                        task = group.create_task(self._deliver_one(key, m))
                        first[key] = task
                    waiting.append((position, m, workflow_id, task, duplicate))
        except BaseExceptionGroup as group_error:
            raise _most_telling(group_error) from None
        for position, m, workflow_id, task, duplicate in waiting:
            outcome, was_duplicate, detail = task.result()
            if outcome != "refused" and (duplicate or was_duplicate):
                outcome = "duplicate"
            results[position] = _result(m, outcome, workflow_id, detail)
        return [r for r in results if r is not None]

    async def _deliver_one(self, key: str, m: MappedAlert) -> Delivered:
        """Deliver one alert once (see :class:`RecentDeliveries`); an invalid report is refused."""
        try:
            outcome, duplicate = await self._dedup.once(key, self._sender(m))
        except Exception as err:
            if not is_invalid(err):
                raise
            return "refused", False, _invalid_reason(err)
        return outcome, duplicate, ""

    def _sender(self, m: MappedAlert) -> Callable[[], Awaitable[AlertOutcome]]:
        async def send() -> AlertOutcome:
            attempt = 1
            while True:
                try:
                    async with self._gate:
                        return await self._send(m)
                except Exception as err:
                    if attempt >= self._attempts or not is_transient(err):
                        raise
                    failure = err
                # Outside the gate: a backing-off report holds no Temporal slot.
                delay = backoff_delay(attempt, RETRY_BACKOFF_INITIAL, RETRY_BACKOFF_MAX)
                attempt += 1
                log.info(
                    "alert %s: %s; try %d of %d in %.1fs",
                    m.alert.fingerprint,
                    failure,
                    attempt,
                    self._attempts,
                    delay,
                    extra={"node": m.lookup.node},
                )
                await asyncio.sleep(delay)

        return send

    async def _send(self, m: MappedAlert) -> AlertOutcome:
        assert m.lookup.node is not None
        if m.alert.status == "firing":
            await self._starter.report(m.lookup.node, [m.evidence()], report_id=m.report_id)
            return "delivered"
        return await self._clear(m.lookup.node, m)

    async def _clear(self, node: str, m: MappedAlert) -> AlertOutcome:
        # A resolution must not open an incident: only the open one hears of it.
        delivered = await self._starter.report_recovery(node, [m.evidence()], report_id=m.report_id)
        return "delivered" if delivered else "no_incident"

    async def ready(self) -> Readiness:
        """Whether Temporal answers (a cheap call with a short timeout)."""
        try:
            await self._client.workflow_service.describe_namespace(
                DescribeNamespaceRequest(namespace=self._client.namespace),
                retry=False,
                timeout=READY_TIMEOUT,
            )
        except RPCError as err:
            return Readiness(ready=False, detail=f"Temporal not reachable: {err.message}")
        return Readiness(
            ready=True, detail=f"Temporal namespace {self._client.namespace} reachable"
        )


Delivered = tuple[AlertOutcome, bool, str]
"""An alert's outcome, whether it was a duplicate, and why it was refused ("" otherwise)."""


def _result(
    m: MappedAlert, outcome: AlertOutcome, workflow_id: str | None = None, detail: str = ""
) -> AlertResult:
    # Plain dicts: a storm answers thousands of them, and models cost more.
    return {
        "index": m.index,
        "fingerprint": m.alert.fingerprint,
        "alertname": m.alert.labels.get("alertname"),
        "status": m.alert.status,
        "outcome": outcome,
        "node": m.lookup.node,
        "workflow_id": workflow_id,
        "detail": detail,
    }


def _refused_result(index: int, refused: RefusedAlert) -> AlertResult:
    return {
        "index": index,
        "fingerprint": refused.fingerprint,
        "alertname": refused.alertname or None,
        "status": refused.status,
        "outcome": "refused",
        "node": None,
        "workflow_id": None,
        "detail": refused.reason,
    }


def _invalid_reason(err: Exception) -> str:
    """Why a report was refused as invalid, in one bounded line."""
    if isinstance(err, RPCError):
        return f"Temporal refused the report as invalid ({err.status.name}): {err.message[:512]}"
    if isinstance(err, ValidationError):
        return "invalid report: " + "; ".join(payload_problems(err, limit=5))
    return f"invalid report: {str(err)[:512]}"


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found: list[BaseException] = []
    for err in group.exceptions:
        found += _leaves(err) if isinstance(err, BaseExceptionGroup) else [err]
    return found


def _most_telling(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The error to answer with: transient first, then other refusals, else the group."""
    leaves = _leaves(group)
    for err in leaves:
        if is_transient(err):
            return err
    for err in leaves:
        if isinstance(err, RPCError):
            return err
    return group


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise HTTPException(413, f"body larger than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPException(413, f"body larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _problem(
    status: int, detail: str, problems: Sequence[str] = (), **headers: str
) -> JSONResponse:
    body = Problem(detail=detail, problems=list(problems)).model_dump()
    return JSONResponse(body, status_code=status, headers=headers or None)


def _token_digest(token: str) -> bytes:
    # Comparing fixed-length digests keeps even the token's length out of timing.
    return hashlib.sha256(token.encode()).digest()


def _log_distrust(mapped: Sequence[MappedAlert]) -> None:
    """Log, once per payload, the alert fields the receiver did not take at their word."""
    skewed = [m for m in mapped if m.skew is not None]
    if skewed:
        worst = max(skewed, key=lambda m: m.skew or timedelta(0))
        log.warning(
            "%d alert(s) dated after the receiver's clock, observed now instead "
            "(largest skew %s, alert %s, node %s)",
            len(skewed),
            worst.skew,
            worst.alert.fingerprint,
            worst.lookup.node,
        )
    ignored = [m for m in mapped if m.ignored_fault_class]
    if ignored:
        first = ignored[0]
        log.warning(
            "%d alert(s) carried a fault_class label the policy does not trust "
            "(triggers.trust_alert_fault_class), classified without it "
            "(e.g. alert %s, node %s, fault_class=%.64r)",
            len(ignored),
            first.alert.fingerprint,
            first.lookup.node,
            first.alert.labels.get(ALERT_FAULT_CLASS_LABEL, ""),
        )


def _summary(payload: ReceivedPayload, results: Sequence[AlertResult]) -> ReceiveResult:
    counts = dict.fromkeys(get_args(AlertOutcome), 0)
    for r in results:
        counts[r["outcome"]] += 1
    return {
        "received": len(results),
        "delivered": counts["delivered"],
        "duplicates": counts["duplicate"],
        "no_incident": counts["no_incident"],
        "unmapped": counts["unmapped"],
        "unknown_node": counts["unknown_node"],
        "refused": counts["refused"],
        "truncated_alerts": payload.truncated_alerts,
        "results": list(results),
    }


def create_app(
    starter: IncidentStarter,
    token: str,
    *,
    client: Client,
    node_labels: Sequence[str] | None = None,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    delivery_timeout: float = DEFAULT_DELIVERY_TIMEOUT,
    delivery_attempts: int = DEFAULT_DELIVERY_ATTEMPTS,
    dedup_size: int = DEFAULT_DEDUP_SIZE,
    dedup_ttl: float = DEFAULT_DEDUP_TTL,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    metrics: ReceiverMetrics | None = None,
) -> FastAPI:
    """Build the receiver's ASGI app (serve it with uvicorn, one worker).

    Args:
        starter: Starts and feeds the node incidents.
        token: The bearer token Alertmanager sends (at least 16 characters).
        client: The starter's Temporal client.
        node_labels: Alert labels that may name the node, in order; default the
            policy's ``triggers.alert_node_labels``.
        max_in_flight: Temporal calls in flight at once, over all requests.
        delivery_timeout: Seconds a request may spend on Temporal before it is
            answered 503 (Alertmanager retries; nothing is delivered twice).
        delivery_attempts: Tries of one report within a request when Temporal
            fails transiently (unavailable, INTERNAL, a timeout...), 0.1 s,
            then 0.2 s... apart (at most 1 s), all within ``delivery_timeout``;
            still failing, the request is answered 503 and Alertmanager retries.
        dedup_size: Recent deliveries remembered to answer duplicates without a
            Temporal call (0: every alert is sent; the workflow still dedups).
        dedup_ttl: Seconds a delivery is remembered.
        max_body_bytes: Larger bodies are refused with 413 (what bounds the
            memory and time one request may cost; alerts are validated one by one).
        metrics: Where requests and alerts are counted (served on ``/metrics``);
            a fresh registry by default.

    Raises:
        ValueError: If the token is too short or a limit is not positive.
    """
    if len(token) < MIN_TOKEN_LENGTH:
        raise ValueError(f"the receiver token must have at least {MIN_TOKEN_LENGTH} characters")
    if (
        max_in_flight < 1
        or delivery_timeout <= 0
        or delivery_attempts < 1
        or max_body_bytes < 1
        or dedup_size < 0
    ):
        raise ValueError(
            "max_in_flight, delivery_timeout, delivery_attempts and max_body_bytes must be "
            "positive, dedup_size at least 0"
        )
    labels = list(node_labels or starter.policy.triggers.alert_node_labels)
    trust_fault_class = starter.policy.triggers.trust_alert_fault_class
    expected = _token_digest(token)
    dedup = RecentDeliveries(dedup_size, dedup_ttl, time.monotonic)
    delivery = AlertDelivery(starter, client, max_in_flight, dedup, delivery_attempts)

    def authorize(credentials: BearerCredentials) -> None:
        if credentials is None or not hmac.compare_digest(
            _token_digest(credentials.credentials), expected
        ):
            raise HTTPException(
                401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"}
            )

    app = FastAPI(
        title="gpu-remediation Alertmanager receiver",
        description=__doc__ or "",
        version="1",
    )
    counted = metrics or ReceiverMetrics()
    app.state.metrics = counted
    app.add_middleware(
        RequestMetricsMiddleware,
        metrics=counted,
        routes=(ALERTS_PATH, HEALTH_PATH, READY_PATH, METRICS_PATH),
    )

    @app.post(
        ALERTS_PATH,
        response_model=ReceiveResult,
        dependencies=[Depends(authorize)],
        summary="Receive an Alertmanager notification (webhook version 4)",
        responses={
            401: {"model": Problem, "description": "Missing or wrong bearer token."},
            413: {"model": Problem, "description": "Body over the size limit."},
            422: {
                "model": Problem,
                "description": "Not a valid version 4 payload (its envelope: an invalid "
                "alert is refused alone, in a 200 answer).",
            },
            502: {"model": Problem, "description": "Temporal refused a report; retry."},
            503: {"model": Problem, "description": "Temporal unavailable; retry."},
        },
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/WebhookPayload"}}
                },
            }
        },
    )
    async def receive(request: Request) -> Any:
        # The body is read and validated here rather than by FastAPI, so that a
        # request without the token is refused before its body is read, a bad
        # envelope gets a 422 naming its problems by path, and a bad alert is
        # refused alone (ReceivedPayload validates each alert on its own).
        body = await _read_body(request, max_body_bytes)
        try:
            payload = ReceivedPayload.model_validate_json(body)
        except ValidationError as err:
            problems = payload_problems(err)
            log.warning("refused an invalid payload: %s", "; ".join(problems))
            return _problem(422, "invalid Alertmanager webhook payload (version 4)", problems)
        if payload.truncated_alerts:
            log.warning(
                "Alertmanager truncated %d alerts of group %s (max_alerts)",
                payload.truncated_alerts,
                payload.group_key,
            )
        mapped = map_alerts(
            payload, labels, received_at=datetime.now(UTC), trust_fault_class=trust_fault_class
        )
        _log_distrust(mapped)
        try:
            async with asyncio.timeout(delivery_timeout):
                delivered = await delivery.deliver_all(mapped)
        except TimeoutError:
            log.warning("Temporal did not take the reports within %ss", delivery_timeout)
            detail = f"Temporal did not answer within {delivery_timeout:g}s; retry"
            return _problem(503, detail, **{"Retry-After": "10"})
        except Exception as err:
            if is_transient(err):
                log.warning("Temporal unavailable: %s", err)
                detail = str(err) if isinstance(err, TemporalUnavailableError) else repr(err)
                return _problem(503, f"{detail}; retry", **{"Retry-After": "10"})
            if isinstance(err, RPCError):
                log.error("Temporal refused a report: %s (%s)", err.message, err.status)
                return _problem(502, f"Temporal refused a report: {err.message}")
            raise
        refused = [_refused_result(index, alert) for index, alert in refused_alerts(payload)]
        results = sorted([*delivered, *refused], key=lambda r: r["index"]) if refused else delivered
        summary = _summary(payload, results)
        for r in results:
            counted.alerts.labels(r["outcome"]).inc()
            if r["outcome"] in ("unmapped", "unknown_node", "refused"):
                log.warning(
                    "alert %s (index %d%s): %s%s",
                    r["fingerprint"] or "without a fingerprint",
                    r["index"],
                    f", {r['alertname']:.128}" if r["alertname"] else "",
                    "refused, " if r["outcome"] == "refused" else "",
                    r["detail"],
                    extra={"node": r["node"], "workflow_id": r["workflow_id"]},
                )
            elif log.isEnabledFor(logging.DEBUG):
                log.debug(
                    "alert %s (%s): %s",
                    r["fingerprint"],
                    r["status"],
                    r["outcome"],
                    extra={"node": r["node"], "workflow_id": r["workflow_id"]},
                )
        log.info(
            "receiver %s: %d alerts, %d delivered, %d duplicates, %d without incident, "
            "%d unmapped, %d unknown nodes, %d refused",
            payload.receiver,
            summary["received"],
            summary["delivered"],
            summary["duplicates"],
            summary["no_incident"],
            summary["unmapped"],
            summary["unknown_node"],
            summary["refused"],
        )
        # Serialised here: FastAPI would validate the thousands of results again.
        return Response(json.dumps(summary), media_type="application/json")

    @app.get(METRICS_PATH, summary="Prometheus metrics", include_in_schema=False)
    async def prometheus_metrics() -> Response:
        return Response(counted.exposition(), media_type="text/plain; version=0.0.4")

    @app.get(HEALTH_PATH, summary="Liveness: the process serves requests")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get(
        READY_PATH,
        response_model=Readiness,
        summary="Readiness: Temporal is reachable",
        responses={503: {"model": Readiness, "description": "Temporal not reachable."}},
    )
    async def readyz() -> Any:
        readiness = await delivery.ready()
        if not readiness.ready:
            return JSONResponse(readiness.model_dump(), status_code=503)
        return readiness

    _add_payload_schema(app)
    return app


def _add_payload_schema(app: FastAPI) -> None:
    """Publish the webhook payload's schema (the endpoint parses its body itself)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = generate()
        payload = WebhookPayload.model_json_schema(ref_template="#/components/schemas/{model}")
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components.update(payload.pop("$defs", {}))
        components["WebhookPayload"] = payload
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
