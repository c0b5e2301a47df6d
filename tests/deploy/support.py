"""Helpers for the deployment tests: repository paths, scrapes, JSON log capture."""

from __future__ import annotations

import io
import json
import logging
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from gpu_remediation.logging_setup import JsonFormatter
from gpu_remediation.telemetry import service_runtime
from workflows.metrics import HISTOGRAM_BUCKETS

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
SCHEMAS = Path(__file__).resolve().parent / "schemas"


def yaml_documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    """Status and body of a GET (error statuses are returned, not raised)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


Sample = tuple[str, dict[str, str], float]


def scrape(url: str) -> dict[str, list[Sample]]:
    """Family name -> samples (name, labels, value) of a Prometheus endpoint."""
    status, body = http_get(url)
    assert status == 200, (status, body[:500])
    return {
        family.name: [(s.name, dict(s.labels), s.value) for s in family.samples]
        for family in text_string_to_metric_families(body)
    }


def value(families: dict[str, list[Sample]], sample_name: str, **labels: str) -> float | None:
    """Sum of the samples named ``sample_name`` whose labels include ``labels``.

    The parser names counter samples ``<name>_total`` whether or not the
    exposition did (the SDK core's counters have no suffix): both match.
    """
    names = {sample_name, sample_name + "_total"}
    found = [
        v
        for samples in families.values()
        for name, have, v in samples
        if name in names and all(have.get(k) == want for k, want in labels.items())
    ]
    return sum(found) if found else None


@contextmanager
def json_log_capture(level: int = logging.INFO) -> Iterator[list[dict[str, Any]]]:
    """Every record logged meanwhile, formatted by the services' JSON formatter and parsed.

    The list fills when the block ends; a line that is not JSON fails the parse.
    """
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    old_level = root.level
    old_flags = (activity.logger.activity_info_on_message, workflow.logger.workflow_info_on_message)
    root.addHandler(handler)
    root.setLevel(level)
    activity.logger.activity_info_on_message = False
    workflow.logger.workflow_info_on_message = False
    lines: list[dict[str, Any]] = []
    try:
        yield lines
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
        activity.logger.activity_info_on_message, workflow.logger.workflow_info_on_message = (
            old_flags
        )
        lines.extend(json.loads(line) for line in stream.getvalue().splitlines())


def parse_json_lines(text: str) -> list[dict[str, Any]]:
    """Each non-empty line of ``text`` as JSON (fails on the first line that is not)."""
    parsed = []
    for line in text.splitlines():
        if line.strip():
            try:
                parsed.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise AssertionError(f"not a JSON log line: {line!r}") from err
    return parsed


def exposed_names(text: str) -> set[str]:
    """Metric names as Prometheus stores them from a text exposition (histograms and
    summaries with their ``_bucket``/``_sum``/``_count`` series).
    """
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            names.add(name)
            if kind in ("histogram", "summary"):
                names |= {name + "_bucket", name + "_sum", name + "_count"}
        elif line and not line.startswith("#"):
            names.add(line.split("{", 1)[0].split(" ", 1)[0])
    return names


async def metrics_client(client: Client, port: int) -> Client:
    """A client of ``client``'s server whose runtime exports metrics on ``port``
    (as the worker's does), with the buckets the worker uses.
    """
    runtime = service_runtime(f"127.0.0.1:{port}", histogram_buckets=HISTOGRAM_BUCKETS)
    return await Client.connect(
        client.service_client.config.target_host,
        namespace=client.namespace,
        data_converter=pydantic_data_converter,
        runtime=runtime,
    )
