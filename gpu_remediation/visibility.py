"""Listing and counting workflow runs, on a real server or on the time-skipping test server.

The project finds runs through Temporal's visibility: a node's earlier incidents,
a pool's recent replacements, a cluster's open incidents and admissions. The
time-skipping test server, which the what-if comparison runs on, implements
neither ``ListWorkflowExecutions`` nor ``CountWorkflowExecutions``. So callers
go through :class:`Visibility`: :class:`ServerVisibility` asks the server,
:class:`ListingVisibility` lists every run with the older
``ListOpenWorkflowExecutions`` and ``ListClosedWorkflowExecutions``, describes
them and evaluates the query itself (:func:`parse_query`), for exactly the
subset of the query language this project builds.

The subset (anything else is refused with a ``ValueError`` naming the part):

* comparisons joined by ``AND`` (no ``OR``, ``NOT``, parentheses, ``ORDER BY``);
* ``Field = 'v'``, ``Field != 'v'`` and ``Field STARTS_WITH 'v'`` on
  ``WorkflowId``, ``WorkflowType`` and the custom Keyword search attributes
  (:data:`~gpu_remediation.search_attributes.ALL_SEARCH_ATTRIBUTES`);
* ``ExecutionStatus = 'v'`` and ``ExecutionStatus != 'v'`` with ``v`` one of
  ``Running``, ``Completed``, ``Failed``, ``Canceled``, ``Terminated``,
  ``ContinuedAsNew``, ``TimedOut``;
* ``StartTime >= 't'`` and ``CloseTime >= 't'`` with ``t`` an RFC 3339
  timestamp with an offset (``2026-01-02T03:04:05.000000Z``).

Semantics are those of the dev server's SQL visibility: an unset search
attribute, like a running run's close time, is SQL ``NULL`` and matches no
comparison at all, ``!=`` included (Elasticsearch visibility would match
``!=`` there; no query of this project depends on the difference). Field names
are case-sensitive, the keywords ``AND`` and ``STARTS_WITH`` are not. Strings
are quoted with ``'`` (or ``"``); a quote inside is doubled or escaped with a
backslash, as MySQL reads them (a backslash before ``n``, ``t``, ``r``, ``b``, ``0``
or ``Z`` makes that control character, before any other character that character).
"""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
import functools
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Protocol, TypeVar

from temporalio.api.workflow.v1 import WorkflowExecutionInfo
from temporalio.api.workflowservice.v1 import (
    ListClosedWorkflowExecutionsRequest,
    ListClosedWorkflowExecutionsResponse,
    ListOpenWorkflowExecutionsRequest,
    ListOpenWorkflowExecutionsResponse,
)
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.common import (
    SearchAttributeIndexedValueType,
    SearchAttributeKey,
    TypedSearchAttributes,
)
from temporalio.service import RPCError, RPCStatusCode

from gpu_remediation.search_attributes import ALL_SEARCH_ATTRIBUTES

__all__ = [
    "Comparison",
    "Execution",
    "ListingVisibility",
    "Operator",
    "ServerVisibility",
    "Visibility",
    "VisibilityQuery",
    "listing_retried",
    "newest_first",
    "parse_query",
]

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_Listed = ListOpenWorkflowExecutionsResponse | ListClosedWorkflowExecutionsResponse

LISTING_ATTEMPTS = 5
"""Tries of one test-server listing. That server lists runs by walking a map that a
start writes to; a start meanwhile fails the listing (``ConcurrentModificationException``
in ``TestWorkflowStoreImpl.listWorkflows``, answered as UNKNOWN "Application error
processing RPC"). A listing is a read, so it is tried again a few milliseconds later."""


