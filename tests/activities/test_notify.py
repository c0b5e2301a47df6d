"""The hand-over webhook over real HTTP: what is sent, and which failures are retried."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from activities.notify import HandOverNotifier, NotifyError
from gpu_remediation.contracts import NotifyHandOverInput
from gpu_remediation.models import FaultClass
from gpu_remediation.policy import NotifyPolicy
from gpu_remediation.settings import Settings


@dataclass
class Hook:
    """A webhook receiver that answers ``status`` and keeps what it got."""

    status: int = 200
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    url: str = ""


@pytest.fixture
def hook() -> Iterator[Hook]:
    state = Hook()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            state.received.append((dict(self.headers.items()), body))
            self.send_response(state.status)
            if 300 <= state.status < 400:
                self.send_header("Location", "/elsewhere")
            self.end_headers()

        def do_GET(self) -> None:  # where a followed redirect would land
            state.received.append((dict(self.headers.items()), b"GET"))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/gpu"
    yield state
    server.shutdown()
    server.server_close()


def hand_over(notify: NotifyPolicy, reason: str = "reboot not confirmed") -> NotifyHandOverInput:
    return NotifyHandOverInput(
        node="h100-0007",
        incident_id="gpu-remediation/prod/h100-0007",
        cluster="prod",
        fault_class=FaultClass.GPU_FALLEN_OFF_BUS,
        reason=reason,
        reference="event default/gpu-remediation-1",
        summary="h100-0007 (pool h100): gpu_fallen_off_bus, at escalate",
        notify=notify,
    )


async def send(notify: NotifyPolicy, **settings: Any) -> Any:
    notifier = HandOverNotifier(Settings(**settings))
    return await ActivityEnvironment().run(notifier.notify_hand_over, hand_over(notify))


async def test_the_hand_over_is_posted_as_json_with_its_link_and_idempotency_key(
    hook: Hook, tmp_path: Path
) -> None:
    headers = tmp_path / "headers"
    headers.write_text("# the receiver's token\nAuthorization: Bearer s3cret\n\n")
    notify = NotifyPolicy(url=hook.url, headers_file=str(headers))
    result = await send(notify, ui_url="https://temporal.example.com")
    assert (result.status, result.attempt) == (200, 1)
    [(got, body)] = hook.received
    assert got["Authorization"] == "Bearer s3cret"
    assert got["Content-Type"] == "application/json"
    assert got["Idempotency-Key"].endswith("/hand-over")
    sent = json.loads(body)
    assert sent["node"] == "h100-0007"
    assert sent["fault_class"] == "gpu_fallen_off_bus"
    assert sent["text"] == "h100-0007 (pool h100): gpu_fallen_off_bus, at escalate"
    assert sent["link"] == (
        "https://temporal.example.com/namespaces/default/workflows/"
        "gpu-remediation%2Fprod%2Fh100-0007"
    )


async def test_a_reason_full_of_json_and_template_syntax_stays_one_string(hook: Hook) -> None:
    hostile = '"}, "text": "pwned", "x": {"$node\n\\u0000'
    notifier = HandOverNotifier(Settings())
    await ActivityEnvironment().run(
        notifier.notify_hand_over, hand_over(NotifyPolicy(url=hook.url), reason=hostile)
    )
    [(_, body)] = hook.received
    sent = json.loads(body)
    assert sent["reason"] == hostile
    assert sent["text"] != "pwned"


async def test_the_url_may_come_from_a_file_read_at_each_send(hook: Hook, tmp_path: Path) -> None:
    secret = tmp_path / "url"
    secret.write_text(hook.url + "\n")
    assert (await send(NotifyPolicy(url_file=str(secret)))).status == 200
    assert len(hook.received) == 1


@pytest.mark.parametrize(
    ("status", "retried"), [(503, True), (429, True), (400, False), (404, False)]
)
async def test_only_failures_that_may_pass_later_are_retried(
    hook: Hook, status: int, retried: bool
) -> None:
    hook.status = status
    with pytest.raises(NotifyError, match=f"HTTP {status}") as caught:
        await send(NotifyPolicy(url=hook.url))
    assert caught.value.non_retryable is not retried


async def test_an_unreachable_webhook_is_retried() -> None:
    notify = NotifyPolicy(url="http://127.0.0.1:9/unreachable", timeout="2s")
    with pytest.raises(NotifyError, match="could not be reached") as caught:
        await send(notify)
    assert not caught.value.non_retryable


async def test_a_malformed_headers_file_is_named_by_line_never_quoted(
    hook: Hook, tmp_path: Path
) -> None:
    headers = tmp_path / "headers"
    headers.write_text("Authorization: Bearer fine\nthis-is-the-secret-token\n")
    with pytest.raises(NotifyError, match="line 2 is not 'Name: value'") as caught:
        await send(NotifyPolicy(url=hook.url, headers_file=str(headers)))
    assert "secret-token" not in str(caught.value)
    assert caught.value.non_retryable
    assert hook.received == []


def test_the_policy_refuses_a_template_that_would_not_be_json_or_names_unknown_fields() -> None:
    with pytest.raises(ValueError, match="unknown field"):
        NotifyPolicy(url="https://x.example", template='{"a": $password}')
    with pytest.raises(ValueError, match="not JSON"):
        NotifyPolicy(url="https://x.example", template='{"a": "$node"}')
    with pytest.raises(ValueError, match="exactly one of url and url_file"):
        NotifyPolicy(url="https://x.example", url_file="/run/secret")
    with pytest.raises(ValueError, match="http"):
        NotifyPolicy(url="file:///etc/passwd")


async def test_a_redirect_is_a_final_answer_never_followed(hook: Hook) -> None:
    hook.status = 302  # to /elsewhere: the stdlib's opener would GET it with the token
    with pytest.raises(NotifyError, match="HTTP 302") as caught:
        await send(NotifyPolicy(url=hook.url))
    assert caught.value.non_retryable
    assert len(hook.received) == 1


async def test_a_secret_url_from_a_file_never_shows_in_an_error(tmp_path: Path) -> None:
    secret = tmp_path / "url"
    secret.write_text("hooks.example.com/services/T000/B000/s3cret-token\n")  # no scheme
    with pytest.raises(NotifyError) as caught:
        await send(NotifyPolicy(url_file=str(secret)))
    assert "s3cret" not in str(caught.value)
    assert caught.value.non_retryable
    secret.write_text("http://127.0.0.1:9/services/s3cret-token\n")  # unreachable
    with pytest.raises(NotifyError, match="could not be reached") as caught:
        await send(NotifyPolicy(url_file=str(secret), timeout="2s"))
    assert "s3cret" not in str(caught.value)
