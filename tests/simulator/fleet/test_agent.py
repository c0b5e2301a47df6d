"""The node agent and NPD turn hardware state into the conditions the watcher reads."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gpu_remediation import catalog
from gpu_remediation.admission_models import CheckEfaInput
from gpu_remediation.classifier import classify
from gpu_remediation.models import ConditionEvidence, EfaEvidence, FaultClass, XidEvidence
from gpu_remediation.npd_message import NPD_EFA_REASON, NPD_GPU_REASON, parse_condition_message
from gpu_remediation.policy_loader import load_policy
from gpu_remediation.rungs import efa_conditions
from simulator.fleet import Fleet
from simulator.fleet.agent import (
    DEGRADED_HEALTHY,
    EFA_DEGRADED_HEALTHY,
    EFA_HEALTHY,
    GPU_HEALTHY,
    MAX_OUTPUT_LENGTH,
    degraded_condition,
    efa_degraded_condition,
)
from simulator.kube_api import NODES
from tests.conftest import assert_eventually
from tests.simulator.fleet.conftest import Real, conditions

ROOT = Path(__file__).resolve().parents[3]


async def eventually_condition(fleet: Fleet, node: str, type_: str, status: str) -> dict[str, Any]:
    found: dict[str, Any] = await assert_eventually(
        lambda: asyncio.to_thread(lambda: conditions(fleet, node).get(type_, {})),
        lambda cond: cond.get("status") == status,
        message=f"{type_}={status} on {node}",
    )
    return found


async def test_an_xid_shows_as_gpu_health_problem_in_the_catalog_format(fleet: Fleet) -> None:
    fleet.inject("fallen_off_bus", "h100-0001", gpu=3)
    cond = await eventually_condition(fleet, "h100-0001", "GpuHealthProblem", "True")
    assert cond["reason"] == NPD_GPU_REASON
    assert catalog.parse_message_xid(cond["message"]) == (79, 3)
    (evidence,) = parse_condition_message(cond["message"], observed_at=datetime.now(UTC))
    assert isinstance(evidence, XidEvidence)
    assert (evidence.xid, evidence.gpu_index, evidence.pci_bus) == (79, 3, "0000:86:00")


async def test_the_most_serious_fault_leads_the_message(fleet: Fleet) -> None:
    # Xid 79 starts at reboot, Xid 63 at the GPU reset. (Xid 64 and 63 both start
    # at the reset since issue 18, so that pair no longer has a most serious one.)
    fleet.inject("row_remap_pending", "h100-0002", gpu=1)
    fleet.inject("fallen_off_bus", "h100-0002", gpu=6)
    cond = await eventually_condition(fleet, "h100-0002", "GpuHealthProblem", "True")
    assert catalog.parse_message_xid(cond["message"]) == (79, 6)
    evidence = parse_condition_message(cond["message"], observed_at=datetime.now(UTC))
    assert [(e.xid, e.gpu_index) for e in evidence if isinstance(e, XidEvidence)] == [
        (79, 6),
        (63, 1),
    ]


async def test_efa_faults_show_as_efa_health_problem_naming_the_check(
    fleet: Fleet,
) -> None:
    fleet.inject("efa_device_missing", "p5-0001")
    cond = await eventually_condition(fleet, "p5-0001", "EfaHealthProblem", "True")
    assert cond["reason"] == NPD_EFA_REASON
    (evidence,) = parse_condition_message(cond["message"], observed_at=datetime.now(UTC))
    assert isinstance(evidence, EfaEvidence)
    assert evidence.check == "device_count"
    assert conditions(fleet, "p5-0001")["GpuHealthProblem"]["status"] == "False"


async def test_an_application_fault_is_reported_until_it_clears_by_itself(fleet: Fleet) -> None:
    fleet.inject("application", "h100-0000", gpu=2, clears_after=timedelta(minutes=2))
    cond = await eventually_condition(fleet, "h100-0000", "GpuHealthProblem", "True")
    assert catalog.parse_message_xid(cond["message"]) == (13, 2)
    await eventually_condition(fleet, "h100-0000", "GpuHealthProblem", "False")
    assert fleet.node("h100-0000").faults == []


async def test_a_hung_kubelet_turns_ready_unknown(fleet: Fleet) -> None:
    fleet.inject("host_hang", "p5-0002")
    cond = await eventually_condition(fleet, "p5-0002", "Ready", "Unknown")
    assert cond["reason"] == "NodeStatusUnknown"
    snapshot = fleet.snapshot()
    assert snapshot.truly_faulty == ["p5-0002"]
    assert snapshot.nodes_ready == 5


def test_the_simulated_npd_uses_the_deployed_reasons() -> None:
    deployed = json.loads((ROOT / "deploy" / "npd" / "gpu-health-monitor.json").read_text())
    defaults = {c["type"]: (c["reason"], c["message"]) for c in deployed["conditions"]}
    assert defaults["GpuHealthProblem"] == GPU_HEALTHY[1:]
    assert defaults["EfaHealthProblem"] == EFA_HEALTHY[1:]
    rules = {r.get("condition"): r["reason"] for r in deployed["rules"] if r["type"] == "permanent"}
    assert rules == {"GpuHealthProblem": NPD_GPU_REASON, "EfaHealthProblem": NPD_EFA_REASON}
    assert deployed["pluginConfig"]["max_output_length"] == MAX_OUTPUT_LENGTH


def allocatable_gpus(fleet: Fleet, node: str) -> str:
    return str(fleet.store.get(NODES, node)["status"]["allocatable"]["nvidia.com/gpu"])


async def test_the_device_plugin_stops_offering_a_broken_gpu(fleet: Fleet) -> None:
    fleet.inject("application", "h100-0001", gpu=0)
    fault = fleet.inject("fallen_off_bus", "h100-0001", gpu=5)
    await eventually_condition(fleet, "h100-0001", "GpuHealthProblem", "True")
    await assert_eventually(
        lambda: asyncio.to_thread(allocatable_gpus, fleet, "h100-0001"),
        lambda gpus: gpus == "7",
        message="GPU 5 dropped from allocatable, the application's GPU 0 kept",
    )
    fleet.clear_faults("h100-0001", fleet.active_faults("h100-0001", fault), reason="test")
    await assert_eventually(
        lambda: asyncio.to_thread(allocatable_gpus, fleet, "h100-0001"),
        lambda gpus: gpus == "8",
    )


async def test_slow_faults_show_as_the_agent_s_degradation_findings_or_not_at_all(
    fleet: Fleet, real: Real
) -> None:
    # Issue 37: a throttled GPU in GpuDegraded, a slow EFA port in EfaDegraded, each in
    # the agent's grammar and classed from it; a silent slow GPU in neither.
    fleet.inject("gpu_throttled", "h100-0001", gpu=6)
    fleet.inject("efa_degraded", "p5-0001")
    fleet.inject("gpu_slow", "h100-0000", gpu=2)
    gpu = await eventually_condition(fleet, "h100-0001", "GpuDegraded", "True")
    assert (
        "[clock_event:hw_thermal_slowdown]: Active, expected Not Active (10+ cycles)"
        in (gpu["message"])
    )
    efa = await eventually_condition(fleet, "p5-0001", "EfaDegraded", "True")
    assert efa["reason"] == "EfaDegradationDetected"
    assert efa["message"].startswith(
        "Degraded on EFA rdmap113s0 [efa_counter:retrans_timeout_events]: 60+/min"
    )
    policy = load_policy()
    for node, type_, found in (("h100-0001", "GpuDegraded", gpu), ("p5-0001", "EfaDegraded", efa)):
        evidence = ConditionEvidence(
            observed_at=datetime.now(UTC),
            source="t",
            type=type_,
            status="True",
            reason=found["reason"],
            message=found["message"],
        )
        expected = FaultClass.GPU_DEGRADED if type_ == "GpuDegraded" else FaultClass.EFA_DEGRADED
        assert classify([evidence], policy).fault_class == expected, node
    # The silent one: what the agent would write for its true state is healthy.
    silent = fleet.nodes["h100-0000"]
    assert [f.kind.value for f in silent.faults] == ["gpu_slow"]
    assert degraded_condition(silent) == DEGRADED_HEALTHY
    assert efa_degraded_condition(silent) == EFA_DEGRADED_HEALTHY
    # The EFA check that verifies a step for a slow port reads EfaDegraded too.
    health_only = CheckEfaInput(node="p5-0001", admission_id="t")
    both = health_only.model_copy(update={"conditions": efa_conditions(FaultClass.EFA_DEGRADED)})
    assert (await real.run("check_efa", health_only)).passed
    verdict = await real.run("check_efa", both)
    assert (verdict.passed, verdict.reported) == (False, True)
    assert classify(verdict.evidence, policy).fault_class == FaultClass.EFA_DEGRADED


async def test_a_slow_nvlink_is_a_fault_every_detector_sees_and_the_gpu_stays_offered(
    fleet: Fleet,
) -> None:
    # Issue 37: replay errors rising make DCGM fail the GPU (71), so GpuHealthProblem
    # carries it and it is classed nvlink_error, while the job runs on, slower.
    fleet.inject("nvlink_degraded", "h100-0001", gpu=3)
    health = await eventually_condition(fleet, "h100-0001", "GpuHealthProblem", "True")
    assert health["message"] == "DCGM error 71 on GPU 3 [NVLink]: critical NVLink error"
    evidence = ConditionEvidence(
        observed_at=datetime.now(UTC),
        source="t",
        type="GpuHealthProblem",
        status="True",
        reason=health["reason"],
        message=health["message"],
    )
    assert classify([evidence], load_policy()).fault_class == FaultClass.NVLINK_ERROR
    assert allocatable_gpus(fleet, "h100-0001") == "8"  # it works on: still offered
    [fault] = fleet.nodes["h100-0001"].faults
    assert fault.info.slowdown > 1.0
    assert not fault.info.interrupts_jobs