async def listing_retried(call: Callable[[], Awaitable[_T]]) -> _T:
    """``call`` (a test-server listing), tried again when the server's walk met a write.

    Raises:
        RPCError: The listing's own error, or UNKNOWN ``LISTING_ATTEMPTS`` times in a row.
    """
    for attempt in range(1, LISTING_ATTEMPTS + 1):
        try:
            return await call()
        except RPCError as err:
            if err.status != RPCStatusCode.UNKNOWN or attempt == LISTING_ATTEMPTS:
                raise
            log.info("listing failed on the test server (%s): trying again", err)
            # Real milliseconds, not the model's time: a start under way finishes.
            await asyncio.sleep(0.01 * attempt)
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Execution:
    """One workflow run as visibility lists it: the fields this project reads.

    Attributes:
        id: Workflow id.
        run_id: Run id.
        workflow_type: Workflow type name.
        status: The run's status (``None`` if the server sent none).
        start_time: When the run started.
        close_time: When the run closed; ``None`` while it runs.
        search_attributes: The run's search attributes.
    """

    id: str
    run_id: str
    workflow_type: str
    status: WorkflowExecutionStatus | None
    start_time: datetime
    close_time: datetime | None
    search_attributes: TypedSearchAttributes

    @classmethod
    def of(cls, execution: WorkflowExecution) -> Execution:
        """The run of an SDK listing row or description (a ``WorkflowExecutionDescription``)."""
        return cls(
            id=execution.id,
            run_id=execution.run_id,
            workflow_type=execution.workflow_type,
            status=execution.status,
            start_time=execution.start_time,
            close_time=execution.close_time,
            search_attributes=execution.typed_search_attributes,
        )


class Visibility(Protocol):
    """Lists and counts workflow runs matching a visibility query."""

    def list(
        self, query: str, *, limit: int | None = None, rpc_timeout: timedelta | None = None
    ) -> AsyncIterator[Execution]:
        """The runs matching ``query``, newest first, at most ``limit`` of them.

        Args:
            query: A visibility query (empty: every run).
            limit: Most runs to return (``None``: all).
            rpc_timeout: Bound of each call to the server.
        """
        ...

    async def count(self, query: str, *, rpc_timeout: timedelta | None = None) -> int:
        """The number of runs matching ``query``.

        Args:
            query: A visibility query (empty: every run).
            rpc_timeout: Bound of each call to the server.
        """
        ...


class ServerVisibility:
    """Visibility answered by the server (``ListWorkflowExecutions``, ``CountWorkflowExecutions``).

    Args:
        client: The Temporal client whose namespace is searched.
    """

    def __init__(self, client: Client) -> None:
        self._client = client

    async def list(
        self, query: str, *, limit: int | None = None, rpc_timeout: timedelta | None = None
    ) -> AsyncIterator[Execution]:
        """The runs matching ``query`` in the server's order, at most ``limit`` of them.

        Args:
            query: A visibility query (empty: every run).
            limit: Most runs to return (``None``: all).
            rpc_timeout: Bound of each page's call.

        Yields:
            Each matching run.
        """
        async for execution in self._client.list_workflows(
            query, limit=limit, rpc_timeout=rpc_timeout
        ):
            yield Execution.of(execution)

    async def count(self, query: str, *, rpc_timeout: timedelta | None = None) -> int:
        """The number of runs matching ``query``, as the server counts them.

        Args:
            query: A visibility query (empty: every run).
            rpc_timeout: Bound of the call.
        """
        counted = await self._client.count_workflows(query, rpc_timeout=rpc_timeout)
        return counted.count


