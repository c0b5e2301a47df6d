"""Which nodes the watcher starts an admission for (``triggers.admission_hook.gated_node``)."""

from __future__ import annotations

from typing import Any

from gpu_remediation.ids import (
    ADMITTED_BOOT_ANNOTATION,
    INCIDENT_HOLD_TAINT_VALUE,
    STARTUP_TAINT_KEY,
)
from triggers.admission_hook import GatedNode, gated_node


def node(
    *, taint: dict[str, str] | None = None, boot: str | None = "boot-b", admitted: str | None = None
) -> dict[str, Any]:
    annotations = {ADMITTED_BOOT_ANNOTATION: admitted} if admitted else {}
    return {
        "metadata": {"name": "gpu-1", "annotations": annotations},
        "spec": {"taints": [taint] if taint else []},
        "status": {"nodeInfo": {"bootID": boot}} if boot else {},
    }


STARTUP = {"key": STARTUP_TAINT_KEY, "effect": "NoSchedule"}


def test_a_new_node_behind_the_startup_taint_needs_its_first_boots_admission() -> None:
    assert gated_node(node(taint=STARTUP)) == GatedNode("gpu-1", "boot-b", first_boot=True)


def test_a_tainted_node_admitted_at_an_earlier_boot_needs_a_later_boots_admission() -> None:
    gated = gated_node(node(taint=STARTUP, admitted="boot-a"))
    assert gated == GatedNode("gpu-1", "boot-b", first_boot=False)


def test_nodes_that_need_no_start_from_the_watcher() -> None:
    assert gated_node(node()) is None  # no taint: not gated
    assert gated_node(node(taint=STARTUP, admitted="boot-b")) is None  # this boot passed
    assert gated_node(node(taint=STARTUP, boot=None)) is None  # not fully registered yet
    held = {**STARTUP, "value": INCIDENT_HOLD_TAINT_VALUE}
    assert gated_node(node(taint=held)) is None  # the incident starts it itself
    assert gated_node({"metadata": {"name": "Not_A_Node"}, "spec": {"taints": [STARTUP]}}) is None
    assert gated_node("not a node") is None
