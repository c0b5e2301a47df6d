"""GPU resets through the real host activities change the simulated hardware."""

from __future__ import annotations

import asyncio

from gpu_remediation.contracts import ResetGpusInput, RunDiagnosticInput
from simulator.fleet import Fleet
from tests.conftest import assert_eventually
from tests.simulator.fleet.conftest import Real, condition_status


def reset_input(fleet: Fleet, node: str, gpus: list[int]) -> ResetGpusInput:
    return ResetGpusInput(
        node=node, incident_id="i-1", provider_id=fleet.provider_id(node), gpu_indices=gpus
    )


def diag_input(fleet: Fleet, node: str, level: int = 2) -> RunDiagnosticInput:
    return RunDiagnosticInput(
        node=node, incident_id="i-1", provider_id=fleet.provider_id(node), level=level
    )


async def test_a_reset_clears_a_resettable_xid_and_its_condition(fleet: Fleet, real: Real) -> None:
    fleet.inject("xid_reset", "h100-0001", gpu=2)
    await assert_eventually(
        lambda: asyncio.to_thread(condition_status, fleet, "h100-0001", "GpuHealthProblem"),
        lambda status: status == "True",
    )
    result = await real.run("reset_gpus", reset_input(fleet, "h100-0001", [2]))
    assert result.status == "ok", result.detail
    assert fleet.node("h100-0001").faults == []
    await assert_eventually(
        lambda: asyncio.to_thread(condition_status, fleet, "h100-0001", "GpuHealthProblem"),
        lambda status: status == "False",
    )
    verdict = await real.run("run_diagnostic", diag_input(fleet, "h100-0001"))
    assert verdict.passed, verdict.summary


async def test_a_reset_leaves_faults_only_a_reboot_or_new_hardware_fix(
    fleet: Fleet, real: Real
) -> None:
    fleet.inject("gsp_hang", "h100-0001", gpu=1)
    fleet.inject("row_remap_failure", "h100-0001", gpu=4)
    result = await real.run("reset_gpus", reset_input(fleet, "h100-0001", [1, 4]))
    assert result.status == "ok"
    assert sorted(fleet.node("h100-0001").faults) == [
        "gsp_hang on GPU 1 (Xid 119)",
        "row_remap_failure on GPU 4 (Xid 64)",
    ]


async def test_a_reset_on_the_no_reset_profile_reports_not_supported(
    fleet: Fleet, real: Real
) -> None:
    fleet.inject("xid_reset", "p5-0000", gpu=5)
    result = await real.run("reset_gpus", reset_input(fleet, "p5-0000", [5]))
    assert result.status == "not_supported", result.detail
    assert fleet.node("p5-0000").faults == ["xid_reset on GPU 5 (Xid 48)"]


async def test_a_gpu_that_fell_off_the_bus_cannot_be_reset(fleet: Fleet, real: Real) -> None:
    fleet.inject("fallen_off_bus", "h100-0002", gpu=3)
    result = await real.run("reset_gpus", reset_input(fleet, "h100-0002", [3]))
    assert result.status == "fallen_off_bus", result.detail
    assert fleet.node("h100-0002").real_fault


async def test_a_reset_fails_while_gpu_pods_still_run(fleet: Fleet, real: Real) -> None:
    fleet.inject("xid_reset", "h100-0000", gpu=0)
    fleet.store.put_pod("ml", "trainer", node_name="h100-0000", gpus=8)
    result = await real.run("reset_gpus", reset_input(fleet, "h100-0000", [0]))
    assert result.status == "failed"
    assert "in use" in result.detail
    assert fleet.node("h100-0000").real_fault


async def test_the_job_executor_resets_on_the_same_hardware(fleet: Fleet, aws_env: None) -> None:
    jobs = Real(fleet, host_executor="job")
    fleet.inject("row_remap_pending", "h100-0001", gpu=6)
    result = await jobs.run("reset_gpus", reset_input(fleet, "h100-0001", [6]))
    assert result.status == "ok", result.detail
    assert fleet.node("h100-0001").faults == []
    unsupported = await jobs.run("reset_gpus", reset_input(fleet, "p5-0001", [0]))
    assert unsupported.status == "not_supported"