class ListingVisibility:
    """Visibility for the time-skipping test server, which has no visibility queries.

    Each call lists every run with ``ListOpenWorkflowExecutions`` and then
    ``ListClosedWorkflowExecutions``, page after page (the test server sends
    one page of all; in that order, so a run closing between the two is seen at
    least once, and a run seen twice counts once), describes
    each run whose id, type and start time can match (a closed run only once:
    it never changes again; an open one every time) and evaluates the query
    (:func:`parse_query`) on the descriptions. A run that is gone when it is
    described (another namespace's, say: the test server lists them all) is
    left out. The cost grows with the number of runs on the server, so this is
    for test servers, not for production.

    Args:
        client: A client of the time-skipping test server; its namespace is
            the one described.
        keyword_attributes: The custom Keyword search attributes queries may name.
        describe_concurrency: Most describe calls in flight at once.
    """

    def __init__(
        self,
        client: Client,
        *,
        keyword_attributes: Iterable[SearchAttributeKey[str]] = ALL_SEARCH_ATTRIBUTES,
        describe_concurrency: int = 8,
    ) -> None:
        if describe_concurrency < 1:
            raise ValueError(f"describe_concurrency must be positive, not {describe_concurrency}")
        self._client = client
        self._keywords = _keyword_names(keyword_attributes)
        self._concurrency = describe_concurrency
        self._closed: dict[tuple[str, str], Execution] = {}

    async def list(
        self, query: str, *, limit: int | None = None, rpc_timeout: timedelta | None = None
    ) -> AsyncIterator[Execution]:
        """The runs matching ``query``, newest first (:func:`newest_first`), at most ``limit``.

        All runs are read and matched before the first is yielded.

        Args:
            query: A query in this module's subset (empty: every run).
            limit: Most runs to return (``None``: all).
            rpc_timeout: Bound of each listing and describe call.

        Yields:
            Each matching run.

        Raises:
            ValueError: If the query is outside the subset.
        """
        if limit is not None and limit < 0:
            raise ValueError(f"limit must not be negative, not {limit}")
        matches = newest_first(await self._matching(query, rpc_timeout))
        for execution in matches if limit is None else matches[:limit]:
            yield execution

    async def count(self, query: str, *, rpc_timeout: timedelta | None = None) -> int:
        """The number of runs matching ``query``.

        Args:
            query: A query in this module's subset (empty: every run).
            rpc_timeout: Bound of each listing and describe call.

        Raises:
            ValueError: If the query is outside the subset.
        """
        return len(await self._matching(query, rpc_timeout))

    async def _matching(
        self, query: str, rpc_timeout: timedelta | None
    ) -> builtins.list[Execution]:
        parsed = parse_query(query, keyword_attributes=self._keywords)
        listed = await self._listed(rpc_timeout)
        known: builtins.list[Execution] = []
        to_describe: builtins.list[tuple[str, str]] = []
        seen: set[tuple[str, str]] = set()
        for info in listed:
            key = (info.execution.workflow_id, info.execution.run_id)
            if key in seen:
                continue
            seen.add(key)
            cached = self._closed.get(key)
            if cached is not None:
                known.append(cached)
            elif parsed.may_match(
                workflow_id=key[0],
                workflow_type=info.type.name,
                start_time=info.start_time.ToDatetime(tzinfo=UTC),
            ):
                to_describe.append(key)
        gate = asyncio.Semaphore(self._concurrency)

        async def describe(key: tuple[str, str]) -> Execution | None:
            async with gate:
                return await self._describe(*key, rpc_timeout)

        described = await asyncio.gather(*(describe(key) for key in to_describe))
        known.extend(execution for execution in described if execution is not None)
        return [execution for execution in known if parsed.matches(execution)]

    async def _listed(self, rpc_timeout: timedelta | None) -> builtins.list[WorkflowExecutionInfo]:
        """Every open run, then every closed one (the test server sends one page of all)."""
        namespace = self._client.namespace
        service = self._client.workflow_service
        pages: tuple[Callable[[bytes], Awaitable[_Listed]], ...] = (
            lambda token: service.list_open_workflow_executions(
                ListOpenWorkflowExecutionsRequest(namespace=namespace, next_page_token=token),
                timeout=rpc_timeout,
            ),
            lambda token: service.list_closed_workflow_executions(
                ListClosedWorkflowExecutionsRequest(namespace=namespace, next_page_token=token),
                timeout=rpc_timeout,
            ),
        )
        rows: builtins.list[WorkflowExecutionInfo] = []
        for page in pages:  # open first, then closed (see the class)
            token = b""
            while True:
                listed = await listing_retried(functools.partial(page, token))
                rows.extend(listed.executions)
                token = listed.next_page_token
                if not token:
                    break
        return rows

    async def _describe(
        self, workflow_id: str, run_id: str, rpc_timeout: timedelta | None
    ) -> Execution | None:
        handle = self._client.get_workflow_handle(workflow_id, run_id=run_id)
        try:
            execution = Execution.of(await handle.describe(rpc_timeout=rpc_timeout))
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return None
            raise
        if execution.status not in (None, WorkflowExecutionStatus.RUNNING):
            self._closed[(workflow_id, run_id)] = execution
        return execution


