"""JSON log lines: one object per record, naming node, workflow and rung."""

from __future__ import annotations

import json
import logging

import pytest

from gpu_remediation.logging_setup import (
    JsonFormatter,
    configure_logging,
    node_from_workflow_id,
)


def record(message: str = "hello %s", *args: object, **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord(
        "gpu_remediation.test", logging.WARNING, __file__, 1, message, args, None
    )
    rec.__dict__.update(extra)
    return rec


def test_every_line_has_the_context_fields_even_without_context() -> None:
    line = json.loads(JsonFormatter().format(record("hello %s", "world")))
    assert line["message"] == "hello world"
    assert line["level"] == "WARNING"
    assert (line["node"], line["workflow_id"], line["rung"]) == (None, None, None)


def test_explicit_extras_name_the_node_and_the_workflow() -> None:
    line = json.loads(
        JsonFormatter().format(
            record(node="gpu-7", workflow_id="gpu-remediation/c/gpu-7", pool="a")
        )
    )
    assert line["node"] == "gpu-7"
    assert line["workflow_id"] == "gpu-remediation/c/gpu-7"
    assert line["pool"] == "a"


def test_the_sdk_activity_details_give_workflow_node_and_rung() -> None:
    details = {
        "activity_type": "reboot_node",
        "attempt": 2,
        "workflow_id": "gpu-remediation/prod/gpu-3",
        "workflow_run_id": "r1",
    }
    line = json.loads(JsonFormatter().format(record(temporal_activity=details)))
    assert line["node"] == "gpu-3"
    assert line["rung"] == "reboot"
    assert line["activity"] == "reboot_node"
    assert line["attempt"] == 2
    assert "temporal_activity" not in line


def test_exceptions_stay_inside_the_one_line() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        import sys

        rec = record()
        rec.exc_info = sys.exc_info()
    text = JsonFormatter().format(rec)
    assert "\n" not in text
    assert "RuntimeError: boom" in json.loads(text)["exception"]


def test_only_node_workflow_ids_name_a_node() -> None:
    assert node_from_workflow_id("gpu-remediation/prod-east/gpu-17") == "gpu-17"
    assert node_from_workflow_id("gpu-remediation/replacement-semaphore") is None
    assert node_from_workflow_id(None) is None


def test_an_unknown_format_or_level_is_refused() -> None:
    with pytest.raises(ValueError, match="log format"):
        configure_logging("xml")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="log level"):
        configure_logging("json", "LOUD")
