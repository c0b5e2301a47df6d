"""The hand-over webhook: tell the people's tools (Slack, PagerDuty, a ticket intake).

One POST of the policy's template (``escalation.notify``), rendered with each field as
a JSON string, so a node name or a reason cannot break the body out of its JSON. The
URL and the extra headers may live in files on the worker (a Slack webhook URL is a
secret); they are read at each send, so a rotated secret takes effect without a
restart, and neither enters the incident's history. The request carries an
``Idempotency-Key`` (the incident run's, ``<workflow id>/<run id>/hand-over``) for
receivers that deduplicate: an
activity retried after an ambiguous timeout may send twice.
"""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from gpu_remediation import contracts as c
from gpu_remediation.ids import Activities
from gpu_remediation.policy import HTTP_URL, NotifyPolicy, render_notification
from gpu_remediation.settings import Settings
from gpu_remediation.ui_link import incident_url

MAX_HEADERS = 32
_RETRIED_STATUSES = frozenset({408, 425, 429})


class NotifyError(ApplicationError):
    """A send that failed; ``non_retryable`` when trying again cannot help."""


class HandOverNotifier:
    """Sends the hand-over webhook.

    Args:
        settings: The worker's settings (its cluster's Temporal UI address for the link).
    """

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    @activity.defn(name=Activities.NOTIFY_HAND_OVER)
    async def notify_hand_over(self, input: c.NotifyHandOverInput) -> c.NotifyHandOverResult:
        """POST the hand-over to the webhook; retryable on timeouts, 429 and 5xx."""
        notify = input.notify
        url = notify.url or _read_secret(notify.url_file, "url_file").strip()
        if not HTTP_URL.match(url):
            # Never quoted: a URL read from a file is a secret.
            raise NotifyError("the webhook URL is not an http(s) URL", non_retryable=True)
        info = activity.info()
        headers = {
            "Content-Type": "application/json",
            "Idempotency-Key": f"{info.workflow_id}/{info.workflow_run_id}/hand-over",
            **_headers(notify),
        }
        link = (
            incident_url(self._settings.ui_url, input.incident_id) if self._settings.ui_url else ""
        )
        body = render_notification(
            notify.template,
            {
                "node": input.node,
                "cluster": input.cluster,
                "incident": input.incident_id,
                "fault_class": input.fault_class.value,
                "reason": input.reason,
                "reference": input.reference,
                "summary": input.summary or f"{input.node} handed to people: {input.reason}",
                "link": link,
            },
        )
        try:
            request = urllib.request.Request(
                url, data=body.encode(), headers=headers, method="POST"
            )
        except ValueError:
            raise NotifyError("the webhook URL cannot be used", non_retryable=True) from None
        status = await asyncio.to_thread(_send, request, notify)
        activity.logger.info("hand-over of %s notified (HTTP %d)", input.node, status)
        return c.NotifyHandOverResult(status=status, attempt=info.attempt)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Take a redirect as the answer, never as a hop.

    Following one would turn the POST into a GET and carry the headers (a token)
    to wherever it points.
    """

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


def _send(request: urllib.request.Request, notify: NotifyPolicy) -> int:
    try:
        with _OPENER.open(request, timeout=notify.timeout.total_seconds()) as response:
            status = int(response.status)
    except urllib.error.HTTPError as err:
        retry = err.code in _RETRIED_STATUSES or err.code >= 500
        # The status only: the reason and body are the receiver's and may echo the URL.
        raise NotifyError(
            f"the webhook answered HTTP {err.code}", non_retryable=not retry
        ) from None
    except (urllib.error.URLError, TimeoutError, OSError) as err:
        # The error's kind only: its text may hold the URL (a secret from url_file).
        reason = getattr(err, "reason", err)
        raise NotifyError(f"the webhook could not be reached ({type(reason).__name__})") from None
    if not 200 <= status < 300:
        raise NotifyError(f"the webhook answered HTTP {status}", non_retryable=True)
    return status


def _read_secret(path: str | None, what: str) -> str:
    if path is None:
        raise NotifyError(f"escalation.notify.{what} is not set", non_retryable=True)
    try:
        return Path(path).read_text()[:65536]
    except OSError as err:
        # A secret not mounted yet may come: retried.
        raise NotifyError(f"escalation.notify.{what}: cannot read {path}: {err}") from None


def _headers(notify: NotifyPolicy) -> dict[str, str]:
    if notify.headers_file is None:
        return {}
    headers: dict[str, str] = {}
    for number, line in enumerate(
        _read_secret(notify.headers_file, "headers_file").splitlines(), 1
    ):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, value = line.partition(":")
        name, value = name.strip(), value.strip()
        if not sep or not name or any(ch in name for ch in " \t\r\n") or "\r" in value:
            # The line is a secret: name its number, never its text.
            raise NotifyError(
                f"escalation.notify.headers_file: line {number} is not 'Name: value'",
                non_retryable=True,
            )
        headers[name] = value
        if len(headers) > MAX_HEADERS:
            raise NotifyError(
                f"escalation.notify.headers_file: more than {MAX_HEADERS} headers",
                non_retryable=True,
            )
    return headers