def newest_first(executions: Iterable[Execution]) -> builtins.list[Execution]:
    """The runs in visibility's default order.

    As the SQL visibility stores index them (``COALESCE(close_time, max) DESC,
    start_time DESC, run_id``): running runs first, then by close time, newest
    first; ties by start time, newest first, then by run id.
    """
    ordered = sorted(executions, key=lambda e: e.run_id)
    ordered.sort(key=lambda e: e.start_time, reverse=True)
    ordered.sort(key=lambda e: (e.close_time is None, e.close_time or e.start_time), reverse=True)
    return ordered


class Operator(StrEnum):
    """The comparison operators of the subset."""

    EQ = "="
    NE = "!="
    GE = ">="
    STARTS_WITH = "STARTS_WITH"


_WORKFLOW_ID = "WorkflowId"
_WORKFLOW_TYPE = "WorkflowType"
_STATUS = "ExecutionStatus"
_START_TIME = "StartTime"
_CLOSE_TIME = "CloseTime"

_KEYWORD_OPERATORS = frozenset({Operator.EQ, Operator.NE, Operator.STARTS_WITH})
_FIELD_OPERATORS: dict[str, frozenset[Operator]] = {
    _WORKFLOW_ID: _KEYWORD_OPERATORS,
    _WORKFLOW_TYPE: _KEYWORD_OPERATORS,
    _STATUS: frozenset({Operator.EQ, Operator.NE}),
    _START_TIME: frozenset({Operator.GE}),
    _CLOSE_TIME: frozenset({Operator.GE}),
}
# The fields a listing row already has, which never change: a run that fails a
# comparison on them need not be described.
_LISTING_FIELDS = frozenset({_WORKFLOW_ID, _WORKFLOW_TYPE, _START_TIME})

_STATUSES: dict[str, WorkflowExecutionStatus] = {
    "Running": WorkflowExecutionStatus.RUNNING,
    "Completed": WorkflowExecutionStatus.COMPLETED,
    "Failed": WorkflowExecutionStatus.FAILED,
    "Canceled": WorkflowExecutionStatus.CANCELED,
    "Terminated": WorkflowExecutionStatus.TERMINATED,
    "ContinuedAsNew": WorkflowExecutionStatus.CONTINUED_AS_NEW,
    "TimedOut": WorkflowExecutionStatus.TIMED_OUT,
}

# RFC 3339 as Go's time.RFC3339Nano reads it (a date alone, or no offset, is refused).
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})")


