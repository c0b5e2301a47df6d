"""The Temporal UI in headless Chromium: the demo stack on a dev server with its web UI on.

Playwright (PyPI) drives the system's Chromium through ``executable_path``;
Playwright's own browser download never runs. Without a Chromium (or without
Playwright) the browser tests skip and say why. A failing test keeps its
screenshots under ``$PYTEST_ARTIFACTS`` (default ``tests/artifacts/``, ignored by git).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from demo.policy import scale_policy
from demo.server import DevServer, connect, dev_server
from demo.stack import DemoStack, StackOptions
from gpu_remediation.policy_loader import parse_policy
from gpu_remediation.ui_link import COLUMNS_STORAGE_KEY, column_settings
from simulator.fleet import FleetConfig, PoolSpec
from tests.e2e.conftest import FAST, terminate_open

REPO = Path(__file__).resolve().parents[2]
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
# What Debian's chromium needs headless in a container (platform notes).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    """The system's Chromium: ``$CHROMIUM``, else Debian's, else one on PATH."""
    candidates = [os.environ.get("CHROMIUM", ""), *CHROMIUM_CANDIDATES]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("chromium") or shutil.which("chromium-browser")


def artifacts_dir() -> Path:
    """Where failing browser tests leave their screenshots."""
    return Path(os.environ.get("PYTEST_ARTIFACTS") or REPO / "tests" / "artifacts")


@pytest.fixture(scope="session")
def chromium() -> str:
    """The Chromium executable, or skip with the reason."""
    path = chromium_path()
    if path is None:
        pytest.skip(
            "no Chromium on this machine (Debian: apt-get install chromium; or set $CHROMIUM): "
            "the Temporal UI browser tests need one"
        )
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        pytest.skip("Playwright is not installed (pip install -e '.[test]')")
    return path


@dataclass
class UiStack:
    """The demo stack on a dev server whose UI is on."""

    server: DevServer
    stack: DemoStack

    @property
    def ui_url(self) -> str:
        """The UI's base address."""
        assert self.server.ui_url is not None
        return self.server.ui_url

    @property
    def cluster(self) -> str:
        """The cluster name in this stack's workflow ids."""
        return self.stack.options.cluster


@pytest_asyncio.fixture(scope="module")
async def ui_stack(
    chromium: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[UiStack]:
    """A dev server with the web UI, and the demo stack (fleet, worker, watcher) on it.

    Shared by the module's tests (starting it takes a few seconds); they only read.
    """
    tmp_path = tmp_path_factory.mktemp("browser")
    async with dev_server(label="browser-test", ui=True, directory=tmp_path) as server:
        client = await connect(server.address)
        tag = uuid.uuid4().hex[:8]
        options = StackOptions(
            # 16 nodes: three sick at once stay under the breaker's 20%.
            fleet=FleetConfig(pools=[PoolSpec(name="h100", nodes=16)], time_factor=FAST, seed=3),
            policy=scale_policy(
                parse_policy("cooldown: 0s"), FAST, window_floor=timedelta(seconds=5)
            ),
            run_dir=tmp_path,
            cluster=f"ui-{tag}",
            task_queue=f"tq-ui-{tag}",
            poll_interval=timedelta(milliseconds=50),
            watcher_tick=0.1,
        )
        stack = DemoStack(client, server.address, options)
        await stack.start()
        try:
            yield UiStack(server=server, stack=stack)
        finally:
            await stack.stop(force=True)
            await terminate_open(stack)


@pytest_asyncio.fixture
async def browser_page(chromium: str, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """A headless page whose workflow list shows the incident columns (as an operator set them).

    On failure, a screenshot of every page the test opened is kept.
    """
    async for page in _page(chromium, request, preset_columns=True):
        yield page


@pytest_asyncio.fixture
async def bare_page(chromium: str, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """A headless page of a browser that never opened the UI (the UI's default columns)."""
    async for page in _page(chromium, request, preset_columns=False):
        yield page


async def _page(
    chromium: str, request: pytest.FixtureRequest, *, preset_columns: bool
) -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        context = await browser.new_context(viewport={"width": 1440, "height": 900})
        if preset_columns:
            # The columns an operator adds once with "Configure Columns", stored as the UI does.
            key = json.dumps(COLUMNS_STORAGE_KEY)
            settings = json.dumps(json.dumps(column_settings()))
            await context.add_init_script(f"window.localStorage.setItem({key}, {settings})")
        page = await context.new_page()
        page.set_default_timeout(15_000)
        try:
            yield page
        finally:
            report = getattr(request.node, "rep_call", None)
            if report is None or report.failed:
                await _keep_screenshots(context, request.node.name)
            await browser.close()


async def _keep_screenshots(context: Any, test_name: str) -> None:
    directory = artifacts_dir()
    directory.mkdir(parents=True, exist_ok=True)
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", test_name)
    for number, page in enumerate(context.pages):
        path = directory / f"{stem}-{number}.png"
        await page.screenshot(path=str(path), full_page=True)
        (directory / f"{stem}-{number}.url").write_text(page.url + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Remember each phase's report on the test item, so fixtures see whether it failed."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)
