"""gpu_remediation.visibility: the query subset, and listing runs on servers without visibility.

The evaluator is fed the queries the project itself builds (its builder
functions, and the activities' inline queries captured from a recording client),
then ListingVisibility answers them on the time-skipping test server, and on
the dev server side by side with the server's own visibility.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st
from temporalio import workflow
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment
from temporalio.worker import Worker

from activities.temporal import TemporalActivities, _quoted, _rfc3339
from cli.admission import running_admission
from cli.output import CliError
from demo.incidents import IncidentBook
from gpu_remediation.contracts import CountReplacementsInput, LookupNodeHistoryInput
from gpu_remediation.ids import (
    ADMISSION_WORKFLOW_TYPE,
    NODE_WORKFLOW_TYPE,
    admission_workflow_id,
    admissions_query,
    node_workflow_id,
    open_incidents_query,
)
from gpu_remediation.search_attributes import (
    SA_CLUSTER,
    SA_NODE_POOL,
    SA_OUTCOME,
    SA_PROVIDER_ID,
)
from gpu_remediation.ui_link import incidents_query
from gpu_remediation.visibility import (
    Comparison,
    Execution,
    ListingVisibility,
    Operator,
    ServerVisibility,
    Visibility,
    listing_retried,
    newest_first,
    parse_query,
)
from tests.conftest import assert_eventually
from tests.gpu_remediation.hostile_inputs import SIZE, fill, timed

CLUSTER = "c1"
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


# --- the queries the project builds ---------------------------------------------------------


class RecordingClient:
    """Stands in for a Client where the project lists or counts: records each query."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    def list_workflows(self, query: str | None = None, **_: Any) -> AsyncIterator[Any]:
        self.queries.append(query or "")
        return self._nothing()

    async def count_workflows(self, query: str | None = None, **_: Any) -> Any:
        self.queries.append(query or "")
        return SimpleNamespace(count=0)

    async def _nothing(self) -> AsyncIterator[Any]:
        return
        yield


async def lookup_query(
    workflow_id: str, since: datetime, *, provider_id: str = "", max_runs: int = 50
) -> str:
    """The query of the ``lookup_node_history`` activity (a node's earlier incidents)."""
    recorder = RecordingClient()
    activities = TemporalActivities(cast(Client, recorder))
    await ActivityEnvironment().run(
        activities.lookup_node_history,
        LookupNodeHistoryInput(
            workflow_id=workflow_id,
            current_run_id="current",
            incidents_since=since,
            attempts_since=since,
            provider_id=provider_id,
            max_runs=max_runs,
        ),
    )
    (query,) = recorder.queries
    return query


async def replacements_query(cluster: str, since: datetime, node_pool: str | None = None) -> str:
    """The query of the ``count_replacements`` activity (the replacement rate budget)."""
    recorder = RecordingClient()
    activities = TemporalActivities(cast(Client, recorder))
    await ActivityEnvironment().run(
        activities.count_replacements,
        CountReplacementsInput(cluster=cluster, node_pool=node_pool, since=since),
    )
    (query,) = recorder.queries
    return query


async def admission_cli_query(cluster: str, node: str) -> str:
    """The query of ``remediate admit NODE`` (a node's running admission)."""
    recorder = RecordingClient()
    with pytest.raises(CliError):
        await running_admission(cast(Client, recorder), cluster, node)
    (query,) = recorder.queries
    return query


def incident_book_query(cluster: str) -> str:
    """The demo's query of a cluster's incidents."""
    return IncidentBook(cast(Client, None), cluster).query


def run(
    workflow_id: str,
    *,
    workflow_type: str = NODE_WORKFLOW_TYPE,
    status: WorkflowExecutionStatus | None = WorkflowExecutionStatus.COMPLETED,
    started: datetime = T0,
    closed: datetime | None = T0 + timedelta(minutes=5),
    attributes: TypedSearchAttributes = TypedSearchAttributes.empty,
    run_id: str = "r",
) -> Execution:
    return Execution(
        id=workflow_id,
        run_id=run_id,
        workflow_type=workflow_type,
        status=status,
        start_time=started,
        close_time=closed if status != WorkflowExecutionStatus.RUNNING else None,
        search_attributes=attributes,
    )


