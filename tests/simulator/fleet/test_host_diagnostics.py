"""DCGM diagnostics and the EFA loopback pass or fail by the true hardware state."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from gpu_remediation.classifier import classify
from gpu_remediation.contracts import EfaLoopbackResult
from gpu_remediation.host_command import HostCommand, decode_output
from gpu_remediation.models import DcgmEvidence, EfaEvidence, FaultClass
from gpu_remediation.policy_loader import load_policy
from gpu_remediation.tool_outputs.efa_loopback import judge_efa_loopback, parse_efa_loopback
from simulator.fleet import Durations, Fleet
from simulator.fleet.efa_loopback import EFA_DEVICES
from simulator.fleet.host import HostRun
from tests.conftest import assert_eventually
from tests.simulator.fleet.conftest import Real, condition_status
from tests.simulator.fleet.test_host_reset import diag_input

OBSERVED_AT = datetime(2026, 1, 1, tzinfo=UTC)


async def test_the_diagnostic_passes_on_a_healthy_node(fleet: Fleet, real: Real) -> None:
    verdict = await real.run("run_diagnostic", diag_input(fleet, "h100-0000", level=3))
    assert verdict.passed, verdict.summary
    assert verdict.failures == []


async def test_the_diagnostic_fails_on_the_faulty_gpu_with_its_dcgm_error(
    fleet: Fleet, real: Real
) -> None:
    fleet.inject("row_remap_failure", "h100-0002", gpu=5)
    fleet.inject("fallen_off_bus", "h100-0002", gpu=1)
    verdict = await real.run("run_diagnostic", diag_input(fleet, "h100-0002"))
    assert not verdict.passed
    found = {
        (f.check, f.gpu_index, f.error_id) for f in verdict.failures if isinstance(f, DcgmEvidence)
    }
    # The diag names both GPUs with DCGM's ids (80 row remap failure, 120 off the bus);
    # the health recheck recognises the remap failure from its message.
    assert {("diag", 5, 80), ("diag", 1, 120), ("health", 5, 80)} <= found
    assert all(f.gpu_index in (1, 5) for f in verdict.failures if isinstance(f, DcgmEvidence))


async def test_level_one_sees_the_fault_too(fleet: Fleet, real: Real) -> None:
    fleet.inject("xid_reset", "h100-0001", gpu=7)
    verdict = await real.run("run_diagnostic", diag_input(fleet, "h100-0001", level=1))
    assert not verdict.passed
    assert any(isinstance(f, DcgmEvidence) and f.gpu_index == 7 for f in verdict.failures)


async def test_a_spurious_report_passes_the_diagnostic_and_clears(fleet: Fleet, real: Real) -> None:
    fleet.inject("false_positive", "h100-0000", gpu=2, xid=64)
    await assert_eventually(
        lambda: asyncio.to_thread(condition_status, fleet, "h100-0000", "GpuHealthProblem"),
        lambda status: status == "True",
    )
    verdict = await real.run("run_diagnostic", diag_input(fleet, "h100-0000"))
    assert verdict.passed, verdict.summary
    assert fleet.node("h100-0000").faults == []
    await assert_eventually(
        lambda: asyncio.to_thread(condition_status, fleet, "h100-0000", "GpuHealthProblem"),
        lambda status: status == "False",
    )


async def test_a_diagnostic_of_other_gpus_does_not_see_the_fault(fleet: Fleet, real: Real) -> None:
    fleet.inject("nvlink", "h100-0000", gpu=3)
    only = diag_input(fleet, "h100-0000").model_copy(update={"gpu_indices": [0, 1]})
    verdict = await real.run("run_diagnostic", only)
    # The diag of GPUs 0 and 1 passes; the health recheck covers every GPU.
    assert not verdict.passed
    assert {f.check for f in verdict.failures if isinstance(f, DcgmEvidence)} == {"health"}


@pytest.mark.parametrize("kind", ["gpu_degraded", "gpu_slow"])
async def test_only_level_three_s_stress_test_sees_a_slow_gpu_and_names_it_degraded(
    fleet: Fleet, real: Real, kind: str
) -> None:
    # Issue 37: a GPU that works, slower, passes level 2 and fails level 3's targeted
    # stress test (DCGM_FR_STRESS_LEVEL), which the classifier reads as gpu_degraded.
    fleet.inject(kind, "h100-0002", gpu=4)
    level_2 = await real.run("run_diagnostic", diag_input(fleet, "h100-0002", level=2))
    assert level_2.passed, level_2.summary
    level_3 = await real.run("run_diagnostic", diag_input(fleet, "h100-0002", level=3))
    assert not level_3.passed
    [failure] = [f for f in level_3.failures if isinstance(f, DcgmEvidence)]
    assert (failure.check, failure.gpu_index, failure.error_id) == ("diag", 4, 50)
    assert "did not reach desired stress level of 8000.0 for GPU 4" in failure.message
    verdict = classify([failure], load_policy())
    assert verdict.fault_class == FaultClass.GPU_DEGRADED
    # Once a reset cleared it, the same test passes: the step's verification tells.
    fleet.clear_faults("h100-0002", fleet.active_faults("h100-0002"), reason="test")
    again = await real.run("run_diagnostic", diag_input(fleet, "h100-0002", level=3))
    assert again.passed, again.summary


def loopback(fleet: Fleet, node: str) -> tuple[HostRun, EfaLoopbackResult]:
    """The simulated host's run of the EFA loopback on ``node``, and the worker's verdict."""
    run = fleet.host.run(node, HostCommand(kind="efa_loopback"))
    assert run is not None
    verdict = judge_efa_loopback(
        decode_output(run.stdout),
        max_counter_increase=100,
        min_bandwidth_fraction=0.5,
        observed_at=OBSERVED_AT,
    )
    return run, verdict


def test_the_efa_loopback_passes_on_a_healthy_node(fleet: Fleet) -> None:
    run, verdict = loopback(fleet, "h100-0000")
    assert run.exit_code == 0
    assert run.duration == fleet.config.durations.efa_loopback.total_seconds() == 90.0
    assert verdict.passed, verdict.summary
    assert verdict.failures == []
    assert len(parse_efa_loopback(decode_output(run.stdout))) == EFA_DEVICES == 32


def test_the_efa_loopback_fails_the_degraded_port_by_its_retransmits(fleet: Fleet) -> None:
    fleet.inject("efa_degraded", "h100-0001")
    run, verdict = loopback(fleet, "h100-0001")
    assert run.exit_code == 0  # the script always exits 0: the verdict is in the report
    assert not verdict.passed
    [failure] = verdict.failures
    assert isinstance(failure, EfaEvidence)
    assert (failure.check, failure.device) == ("loopback", "rdmap113s0")
    assert "retrans_timeout_events rose by 250" in failure.message


def test_the_efa_loopback_fails_a_port_whose_link_is_down(fleet: Fleet) -> None:
    fleet.inject("efa_link", "p5-0000")
    _, verdict = loopback(fleet, "p5-0000")
    assert not verdict.passed
    [failure] = verdict.failures
    assert isinstance(failure, EfaEvidence)
    assert (failure.check, failure.device) == ("loopback", "rdmap113s0")
    assert "fi_pingpong exited 61: fi_getinfo()" in failure.message


def test_the_efa_loopback_runs_on_the_devices_a_node_has(fleet: Fleet) -> None:
    fleet.inject("efa_device_missing", "h100-0002")
    run, verdict = loopback(fleet, "h100-0002")
    devices = [r.device for r in parse_efa_loopback(decode_output(run.stdout))]
    assert len(devices) == EFA_DEVICES - 1 == 31
    assert len(set(devices)) == 31
    assert "31 devices" in verdict.summary


def test_the_efa_loopback_takes_its_configured_duration(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet(durations=Durations(efa_loopback=timedelta(seconds=45)))
    run, _ = loopback(fleet, "h100-0000")
    assert run.duration == 45.0