@dataclass(frozen=True)
class Comparison:
    """One comparison of a query: ``field operator 'value'``.

    Attributes:
        field: A system field (``WorkflowId``, ``WorkflowType``, ``ExecutionStatus``,
            ``StartTime``, ``CloseTime``) or a custom Keyword search attribute.
        operator: The operator.
        value: The string literal, unquoted and unescaped.

    Raises:
        ValueError: If ``value`` is not a status (``ExecutionStatus``) or not an
            RFC 3339 timestamp with an offset (``StartTime``, ``CloseTime``).
    """

    field: str
    operator: Operator
    value: str
    _moment: datetime | None = dataclasses.field(
        default=None, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if self.field == _STATUS and self.value not in _STATUSES:
            raise ValueError(
                f"unknown ExecutionStatus {self.value!r} (statuses are {', '.join(_STATUSES)})"
            )
        if self.field in (_START_TIME, _CLOSE_TIME):
            if not _RFC3339.fullmatch(self.value):
                raise ValueError(
                    f"{self.field} takes an RFC 3339 timestamp with an offset "
                    f"(2026-01-02T03:04:05.000000Z), not {self.value!r}"
                )
            object.__setattr__(self, "_moment", datetime.fromisoformat(self.value))

    def matches(self, execution: Execution) -> bool:
        """Whether ``execution`` satisfies this comparison (unset values satisfy none)."""
        if self._moment is not None:
            moment = execution.start_time if self.field == _START_TIME else execution.close_time
            return moment is not None and moment >= self._moment
        if self.field == _STATUS:
            if execution.status is None:
                return False
            return (execution.status == _STATUSES[self.value]) == (self.operator == Operator.EQ)
        if self.field == _WORKFLOW_ID:
            return self._matches_keyword(execution.id)
        if self.field == _WORKFLOW_TYPE:
            return self._matches_keyword(execution.workflow_type)
        value = next(
            (p.value for p in execution.search_attributes if p.key.name == self.field), None
        )
        return isinstance(value, str) and self._matches_keyword(value)

    def _matches_keyword(self, actual: str) -> bool:
        if self.operator == Operator.EQ:
            return actual == self.value
        if self.operator == Operator.NE:
            return actual != self.value
        return actual.startswith(self.value)


@dataclass(frozen=True)
class VisibilityQuery:
    """A parsed query: the conjunction of its comparisons (none: every run matches).

    Attributes:
        comparisons: The comparisons, in the query's order.
    """

    comparisons: tuple[Comparison, ...]

    def matches(self, execution: Execution) -> bool:
        """Whether ``execution`` satisfies every comparison."""
        return all(comparison.matches(execution) for comparison in self.comparisons)

    def may_match(self, *, workflow_id: str, workflow_type: str, start_time: datetime) -> bool:
        """Whether a run with these (unchanging) fields may match, whatever its other fields.

        Args:
            workflow_id: The run's workflow id.
            workflow_type: The run's workflow type.
            start_time: When the run started.
        """
        listed = Execution(
            id=workflow_id,
            run_id="",
            workflow_type=workflow_type,
            status=None,
            start_time=start_time,
            close_time=None,
            search_attributes=TypedSearchAttributes.empty,
        )
        return all(
            comparison.matches(listed)
            for comparison in self.comparisons
            if comparison.field in _LISTING_FIELDS
        )


def parse_query(
    query: str,
    *,
    keyword_attributes: Iterable[SearchAttributeKey[str]] | Collection[str] = ALL_SEARCH_ATTRIBUTES,
) -> VisibilityQuery:
    """Parse a visibility query of this module's subset (see the module's docstring).

    Linear in the query's length.

    Args:
        query: The query; empty (or blank) matches every run.
        keyword_attributes: The custom Keyword search attributes the query may
            name (keys, or their names).

    Returns:
        The parsed query.

    Raises:
        ValueError: If the query is outside the subset (naming the part), names
            an unknown field or status, or has a malformed timestamp.
    """
    keywords = _keyword_names(keyword_attributes)
    # Read lazily: a query refused at its start costs nothing for the rest of it.
    tokens = _tokens(query)
    comparisons: builtins.list[Comparison] = []
    for token in tokens:
        field = token
        if comparisons:
            if not token.is_word("AND"):
                raise _unsupported(query, token, "only AND may join comparisons")
            field = _next_token(tokens, query)
        operator, value = _next_token(tokens, query), _next_token(tokens, query)
        comparisons.append(_comparison(query, field, operator, value, keywords))
    return VisibilityQuery(tuple(comparisons))


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # "word", "operator", "string" or "other" (a character outside the subset)
    text: str
    position: int

    def is_word(self, keyword: str) -> bool:
        return self.kind == "word" and self.text.upper() == keyword


# Backslash escapes as MySQL (and Temporal's SQL parser) decode them.
_ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a"}
_OPERATOR_CHARS = frozenset("=!<>")
_CLAUSE_WORDS = frozenset({"OR", "NOT", "ORDER", "GROUP", "BY", "LIMIT", "AND"})


def _tokens(query: str) -> Iterator[_Token]:
    i = 0
    n = len(query)
    while i < n:
        char = query[i]
        start = i
        if char.isspace():
            i += 1
        elif char.isalnum() or char == "_":
            while i < n and (query[i].isalnum() or query[i] == "_"):
                i += 1
            yield _Token("word", query[start:i], start)
        elif char in _OPERATOR_CHARS:
            while i < n and query[i] in _OPERATOR_CHARS:
                i += 1
            yield _Token("operator", query[start:i], start)
        elif char in "'\"":
            text, i = _string(query, i)
            yield _Token("string", text, start)
        else:
            # Refused by the parser when it gets there, so errors come in the query's order.
            yield _Token("other", char, start)
            i += 1


def _string(query: str, start: int) -> tuple[str, int]:
    """The string literal opening at ``start`` and the position after it."""
    quote = query[start]
    chars: builtins.list[str] = []
    i = start + 1
    n = len(query)
    while i < n:
        char = query[i]
        if char == "\\" and i + 1 < n:
            escaped = query[i + 1]
            chars.append(_ESCAPES.get(escaped, escaped))
            i += 2
        elif char == quote:
            if i + 1 < n and query[i + 1] == quote:
                chars.append(quote)
                i += 2
            else:
                return "".join(chars), i + 1
        else:
            chars.append(char)
            i += 1
    raise ValueError(f"unterminated string starting at position {start} of {query!r}")


def _next_token(tokens: Iterator[_Token], query: str) -> _Token:
    token = next(tokens, None)
    if token is None:
        raise ValueError(f"incomplete comparison at the end of {query!r}")
    return token


def _comparison(
    query: str, field: _Token, operator: _Token, value: _Token, keywords: frozenset[str]
) -> Comparison:
    if field.kind != "word" or field.text.upper() in _CLAUSE_WORDS:
        raise _unsupported(query, field, "expected a field name")
    if operator.is_word("STARTS_WITH"):
        op = Operator.STARTS_WITH
    elif operator.kind == "operator" and operator.text in ("=", "!=", ">="):
        op = Operator(operator.text)
    else:
        raise _unsupported(query, operator, "operators are =, != and STARTS_WITH (>= for times)")
    if value.kind != "string":
        raise _unsupported(query, value, "values are quoted strings")
    allowed = _FIELD_OPERATORS.get(field.text)
    if allowed is None:
        if field.text not in keywords:
            raise _unsupported(
                query, field, f"fields are {', '.join(_FIELD_OPERATORS)} and {sorted(keywords)}"
            )
        allowed = _KEYWORD_OPERATORS
    if op not in allowed:
        raise _unsupported(
            query, operator, f"{field.text} takes {' or '.join(sorted(a.value for a in allowed))}"
        )
    try:
        return Comparison(field.text, op, value.text)
    except ValueError as err:
        raise ValueError(f"{err}, at position {value.position} of {query!r}") from None


def _unsupported(query: str, token: _Token, expected: str) -> ValueError:
    shown = repr(token.text) if token.kind != "string" else f"the string {token.text!r}"
    return ValueError(
        f"unsupported visibility query: {shown} at position {token.position} of {query!r} "
        f"({expected})"
    )


def _keyword_names(
    attributes: Iterable[SearchAttributeKey[str]] | Collection[str],
) -> frozenset[str]:
    names: set[str] = set()
    for attribute in attributes:
        if isinstance(attribute, str):
            names.add(attribute)
        elif attribute.indexed_value_type == SearchAttributeIndexedValueType.KEYWORD:
            names.add(attribute.name)
    return frozenset(names)