def attrs(*pairs: SearchAttributePair[Any]) -> TypedSearchAttributes:
    return TypedSearchAttributes(list(pairs))


# --- the evaluator ---------------------------------------------------------------------------


async def test_every_query_the_project_builds_parses() -> None:
    prefix = node_workflow_id(CLUSTER, "n").removesuffix("n")
    queries = [
        open_incidents_query(CLUSTER),
        admissions_query(CLUSTER),
        admissions_query(CLUSTER, running=True),
        incidents_query(),
        incidents_query(CLUSTER),
        incident_book_query(CLUSTER),
        await admission_cli_query(CLUSTER, "gpu-1"),
        await lookup_query(node_workflow_id(CLUSTER, "gpu-1"), T0),
        await lookup_query(node_workflow_id(CLUSTER, "gpu-1"), T0, provider_id="aws:///a/i-1"),
        await replacements_query(CLUSTER, T0),
        await replacements_query(CLUSTER, T0, node_pool="pool-a"),
        f"WorkflowId STARTS_WITH '{prefix}'",  # demo/chaos/collect.py
        f"WorkflowType = '{NODE_WORKFLOW_TYPE}'",  # bench/alert_storm.py
        "",  # count_workflows() as a health check
    ]
    for query in queries:
        parsed = parse_query(query)
        assert len(parsed.comparisons) == (query.count(" AND ") + 1 if query else 0), query


async def test_open_incidents_and_incident_book_queries() -> None:
    held = run(node_workflow_id(CLUSTER, "a"), status=WorkflowExecutionStatus.RUNNING)
    done = run(node_workflow_id(CLUSTER, "b"))
    continued = run(node_workflow_id(CLUSTER, "c"), status=WorkflowExecutionStatus.CONTINUED_AS_NEW)
    other_cluster = run(node_workflow_id("c2", "a"), status=WorkflowExecutionStatus.RUNNING)
    # "c1" is a prefix of "c10": the id prefix ends in a slash, so c10's runs are not c1's.
    longer_name = run(node_workflow_id("c10", "a"), status=WorkflowExecutionStatus.RUNNING)
    admission = run(
        admission_workflow_id(CLUSTER, "a", "boot-1"),
        workflow_type=ADMISSION_WORKFLOW_TYPE,
        status=WorkflowExecutionStatus.RUNNING,
    )
    runs = [held, done, continued, other_cluster, longer_name, admission]

    def matching(query: str) -> list[Execution]:
        parsed = parse_query(query)
        return [execution for execution in runs if parsed.matches(execution)]

    assert matching(open_incidents_query(CLUSTER)) == [held]
    assert matching(incident_book_query(CLUSTER)) == [held, done]
    assert matching(incidents_query(CLUSTER)) == [held, done, continued]
    assert matching(incidents_query()) == [held, done, continued, other_cluster, longer_name]
    assert matching(admissions_query(CLUSTER)) == [admission]
    assert matching(admissions_query(CLUSTER, running=True)) == [admission]
    assert matching(await admission_cli_query(CLUSTER, "a")) == [admission]
    assert matching(await admission_cli_query(CLUSTER, "b")) == []


async def test_lookup_node_history_query() -> None:
    workflow_id = node_workflow_id(CLUSTER, "gpu-1")
    provider = "aws:///us-east-1a/i-0'quoted\\path"
    mine = attrs(SearchAttributePair(SA_PROVIDER_ID, provider))
    runs = {
        "completed": run(workflow_id, run_id="1", attributes=mine),
        "failed": run(workflow_id, run_id="2", status=WorkflowExecutionStatus.FAILED),
        "running": run(workflow_id, run_id="3", status=WorkflowExecutionStatus.RUNNING),
        "continued": run(workflow_id, run_id="4", status=WorkflowExecutionStatus.CONTINUED_AS_NEW),
        "closed before": run(workflow_id, run_id="5", closed=T0 - timedelta(days=1)),
        "another node": run(node_workflow_id(CLUSTER, "gpu-2"), run_id="6"),
        "another machine": run(
            workflow_id,
            run_id="7",
            attributes=attrs(SearchAttributePair(SA_PROVIDER_ID, "aws:///us-east-1a/i-1")),
        ),
    }

    def matching(query: str) -> set[str]:
        parsed = parse_query(query)
        return {name for name, execution in runs.items() if parsed.matches(execution)}

    assert matching(await lookup_query(workflow_id, T0)) == {
        "completed",
        "failed",
        "another machine",
    }
    # The provider id goes through the activity's escaping: quote and backslash included.
    assert matching(await lookup_query(workflow_id, T0, provider_id=provider)) == {"completed"}


