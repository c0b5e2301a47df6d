"""The probe endpoint: liveness from the event loop, readiness from the service's check."""

from __future__ import annotations

import asyncio

import pytest

from gpu_remediation.health import HealthServer, parse_bind
from tests.deploy.support import http_get


async def get(server: HealthServer, path: str) -> tuple[int, str]:
    return await asyncio.to_thread(http_get, f"http://127.0.0.1:{server.port}{path}")


async def test_healthz_answers_and_readyz_reports_the_check() -> None:
    ready = {"value": (False, "Temporal not serving")}

    async def check() -> tuple[bool, str]:
        return ready["value"]

    server = HealthServer("127.0.0.1:0", ready=check, metrics=lambda: b"up 1\n")
    await server.start()
    try:
        assert await get(server, "/healthz") == (200, '{"status": "ok"}\n')
        status, body = await get(server, "/readyz")
        assert status == 503
        assert "Temporal not serving" in body
        ready["value"] = (True, "serving")
        assert (await get(server, "/readyz"))[0] == 200
        assert await get(server, "/metrics") == (200, "up 1\n")
        assert (await get(server, "/other"))[0] == 404
    finally:
        await server.stop()


async def test_a_failing_or_slow_check_is_not_ready_and_does_not_break_the_server() -> None:
    async def broken() -> tuple[bool, str]:
        raise ConnectionError("refused")

    server = HealthServer("127.0.0.1:0", ready=broken)
    await server.start()
    try:
        status, body = await get(server, "/readyz")
        assert status == 503
        assert "ConnectionError: refused" in body
        assert (await get(server, "/metrics"))[0] == 404  # no metrics given
        assert (await get(server, "/healthz"))[0] == 200
    finally:
        await server.stop()


def test_bind_addresses_are_host_and_port() -> None:
    assert parse_bind("0.0.0.0:8081") == ("0.0.0.0", 8081)
    assert parse_bind("[::]:9464") == ("::", 9464)
    assert parse_bind(":8081") == ("0.0.0.0", 8081)
    with pytest.raises(ValueError, match="host:port"):
        parse_bind("8081")
