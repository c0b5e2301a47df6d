"""What an operator sees in the Temporal UI after three incidents, in headless Chromium.

The list opened from the link ``remediate ui`` and the demo print shows one
row per incident (no semaphore, no permit guard) with node, pool, fault
class, rung and outcome; an incident's page shows its summary, its first
evidence and current details whose heading is ``remediate status``'s summary.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest_asyncio

from cli.incident_views import state_summary
from demo.incidents import Incident
from gpu_remediation.ids import guard_workflow_id
from gpu_remediation.ui_link import (
    COLUMNS_STORAGE_KEY,
    INCIDENT_COLUMNS,
    column_settings,
    incident_url,
    incidents_url,
)
from tests.browser.conftest import UiStack
from tests.conftest import assert_eventually
from tests.e2e.conftest import settled_incidents
from workflows.permit_guard import PermitGuardWorkflow

# node -> (fault injected, fault class, last rung, outcome)
EXPECTED = {
    "h100-0002": ("fallen_off_bus", "gpu_fallen_off_bus", "reboot", "repaired"),
    "h100-0005": ("row_remap_failure", "row_remap_failure", "replace", "replaced"),
    "h100-0009": ("application", "application", "", "application_fault"),
}
LIST_TIMEOUT = 20.0


async def _rows(page: Any) -> dict[str, str]:
    """The list's body rows as their visible text, by the node they name."""
    texts = await page.locator("tbody tr").all_inner_texts()
    return {node: text for text in texts for node in EXPECTED if node in text}


async def _wait_for_rows(page: Any, url: str) -> dict[str, str]:
    """Open the list until every incident's row shows its outcome (visibility lags a little)."""
    deadline = asyncio.get_running_loop().time() + LIST_TIMEOUT
    while True:
        await page.goto(url)
        try:
            await page.locator("tbody tr").first.wait_for(timeout=5_000)
            await page.get_by_text(EXPECTED["h100-0005"][3], exact=True).first.wait_for(
                timeout=3_000
            )
        except Exception:
            if asyncio.get_running_loop().time() > deadline:
                raise
            continue
        rows = await _rows(page)
        if all(node in rows and want[3] in rows[node] for node, want in EXPECTED.items()):
            return rows
        if asyncio.get_running_loop().time() > deadline:
            return rows


async def _frame_text(page: Any, frame_id: str, expected: str) -> str:
    """The text of one of the incident page's markdown frames, once it shows ``expected``."""
    frame = page.frame_locator(f"#{frame_id}")
    await frame.get_by_text(expected).first.wait_for()
    return str(await frame.locator("body").inner_text())


@pytest_asyncio.fixture(scope="module")
async def incidents(ui_stack: UiStack) -> dict[str, Incident]:
    """The three faults injected the real way, and their incidents once settled."""
    for node, (fault, *_rest) in EXPECTED.items():
        ui_stack.stack.fleet.inject(fault, node, gpu=1)
    settled = await settled_incidents(ui_stack.stack, len(EXPECTED), timeout=40)
    return {incident.node: incident for incident in settled}


