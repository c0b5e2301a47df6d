"""Fault injection and the request log.

A :class:`FaultRule` matches requests by method, a regular expression searched in the
path and, optionally, one searched in the raw query string (to single out watches with
``watch=``), and then, for a bounded number of requests (``times``) or
with a seeded probability, adds latency, answers with an error status (429 with an
optional Retry-After, 500, 503, ...), or drops the connection without a response.
"""

from __future__ import annotations

import itertools
import random
import re
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

JSON = dict[str, Any]

_REASONS = {
    429: "TooManyRequests",
    500: "InternalError",
    502: "BadGateway",
    503: "ServiceUnavailable",
    504: "Timeout",
    409: "Conflict",
    403: "Forbidden",
    404: "NotFound",
}


def reason_for(code: int) -> str:
    """The Status reason the real server uses for ``code`` (Unknown otherwise)."""
    return _REASONS.get(code, "Unknown")


@dataclass
class FaultRule:
    """One injected fault.

    Attributes:
        path: Regular expression searched in the request path (``re.search``).
        method: HTTP method to match, or ``*`` for any.
        query: Regular expression searched in the raw query string; None matches any.
        status: Error status to answer with; None for latency-only rules.
        retry_after: Seconds for a ``Retry-After`` header (with 429/503).
        message: Message of the Status body.
        drop: Close the connection without sending a response.
        latency: Seconds to wait before handling (or failing) the request.
        times: How many matching requests it applies to; None means unlimited.
        probability: Chance that a matching request is affected (seeded RNG).
        id: Assigned when the rule is added.
        hits: How many requests it affected so far.
    """

    path: str
    method: str = "*"
    query: str | None = None
    status: int | None = None
    retry_after: int | None = None
    message: str = "injected fault"
    drop: bool = False
    latency: float = 0.0
    times: int | None = None
    probability: float = 1.0
    id: int = 0
    hits: int = 0
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)
    _query_regex: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._regex = re.compile(self.path)
        self._query_regex = re.compile(self.query) if self.query is not None else None
        if self.status is None and not self.drop and self.latency <= 0:
            raise ValueError("a fault rule needs a status, drop=True or a latency")
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError("probability must be within [0, 1]")

    def matches(self, method: str, path: str, query: str = "") -> bool:
        """Whether the rule applies to this request (ignoring budget and chance)."""
        if self.method != "*" and self.method.upper() != method:
            return False
        if self._query_regex is not None and not self._query_regex.search(query):
            return False
        return bool(self._regex.search(path))

    def to_json(self) -> JSON:
        """A JSON view (for the admin endpoint)."""
        data = asdict(self)
        data.pop("_regex", None)
        data.pop("_query_regex", None)
        return data

    @classmethod
    def from_json(cls, data: JSON) -> FaultRule:
        """Build a rule from the admin endpoint's JSON body.

        Raises:
            ValueError: for unknown fields or invalid values.
        """
        allowed = {
            "path",
            "method",
            "query",
            "status",
            "retry_after",
            "message",
            "drop",
            "latency",
            "times",
            "probability",
        }
        unknown = set(data) - allowed
        if unknown:
            raise ValueError(f"unknown fault fields: {sorted(unknown)}")
        if "path" not in data:
            raise ValueError("a fault rule needs a path regex")
        return cls(**data)


@dataclass(frozen=True)
class Decision:
    """What to do with one request: wait, then answer normally, fail, or drop."""

    latency: float = 0.0
    status: int | None = None
    retry_after: int | None = None
    message: str = ""
    drop: bool = False
    rule_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class RequestRecord:
    """One served request as seen by the emulator."""

    method: str
    path: str
    query: str
    status: int | None  # None when the connection was dropped
    fault: bool
    started: float
    duration: float


class FaultInjector:
    """Thread-safe set of fault rules plus the request log.

    Args:
        seed: Seed of the RNG deciding probabilistic faults (reproducible runs).
        max_log: How many request records to keep.
    """

    def __init__(self, seed: int = 0, max_log: int = 10_000) -> None:
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []
        self._ids = itertools.count(1)
        self._seed = seed
        self._rng = random.Random(seed)
        self._log: list[RequestRecord] = []
        self._max_log = max_log

    def add(self, rule: FaultRule) -> FaultRule:
        """Register a rule (evaluated in the order added) and return it with its id."""
        with self._lock:
            rule.id = next(self._ids)
            self._rules.append(rule)
            return rule

    def inject(
        self,
        path: str,
        *,
        method: str = "*",
        query: str | None = None,
        status: int | None = None,
        times: int | None = None,
        probability: float = 1.0,
        retry_after: int | None = None,
        latency: float = 0.0,
        drop: bool = False,
        message: str = "injected fault",
    ) -> FaultRule:
        """Shortcut for ``add(FaultRule(...))``."""
        return self.add(
            FaultRule(
                path=path,
                method=method,
                query=query,
                status=status,
                times=times,
                probability=probability,
                retry_after=retry_after,
                latency=latency,
                drop=drop,
                message=message,
            )
        )

    def remove(self, rule_id: int) -> bool:
        """Remove one rule; returns whether it existed."""
        with self._lock:
            before = len(self._rules)
            self._rules = [r for r in self._rules if r.id != rule_id]
            return len(self._rules) != before

    def rules(self) -> list[FaultRule]:
        """The active rules."""
        with self._lock:
            return list(self._rules)

    def clear(self) -> None:
        """Remove all rules and reseed the RNG."""
        with self._lock:
            self._rules = []
            self._rng = random.Random(self._seed)

    def decide(self, method: str, path: str, query: str = "") -> Decision:
        """Consume the budget of matching rules and return the combined decision.

        Latencies of every firing rule add up; the first firing error or drop wins.
        """
        latency = 0.0
        fired: list[int] = []
        with self._lock:
            for rule in self._rules:
                if not rule.matches(method, path, query):
                    continue
                if rule.times is not None and rule.hits >= rule.times:
                    continue
                if rule.probability < 1.0 and self._rng.random() >= rule.probability:
                    continue
                rule.hits += 1
                fired.append(rule.id)
                latency += rule.latency
                if rule.drop or rule.status is not None:
                    return Decision(
                        latency=latency,
                        status=rule.status,
                        retry_after=rule.retry_after,
                        message=rule.message,
                        drop=rule.drop,
                        rule_ids=tuple(fired),
                    )
        return Decision(latency=latency, rule_ids=tuple(fired))

    def record(self, record: RequestRecord) -> None:
        """Append to the request log (bounded)."""
        with self._lock:
            self._log.append(record)
            if len(self._log) > self._max_log:
                del self._log[: len(self._log) - self._max_log]

    def requests(self) -> list[RequestRecord]:
        """A copy of the request log, oldest first."""
        with self._lock:
            return list(self._log)

    def clear_requests(self) -> None:
        """Empty the request log."""
        with self._lock:
            self._log = []


def now() -> float:
    """Monotonic time for request durations."""
    return time.monotonic()
