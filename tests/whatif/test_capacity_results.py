"""The comparison shows what replacements cost and how short capacity left a pool (issue 36)."""

from __future__ import annotations

import pytest
from rich.console import Console

from simulator.fleet.capacity import CapacityReport
from whatif.results import capacity_cells, capacity_table
from whatif.runner import PolicyResult

pytestmark = pytest.mark.unit

SHORT = CapacityReport(
    launches=1161,
    insufficient_capacity=48,
    capacity_block_waits=0,
    node_hours_short=2.4,
    overlap_instance_hours=19.25,
)


def _results() -> list[PolicyResult]:
    return [
        PolicyResult.model_construct(name="replace-always", nodes_replaced=1161, capacity=SHORT),
        PolicyResult.model_construct(
            name="graded",
            nodes_replaced=258,
            capacity=CapacityReport(launches=258, capacity_block_waits=3, node_hours_short=0.5),
        ),
        PolicyResult.model_construct(name="old-lane", nodes_replaced=17, capacity=None),
    ]


def test_each_policy_shows_launches_shortages_and_overlap() -> None:
    replace, graded, old = (capacity_cells(r) for r in _results())
    assert replace == ("1,161", "48", "2.4", "19.2")
    assert graded == ("258", "0 (+3 block waits)", "0.5", "0.0")
    assert old == ("-", "-", "-", "-")  # a lane file written before capacity was counted


def test_the_terminal_table_has_a_row_per_policy() -> None:
    console = Console(record=True, width=160)
    console.print(capacity_table(_results()))
    text = console.export_text()
    assert "Capacity and what replacements cost" in text
    assert "node-h short" in text
    assert "overlap inst-h" in text
    row = next(line for line in text.splitlines() if "replace-always" in line)
    assert [cell for cell in row.split() if cell != "│"] == [
        "replace-always",
        "1,161",
        "48",
        "2.4",
        "19.2",
    ]


def test_the_report_section_defines_its_figures_and_lists_every_policy() -> None:
    from whatif.report import _capacity_section

    page = _capacity_section(_results())
    assert "<h2>Capacity and what replacements cost</h2>" in page
    assert "<em>Node-hours short</em>" in page
    assert "<em>Overlap instance-hours</em>" in page
    assert (
        "<tr><td>replace-always</td><td>1161</td><td>1,161</td><td>48</td><td>2.4</td>"
        "<td>19.2</td></tr>"
    ) in page
    assert "<tr><td>old-lane</td><td>17</td><td>-</td>" in page


def test_the_json_carries_the_capacity_figures() -> None:
    again = CapacityReport.model_validate(SHORT.model_dump(mode="json"))
    assert again == SHORT
    assert set(SHORT.model_dump()) == {
        "launches",
        "insufficient_capacity",
        "capacity_block_waits",
        "node_hours_short",
        "overlap_instance_hours",
    }