async def test_the_incident_list_and_page_tell_the_story(
    ui_stack: UiStack, incidents: dict[str, Incident], browser_page: Any
) -> None:
    stack = ui_stack.stack
    assert {node: incidents[node].result for node in EXPECTED} == {
        node: want[3] for node, want in EXPECTED.items()
    }

    page = browser_page
    rows = await _wait_for_rows(page, incidents_url(ui_stack.ui_url, "default", ui_stack.cluster))
    assert set(rows) == set(EXPECTED), rows
    for node, (_fault, fault_class, rung, outcome) in EXPECTED.items():
        row = rows[node]
        for seen in (node, "h100", fault_class, rung, outcome):
            assert seen in row, (node, seen, row)
    body = await page.locator("tbody").inner_text()
    # One row per incident: the replacement's semaphore and permit guard are left out.
    assert await page.locator("tbody tr").count() == len(EXPECTED), body
    assert "permit-guard" not in body
    assert "replacement-semaphore" not in body
    # ... though they ran, and the guard's id starts like the incidents' ids.
    guard_prefix = guard_workflow_id(stack.starter.workflow_id("h100-0005"), "")
    guards = [
        w.id
        async for w in stack.client.list_workflows(
            f"WorkflowType = '{PermitGuardWorkflow.__name__}'"
        )
    ]
    assert any(g.startswith(guard_prefix) for g in guards), guards

    incident = await page.context.new_page()
    await _open_user_metadata(incident, ui_stack, "h100-0002")
    summary = await _frame_text(incident, "user-metadata-summary", "ladder from")
    assert "h100-0002: gpu_fallen_off_bus, ladder from reboot" in summary
    details = await _frame_text(incident, "user-metadata-details", "First evidence")
    assert "condition GpuHealthProblem=True" in details
    assert "Xid 79 on GPU 1" in details
    current = await _frame_text(incident, "user-metadata-current-details", "repaired after")
    expected_line = state_summary(_state(incidents["h100-0002"]))
    assert expected_line == "h100-0002 (pool h100): gpu_fallen_off_bus, repaired after reboot"
    assert expected_line in current  # the words `remediate status` prints
    assert "outcome repaired" in current


async def _open_user_metadata(page: Any, ui_stack: UiStack, node: str) -> None:
    workflow_id = ui_stack.stack.starter.workflow_id(node)
    await page.goto(incident_url(ui_stack.ui_url, workflow_id))
    tab = page.get_by_role("tab", name="User Metadata")
    await page.get_by_text(workflow_id, exact=True).first.wait_for()
    await tab.click()
    await page.wait_for_url("**/user-metadata")


def _state(incident: Incident) -> Any:
    assert incident.state is not None
    return incident.state


async def test_an_operator_adds_the_incident_columns_once_as_the_docs_say(
    ui_stack: UiStack, incidents: dict[str, Incident], bare_page: Any
) -> None:
    page = bare_page
    await page.goto(incidents_url(ui_stack.ui_url, "default", ui_stack.cluster))
    await page.locator("tbody tr").first.wait_for()
    await page.get_by_role("button", name="Configure Columns").click()
    for label in INCIDENT_COLUMNS:
        await page.get_by_role("button", name=f"Add {label} column").click()
    for label in ("Run ID", "Type", "End"):
        await page.get_by_role("button", name=f"Remove {label} column").click()
    await page.get_by_role("button", name="Close Workflows Table configuration").click()

    headers = await _incident_headers(page)
    assert not {"Run ID", "Type", "End"} & set(headers), headers
    row = await page.locator("tbody tr").filter(has_text="h100-0005").inner_text()
    for seen in ("row_remap_failure", "replace", "replaced"):
        assert seen in row, row
    # The browser keeps them where the preset (and so the other test) puts them.
    stored = json.loads(
        await page.evaluate(f"() => window.localStorage.getItem({json.dumps(COLUMNS_STORAGE_KEY)})")
    )
    labels = [column["label"] for column in stored["default"]]
    assert set(labels) == {c["label"] for c in column_settings()["default"]}, labels

    await page.reload()  # kept for every later visit
    await _incident_headers(page)


async def _incident_headers(page: Any) -> list[str]:
    """The list's column headings, once they show the incident columns in order.

    The list first draws a placeholder table whose headings are empty (a CI run
    read ``['', '', '', '']`` right after a reload), so one read is not enough;
    a list that never shows the columns still fails, with the last headings read.
    """

    async def headers() -> list[str]:
        return [h.strip() for h in await page.locator("thead th").all_inner_texts()]

    return await assert_eventually(
        headers,
        lambda seen: [h for h in seen if h in INCIDENT_COLUMNS] == list(INCIDENT_COLUMNS),
        timeout=LIST_TIMEOUT,
        interval=0.1,
        message="the incident columns in the list's headings",
    )