async def test_count_replacements_query() -> None:
    def replaced(
        cluster: str, pool: str | None, closed: datetime, outcome: str = "replaced"
    ) -> Execution:
        pairs = [SearchAttributePair(SA_CLUSTER, cluster), SearchAttributePair(SA_OUTCOME, outcome)]
        if pool is not None:
            pairs.append(SearchAttributePair(SA_NODE_POOL, pool))
        return run(node_workflow_id(cluster, "n"), closed=closed, attributes=attrs(*pairs))

    runs = {
        "pool a": replaced(CLUSTER, "a", T0 + timedelta(hours=1)),
        "pool b": replaced(CLUSTER, "b", T0 + timedelta(hours=1)),
        "no pool": replaced(CLUSTER, None, T0 + timedelta(hours=1)),
        "at the moment": replaced(CLUSTER, "a", T0),
        "before": replaced(CLUSTER, "a", T0 - timedelta(microseconds=1)),
        "transient": replaced(CLUSTER, "a", T0 + timedelta(hours=1), outcome="transient"),
        "other cluster": replaced("c2", "a", T0 + timedelta(hours=1)),
        "running": run(
            node_workflow_id(CLUSTER, "r"),
            status=WorkflowExecutionStatus.RUNNING,
            attributes=attrs(
                SearchAttributePair(SA_CLUSTER, CLUSTER),
                SearchAttributePair(SA_OUTCOME, "replaced"),
            ),
        ),
    }

    def matching(query: str) -> set[str]:
        parsed = parse_query(query)
        return {name for name, execution in runs.items() if parsed.matches(execution)}

    assert matching(await replacements_query(CLUSTER, T0)) == {
        "pool a",
        "pool b",
        "no pool",
        "at the moment",
    }
    assert matching(await replacements_query(CLUSTER, T0, node_pool="a")) == {
        "pool a",
        "at the moment",
    }
    # A naive moment is taken as UTC by the activity; an offset is honoured by the evaluator.
    assert matching(await replacements_query(CLUSTER, T0.replace(tzinfo=None))) == matching(
        await replacements_query(CLUSTER, T0)
    )
    same_moment = "CloseTime >= '2026-12-01T13:00:00+01:00' AND GpuCluster = 'c1'"
    assert matching(same_moment) == matching(
        f"CloseTime >= '{T0.isoformat()}' AND GpuCluster = 'c1'"
    )


def test_unset_values_match_no_comparison() -> None:
    """As the dev server's SQL visibility: an unset attribute (NULL) satisfies not even ``!=``."""
    bare = run("w", status=WorkflowExecutionStatus.RUNNING)
    for query in (
        "GpuCluster = 'c1'",
        "GpuCluster != 'c1'",
        "GpuCluster STARTS_WITH ''",
        "CloseTime >= '2000-01-01T00:00:00Z'",
    ):
        assert not parse_query(query).matches(bare), query
    assert parse_query("StartTime >= '2000-01-01T00:00:00Z'").matches(bare)
    assert parse_query("ExecutionStatus != 'Completed'").matches(bare)
    no_status = replace(bare, status=None)
    assert not parse_query("ExecutionStatus != 'Completed'").matches(no_status)
    assert not parse_query("ExecutionStatus = 'Running'").matches(no_status)


