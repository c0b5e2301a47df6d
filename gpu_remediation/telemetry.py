"""The Temporal SDK runtime of a service process: metrics and the SDK core's logs.

The worker exposes the SDK's runtime metrics (workflow and activity task
latencies, slots, polls, failures) and the workflows' own metrics
(``workflows.metrics``) on one Prometheus endpoint served by the SDK core.
The core's own log lines (Rust) are forwarded into Python logging, so in JSON
mode every line a service writes is JSON.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from temporalio.runtime import (
    LogForwardingConfig,
    LoggingConfig,
    PrometheusConfig,
    Runtime,
    TelemetryConfig,
    TelemetryFilter,
)

CORE_LOGGER = "temporalio.core"


def service_runtime(
    metrics_bind: str | None = None,
    *,
    histogram_buckets: Mapping[str, Sequence[float]] | None = None,
) -> Runtime:
    """A runtime exporting Prometheus metrics on ``metrics_bind`` (``host:port``) if given.

    Args:
        metrics_bind: Address of the ``/metrics`` endpoint; None exports nothing.
        histogram_buckets: Bucket boundaries per histogram name (seconds for ours).
    """
    metrics = (
        PrometheusConfig(
            bind_address=metrics_bind,
            histogram_bucket_overrides=dict(histogram_buckets or {}),
        )
        if metrics_bind
        else None
    )
    logging_config = LoggingConfig(
        filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
        forwarding=LogForwardingConfig(logger=logging.getLogger(CORE_LOGGER)),
    )
    return Runtime(telemetry=TelemetryConfig(logging=logging_config, metrics=metrics))


def install_service_runtime(
    metrics_bind: str | None = None,
    *,
    histogram_buckets: Mapping[str, Sequence[float]] | None = None,
) -> Runtime:
    """Make :func:`service_runtime` the process's default (for every client made after).

    Called once by a service command before it connects; a client created
    earlier (e.g. a connectivity check) keeps the runtime it was made with.
    """
    runtime = service_runtime(metrics_bind, histogram_buckets=histogram_buckets)
    Runtime.set_default(runtime, error_if_already_set=False)
    return runtime
