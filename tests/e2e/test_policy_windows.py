"""Issue 40: a policy window ends at the policy's time on the fleet's clock, at any factor.

The workflow decides a step's window with a timer scaled by the time factor and
no real-time floor. Before, a 10 s real floor on every timeout made a 20-minute
reboot window 200 simulated minutes at factor 1,200 (50 at 300): the dead
host's plateau grew with the factor.
"""

from __future__ import annotations

import pytest

from simulator.fleet import PoolSpec
from tests.e2e.conftest import MakeStack, attempts, settled_incidents

WINDOW_MIN = 20.0
# What the run's own latency may add on the fleet's clock: the boot-id read
# before the window's timer starts and the cancellation after it, about 0.2 s
# real at 1,200 (4 minutes). The old floor added 180 minutes at that factor.
SLACK_MIN = 12.0


@pytest.mark.parametrize("time_factor", [300.0, 1200.0])
async def test_a_dead_hosts_reboot_window_ends_at_the_policys_time_on_the_fleets_clock(
    make_stack: MakeStack, time_factor: float
) -> None:
    stack = await make_stack(
        [PoolSpec(name="h100", nodes=4)],
        time_factor=time_factor,
        policy=f"rungs: {{reboot: {{timeout: {WINDOW_MIN:g}m}}}}",
        window_floor=None,
    )
    fleet = stack.fleet
    fleet.inject("host_failure", "h100-0001")  # the host never comes back from a reboot

    (incident,) = await settled_incidents(stack, 1, timeout=120.0)

    assert incident.result == "replaced"
    assert attempts(incident)[-2:] == ["reboot", "replace"]
    assert incident.state is not None
    (reboot,) = [a for a in incident.state.attempts if a.rung == "reboot"]
    assert reboot.ended_at is not None
    assert "not done within the policy's" in reboot.result
    span_min = (fleet.clock.sim_at(reboot.ended_at) - fleet.clock.sim_at(reboot.started_at)) / 60
    assert WINDOW_MIN <= span_min <= WINDOW_MIN + SLACK_MIN, (
        f"reboot window {span_min:.1f} simulated min at factor {time_factor:g}"
    )
    assert fleet.snapshot().counters["reboots"] == 1  # not rebooted again