def test_operators_on_keywords() -> None:
    execution = run("gpu-remediation/c1/n", attributes=attrs(SearchAttributePair(SA_CLUSTER, "c1")))
    expectations = {
        "WorkflowId = 'gpu-remediation/c1/n'": True,
        "WorkflowId != 'gpu-remediation/c1/n'": False,
        "WorkflowId STARTS_WITH 'gpu-remediation/c1/'": True,
        "WorkflowId STARTS_WITH 'gpu-remediation/c1/n/'": False,
        "WorkflowType STARTS_WITH 'Node'": True,
        "WorkflowType != 'NodeAdmission'": True,
        "GpuCluster = 'c1'": True,
        "GpuCluster = 'C1'": False,
        "GpuCluster != 'c2'": True,
        "GpuCluster STARTS_WITH 'c'": True,
        "ExecutionStatus = 'Completed'": True,
        "ExecutionStatus != 'Completed'": False,
        "StartTime >= '2026-12-01T12:00:00Z'": True,
        "StartTime >= '2026-12-01T12:00:00.000001Z'": False,
        "StartTime >= '2026-12-01T13:00:00+01:00'": True,
        "CloseTime >= '2026-12-01T12:05:00.000000Z'": True,
        "CloseTime >= '2026-12-01T12:05:00.000000001Z'": True,  # nanoseconds: microseconds kept
        "CloseTime >= '2026-12-01T12:05:00.001Z'": False,
        # Keywords in any case (field names are case-sensitive); every comparison must hold.
        "WorkflowType = 'NodeRemediation' and WorkflowId starts_with 'gpu'": True,
        "GpuCluster = 'c1' AND GpuCluster != 'c1'": False,
    }
    for query, expected in expectations.items():
        assert parse_query(query).matches(execution) is expected, query


@pytest.mark.parametrize(
    ("literal", "value"),
    [
        ("'plain'", "plain"),
        ("'it''s'", "it's"),
        ("'it\\'s'", "it's"),
        ("'back\\\\slash'", "back\\slash"),
        ("'\\n\\t\\0\\Z'", "\n\t\0\x1a"),
        ("'\\/\\%\\x'", "/%x"),
        ("'a\"b'", 'a"b'),
        ('"double ""quoted"" \'too\'"', "double \"quoted\" 'too'"),
        ("''", ""),
        ("'AND OR ( ) ORDER BY'", "AND OR ( ) ORDER BY"),
    ],
)
def test_string_literals(literal: str, value: str) -> None:
    (comparison,) = parse_query(f"GpuNode = {literal}").comparisons
    assert comparison == Comparison("GpuNode", Operator.EQ, value)


@given(st.text())
def test_the_activities_quoting_reads_back(value: str) -> None:
    (comparison,) = parse_query(f"GpuNodeProviderId = '{_quoted(value)}'").comparisons
    assert comparison.value == value


