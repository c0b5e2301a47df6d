"""Availability and capacity doing work, integrated over simulated time."""

from __future__ import annotations

import pytest

from simulator.fleet.accounting import Availability
from simulator.fleet.model import NodeState, Phase


def node(name: str) -> NodeState:
    return NodeState(
        name=name,
        pool="h100",
        instance_id=f"i-{name}",
        zone="us-west-2a",
        boot_id="b",
        reset_supported=True,
        gpus=8,
        agent_phase=0.0,
        created_at=0.0,
    )


def test_a_quarantined_node_finishing_its_job_works_but_is_not_available() -> None:
    # Issue 36: two slots for 100 s; one is cordoned at 0 and runs its job until 50.
    accounting = Availability(capacity=2)
    busy, idle = node("a"), node("b")
    for n in (busy, idle):
        accounting.track(n, 0.0)
    busy.job = "job-0"
    busy.k8s_schedulable = False  # quarantined: cordoned and tainted
    accounting.track(busy, 0.0)
    busy.job = None  # the job ended: the cordoned node now does nothing
    accounting.track(busy, 50.0)
    report = accounting.report(100.0)
    assert report["available"] == pytest.approx(0.5)  # only the other node
    assert report["working"] == pytest.approx(0.75)  # ... plus the job's 50 s


def test_a_node_that_is_down_neither_works_nor_is_available() -> None:
    accounting = Availability(capacity=1)
    down = node("c")
    down.job = "job-1"
    down.phase = Phase.REBOOTING
    accounting.track(down, 0.0)
    report = accounting.report(10.0)
    assert (report["available"], report["working"]) == (0.0, 0.0)
