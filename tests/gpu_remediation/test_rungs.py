"""The rung table: every rung has an action and a verification; unknown rungs raise."""

import pytest

from gpu_remediation.ids import Activities
from gpu_remediation.models import FaultClass, Outcome, Rung
from gpu_remediation.rungs import (
    RUNG_TABLE,
    Component,
    ComponentCheck,
    RungAction,
    UnknownRungError,
    Verification,
    can_fix,
    check_for,
    rung_spec,
)


def test_every_rung_has_an_entry_with_an_action_and_a_verification() -> None:
    assert set(RUNG_TABLE) == set(Rung)
    for rung, spec in RUNG_TABLE.items():
        assert isinstance(spec.action, RungAction), rung
        assert isinstance(spec.verification, Verification), rung


def test_every_working_rung_is_verified_and_releases_with_an_outcome() -> None:
    working = [r for r, s in RUNG_TABLE.items() if not s.preparation and r != Rung.ESCALATE]
    assert working == [Rung.DIAGNOSE, Rung.GPU_RESET, Rung.REBOOT, Rung.REPLACE]
    for rung in working:
        spec = rung_spec(rung)
        assert spec.verification != Verification.NONE, rung
        assert spec.released_as is not None, rung
    assert rung_spec(Rung.DIAGNOSE).released_as == Outcome.NO_FAULT_FOUND
    assert rung_spec(Rung.REPLACE).verification == Verification.BURN_IN


def test_an_unknown_rung_raises_instead_of_choosing_a_step() -> None:
    with pytest.raises(UnknownRungError, match="no entry"):
        rung_spec("power_cycle")  # type: ignore[arg-type]


def test_only_reboot_and_replace_are_disruptive() -> None:
    disruptive = {r for r, s in RUNG_TABLE.items() if s.disruptive}
    assert disruptive == {Rung.REBOOT, Rung.REPLACE}


@pytest.mark.parametrize(
    ("fault", "check"),
    [
        (FaultClass.EFA_LINK_DOWN, ComponentCheck.EFA_CHECK),
        (FaultClass.EFA_FAILURE, ComponentCheck.EFA_CHECK),
        (FaultClass.NODE_NOT_READY, ComponentCheck.NODE_READY),
        (FaultClass.GPU_RESET_REQUIRED, ComponentCheck.DCGM_DIAG),
        (FaultClass.UNKNOWN, ComponentCheck.DCGM_DIAG),
        (None, ComponentCheck.DCGM_DIAG),
    ],
)
def test_the_check_follows_the_faults_component(
    fault: FaultClass | None, check: ComponentCheck
) -> None:
    assert check_for(fault) == check


def test_a_gpu_reset_cannot_fix_a_network_or_host_fault() -> None:
    assert can_fix(Rung.GPU_RESET, FaultClass.GPU_RESET_REQUIRED)
    assert not can_fix(Rung.GPU_RESET, FaultClass.EFA_LINK_DOWN)
    assert not can_fix(Rung.GPU_RESET, FaultClass.NODE_NOT_READY)
    for rung in (Rung.DIAGNOSE, Rung.REBOOT, Rung.REPLACE):
        assert all(component in rung_spec(rung).fixes for component in Component)


def test_a_rung_with_its_own_activity_has_a_conventional_activity_name() -> None:
    assert Activities.rung_step(Rung.REBOOT) == "run_rung_reboot"