# From 1970: strftime writes years before 1000 with fewer than four digits.
@given(st.datetimes(min_value=datetime(1970, 1, 1), timezones=st.just(UTC)))
def test_the_activities_timestamps_read_back(moment: datetime) -> None:
    query = f"CloseTime >= '{_rfc3339(moment)}'"
    assert parse_query(query).matches(run("w", closed=moment))
    assert not parse_query(query).matches(run("w", closed=moment - timedelta(microseconds=1)))


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("WorkflowId = 'a' OR WorkflowId = 'b'", "'OR' at position 17"),
        ("WorkflowId = 'a' or WorkflowId = 'b'", "'or'"),
        ("(WorkflowId = 'a')", "'(' at position 0"),
        ("WorkflowId = 'a' AND (GpuCluster = 'b')", "'(' at position 21"),
        ("NOT WorkflowId = 'a'", "'NOT'"),
        ("WorkflowId = 'a' ORDER BY StartTime DESC", "'ORDER'"),
        ("WorkflowId = 'a' LIMIT 5", "'LIMIT'"),
        ("WorkflowId IN ('a', 'b')", "'IN'"),
        ("WorkflowId LIKE 'a%'", "'LIKE'"),
        ("GpuCluster IS NULL", "'IS'"),
        ("StartTime BETWEEN '2026-01-01T00:00:00Z' AND '2026-01-02T00:00:00Z'", "'BETWEEN'"),
        ("StartTime > '2026-01-01T00:00:00Z'", "'>'"),
        ("StartTime <= '2026-01-01T00:00:00Z'", "'<='"),
        ("WorkflowId <> 'a'", "'<>'"),
        ("WorkflowId == 'a'", "'=='"),
        ("WorkflowId >= 'a'", "'>='"),
        ("CloseTime = '2026-01-01T00:00:00Z'", "'='"),
        ("ExecutionStatus STARTS_WITH 'Run'", "'STARTS_WITH'"),
        ("ExecutionStatus = 'running'", "'running'"),
        ("ExecutionStatus = 'Open'", "'Open'"),
        ("CloseTime >= '2026-01-01'", "'2026-01-01'"),
        ("CloseTime >= '2026-01-01T00:00:00'", "offset"),
        ("CloseTime >= '20260101T000000Z'", "RFC 3339"),
        ("CloseTime >= 5", "'5'"),
        ("WorkflowId = a", "'a'"),
        ("RunId = 'r'", "'RunId'"),
        ("TaskQueue = 'q'", "'TaskQueue'"),
        ("GpuClustr = 'c1'", "'GpuClustr'"),
        ("workflowid = 'a'", "'workflowid'"),
        ("`GpuCluster` = 'c1'", "'`'"),
        ("GpuCluster = 'c1';", "';'"),
        ("GpuCluster = 'c1' GpuNode = 'n'", "'GpuNode'"),
        ("GpuCluster = 'c1' AND", "incomplete"),
        ("AND GpuCluster = 'c1'", "'AND'"),
        ("GpuCluster = 'c1' AND AND GpuNode = 'n'", "'AND'"),
        ("GpuCluster =", "incomplete"),
        ("GpuCluster = 'c1", "unterminated"),
        ("GpuCluster = 'c1\\'", "unterminated"),
        ("GpuCluster = 'c1' = 'c2'", "'='"),
        ("'c1' = GpuCluster", "the string 'c1'"),
    ],
)
def test_refuses_what_is_outside_the_subset(query: str, named: str) -> None:
    with pytest.raises(ValueError, match=re.escape(named)):
        parse_query(query)


def test_only_the_keyword_attributes_it_is_given() -> None:
    assert parse_query("Extra = 'x'", keyword_attributes=["Extra"]).comparisons
    with pytest.raises(ValueError, match="'GpuCluster'"):
        parse_query("GpuCluster = 'x'", keyword_attributes=["Extra"])


def test_comparison_checks_its_value() -> None:
    with pytest.raises(ValueError, match="unknown ExecutionStatus"):
        Comparison("ExecutionStatus", Operator.EQ, "Done")
    with pytest.raises(ValueError, match="RFC 3339"):
        Comparison("StartTime", Operator.GE, "yesterday")


def test_newest_first_is_visibilitys_default_order() -> None:
    """Running runs first, then by close time, then start time (newest first), then run id."""
    running_old = run("a", status=WorkflowExecutionStatus.RUNNING, started=T0, run_id="1")
    running_new = run(
        "b", status=WorkflowExecutionStatus.RUNNING, started=T0 + timedelta(1), run_id="2"
    )
    closed_late = run("c", started=T0, closed=T0 + timedelta(hours=3), run_id="3")
    closed_early_started_late = run(
        "d", started=T0 + timedelta(hours=1), closed=T0 + timedelta(hours=2), run_id="4"
    )
    tie_x = run("e", started=T0, closed=T0 + timedelta(hours=2), run_id="6")
    tie_y = run("f", started=T0, closed=T0 + timedelta(hours=2), run_id="5")
    given_order = [tie_x, closed_late, running_old, tie_y, closed_early_started_late, running_new]
    assert [execution.id for execution in newest_first(given_order)] == [
        "b",
        "a",
        "c",
        "d",
        "f",
        "e",
    ]


HOSTILE_QUERIES = {
    "comparisons": fill("GpuCluster = 'c1'", " AND ", "x"),
    "escapes in a string": "GpuNode = '" + fill("\\'") + "'",
    "doubled quotes": "GpuNode = '" + fill("''") + "'",
    "backslashes, unterminated": "GpuNode = '" + fill("\\"),
    "an endless string": "GpuNode = '" + fill("a"),
    "an endless word": fill("a"),
    "operators": "GpuNode " + fill("="),
    "ANDs": "GpuNode = 'a' " + fill("AND "),
    "parentheses": fill("("),
    "timestamps": fill("CloseTime >= '2026-12-01T12:00:00.000000Z'", " AND "),
    "a long timestamp": "CloseTime >= '2026-12-01T12:00:00." + fill("1") + "Z'",
}


@pytest.mark.linear_guard
@pytest.mark.parametrize("shape", HOSTILE_QUERIES)
def test_parsing_is_linear(shape: str) -> None:
    query = HOSTILE_QUERIES[shape]
    assert len(query) >= SIZE

    def parse() -> None:
        with contextlib.suppress(ValueError):
            parse_query(query)

    timed(shape, parse)


# --- against servers -------------------------------------------------------------------------


@dataclass
class ProbeInput:
    cluster: str | None = None
    outcome: str | None = None
    provider_id: str | None = None
    hold: bool = False
    continue_as_new: bool = False


class _Probe:
    def __init__(self) -> None:
        self._released = False

    async def _act(self, input: ProbeInput) -> None:
        if input.cluster is not None:
            workflow.upsert_search_attributes([SA_CLUSTER.value_set(input.cluster)])
        if input.provider_id is not None:
            workflow.upsert_search_attributes([SA_PROVIDER_ID.value_set(input.provider_id)])
        if input.continue_as_new:
            workflow.continue_as_new(replace(input, continue_as_new=False))
        if input.hold:
            await workflow.wait_condition(lambda: self._released)
        if input.outcome is not None:
            workflow.upsert_search_attributes([SA_OUTCOME.value_set(input.outcome)])


@workflow.defn(name=NODE_WORKFLOW_TYPE, sandboxed=False)
class NodeProbe(_Probe):
    @workflow.run
    async def run(self, input: ProbeInput) -> None:
        await self._act(input)

    @workflow.signal
    def release(self) -> None:
        self._released = True


@workflow.defn(name=ADMISSION_WORKFLOW_TYPE, sandboxed=False)
class AdmissionProbe(_Probe):
    @workflow.run
    async def run(self, input: ProbeInput) -> None:
        await self._act(input)


PROVIDER = "aws:///us-east-1a/i-0'quoted"


@dataclass
class Runs:
    """The runs started on a server, and the workflow ids to ask about."""

    held: WorkflowHandle[Any, Any]
    a: str
    b: str
    can: str
    admission: str
    bare: str
    other_cluster: str
    started: datetime  # before the first run
    a_closed: datetime


async def start_runs(
    client: Client, task_queue: str, advance: Callable[[], Awaitable[None]]
) -> Runs:
    """Start the runs one after another, ``advance`` between them (distinct close times).

    ``held`` runs until released; ``can`` continues as new once (its first run
    has a cluster, no outcome); ``bare`` has no search attribute; an admission
    and a node of another cluster, both replaced, for the filters to tell apart.
    """
    node = NodeProbe.run

    async def finish(workflow_id: str, input: ProbeInput, *, admission: bool = False) -> str:
        if admission:
            await client.execute_workflow(
                AdmissionProbe.run, input, id=workflow_id, task_queue=task_queue
            )
        else:
            await client.execute_workflow(node, input, id=workflow_id, task_queue=task_queue)
        await advance()
        return workflow_id

    held = await client.start_workflow(
        node,
        ProbeInput(cluster=CLUSTER, hold=True, outcome="replaced"),
        id=node_workflow_id(CLUSTER, "held"),
        task_queue=task_queue,
    )
    started = (await held.describe()).start_time
    await advance()
    a = await finish(
        node_workflow_id(CLUSTER, "a"),
        ProbeInput(cluster=CLUSTER, outcome="replaced", provider_id=PROVIDER),
    )
    a_closed = (await client.get_workflow_handle(a).describe()).close_time
    assert a_closed is not None
    return Runs(
        held=held,
        a=a,
        b=await finish(node_workflow_id(CLUSTER, "b"), ProbeInput(CLUSTER, "transient")),
        can=await finish(
            node_workflow_id(CLUSTER, "can"),
            ProbeInput(CLUSTER, "replaced", continue_as_new=True),
        ),
        admission=await finish(
            admission_workflow_id(CLUSTER, "a", "boot-1"),
            ProbeInput(CLUSTER, "replaced"),
            admission=True,
        ),
        bare=await finish(node_workflow_id(CLUSTER, "bare"), ProbeInput()),
        other_cluster=await finish(node_workflow_id("c2", "a"), ProbeInput("c2", "replaced")),
        started=started,
        a_closed=a_closed,
    )


async def ids(visibility: Visibility, query: str, limit: int | None = None) -> list[str]:
    return [execution.id async for execution in visibility.list(query, limit=limit)]


@pytest.mark.integration
async def test_listing_visibility_on_the_time_skipping_server(
    own_time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    # A client of its own: the environment's would skip time whenever it waits for a result.
    client = await Client.connect(
        own_time_skipping_env.client.service_client.config.target_host,
        data_converter=pydantic_data_converter,
    )

    async def a_minute_passes() -> None:
        await own_time_skipping_env.sleep(timedelta(minutes=1))

    visibility: Visibility = ListingVisibility(client)
    async with Worker(client, task_queue=task_queue, workflows=[NodeProbe, AdmissionProbe]):
        runs = await start_runs(client, task_queue, a_minute_passes)

        # Every run the server has, ContinuedAsNew included.
        assert await visibility.count("") == 8
        # Running first, then by close time, newest first; the continued-as-new run left out.
        book = incident_book_query(CLUSTER)
        newest = [runs.held.id, runs.bare, runs.can, runs.b, runs.a]
        assert await ids(visibility, book) == newest
        assert await visibility.count(book) == 5
        assert await ids(visibility, book, limit=2) == newest[:2]
        assert await ids(visibility, book, limit=0) == []
        assert await ids(visibility, incidents_query(CLUSTER)) == [
            runs.held.id,
            runs.bare,
            runs.can,
            runs.can,
            runs.b,
            runs.a,
        ]
        assert await visibility.count(incidents_query()) == 7
        assert await ids(visibility, open_incidents_query(CLUSTER)) == [runs.held.id]
        assert await ids(visibility, admissions_query(CLUSTER)) == [runs.admission]
        assert await visibility.count(admissions_query(CLUSTER, running=True)) == 0

        # The replacement budget: replaced and closed since the moment, any workflow type.
        since_start = await replacements_query(CLUSTER, runs.started)
        assert await ids(visibility, since_start) == [runs.admission, runs.can, runs.a]
        after_a = await replacements_query(CLUSTER, runs.a_closed + timedelta(seconds=30))
        assert await visibility.count(after_a) == 2
        assert await visibility.count(await replacements_query(CLUSTER, runs.started, "p")) == 0
        assert await visibility.count(await replacements_query("c2", runs.started)) == 1

        # A node's earlier incidents: closed runs of its id, not the one continued as new.
        can_runs = [
            execution
            async for execution in visibility.list(await lookup_query(runs.can, runs.started))
        ]
        assert [execution.status for execution in can_runs] == [WorkflowExecutionStatus.COMPLETED]
        assert can_runs[0].search_attributes.get(SA_OUTCOME) == "replaced"
        assert await visibility.count(await lookup_query(runs.held.id, runs.started)) == 0
        mine = await lookup_query(runs.a, runs.started, provider_id=PROVIDER)
        assert await ids(visibility, mine) == [runs.a]
        theirs = await lookup_query(runs.a, runs.started, provider_id="aws:///us-east-1a/i-1")
        assert await visibility.count(theirs) == 0
        assert (
            await visibility.count(
                f"WorkflowId = '{runs.can}' AND ExecutionStatus = 'ContinuedAsNew'"
            )
            == 1
        )
        # Unset attributes match nothing (bare has no cluster), as on the dev server.
        assert await ids(visibility, "WorkflowType = 'NodeRemediation' AND GpuCluster != 'c1'") == [
            runs.other_cluster
        ]

        # An open run is described again: once released, it is closed for every query.
        await runs.held.signal(NodeProbe.release)
        await runs.held.result()
        assert await visibility.count(open_incidents_query(CLUSTER)) == 0
        assert await ids(visibility, await lookup_query(runs.held.id, runs.started)) == [
            runs.held.id
        ]
        assert await visibility.count(since_start) == 4
        listed = [execution async for execution in visibility.list(book, limit=1)]
        assert listed[0].id == runs.held.id
        assert listed[0].close_time is not None
        assert listed[0].close_time > runs.a_closed

        with pytest.raises(ValueError, match="'OR'"):
            await visibility.count("GpuCluster = 'a' OR GpuCluster = 'b'")


@pytest.mark.integration
async def test_listing_agrees_with_the_dev_servers_visibility(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    """The same queries, answered by the dev server's visibility and by listing its runs."""
    client = dev_env.client
    # Runs of this test only (the dev server is shared by the session): a cluster of its own.
    cluster = f"v{uuid.uuid4().hex[:12]}"
    server: Visibility = ServerVisibility(client)
    listing: Visibility = ListingVisibility(client)

    async with Worker(client, task_queue=task_queue, workflows=[NodeProbe, AdmissionProbe]):
        held = await client.start_workflow(
            NodeProbe.run,
            ProbeInput(cluster=cluster, hold=True),
            id=node_workflow_id(cluster, "held"),
            task_queue=task_queue,
        )
        started = (await held.describe()).start_time
        for node, input in [
            ("a", ProbeInput(cluster, "replaced", provider_id=PROVIDER)),
            ("b", ProbeInput(cluster, "transient")),
            ("can", ProbeInput(cluster, "replaced", continue_as_new=True)),
            ("bare", ProbeInput()),
        ]:
            await client.execute_workflow(
                NodeProbe.run,
                input,
                id=node_workflow_id(cluster, node),
                task_queue=task_queue,
            )
        prefix = node_workflow_id(cluster, "n").removesuffix("n")
        queries = [
            incident_book_query(cluster),
            open_incidents_query(cluster),
            incidents_query(cluster),
            await replacements_query(cluster, started),
            await lookup_query(node_workflow_id(cluster, "can"), started),
            await lookup_query(node_workflow_id(cluster, "a"), started, provider_id=PROVIDER),
            f"WorkflowId STARTS_WITH '{prefix}' AND GpuCluster != 'other'",
            f"WorkflowId STARTS_WITH '{prefix}' AND GpuCluster STARTS_WITH '{cluster[:3]}'",
            f"WorkflowId STARTS_WITH '{prefix}' AND ExecutionStatus = 'ContinuedAsNew'",
        ]
        # Visibility is eventually consistent: wait until the server lists all six runs.
        await assert_eventually(
            lambda: server.count(f"WorkflowId STARTS_WITH '{prefix}'"),
            lambda counted: counted == 6,
        )
        for query in queries:
            from_server = [(e.id, e.run_id) async for e in server.list(query)]
            from_listing = [(e.id, e.run_id) async for e in listing.list(query)]
            assert from_listing == from_server, query
            assert await listing.count(query) == await server.count(query), query
        assert len([e async for e in server.list(incident_book_query(cluster), limit=2)]) == 2
        await held.signal(NodeProbe.release)
        await held.result()


def _failing(errors: list[RPCStatusCode]) -> tuple[Callable[[], Awaitable[str]], list[int]]:
    calls: list[int] = []

    async def call() -> str:
        calls.append(1)
        if len(calls) <= len(errors):
            raise RPCError("Application error processing RPC", errors[len(calls) - 1], b"")
        return "listed"

    return call, calls


@pytest.mark.unit
async def test_a_listing_the_test_servers_walk_broke_is_tried_again() -> None:
    # ConcurrentModificationException in TestWorkflowStoreImpl.listWorkflows: UNKNOWN.
    call, calls = _failing([RPCStatusCode.UNKNOWN, RPCStatusCode.UNKNOWN])
    assert await listing_retried(call) == "listed"
    assert len(calls) == 3


@pytest.mark.unit
async def test_a_listing_refused_for_another_reason_is_not_tried_again() -> None:
    call, calls = _failing([RPCStatusCode.PERMISSION_DENIED])
    with pytest.raises(RPCError, match="Application error"):
        await listing_retried(call)
    assert len(calls) == 1


@pytest.mark.unit
async def test_a_listing_that_keeps_failing_fails_after_its_attempts() -> None:
    call, calls = _failing([RPCStatusCode.UNKNOWN] * 10)
    with pytest.raises(RPCError):
        await listing_retried(call)
    assert len(calls) == 5
