"""The ladder verifies the fault's component, climbs past dead hosts, follows its pool."""

from datetime import UTC, datetime, timedelta

from temporalio.testing import WorkflowEnvironment

from gpu_remediation import admission_models as a
from gpu_remediation import contracts
from gpu_remediation.ids import Activities as A
from gpu_remediation.models import ConditionEvidence, EfaEvidence, FaultClass, Outcome, Rung
from gpu_remediation.policy import Policy
from tests.doubles import FakeFleet
from tests.workflows.node_support import cluster, policy, with_fault_class, xid


def efa_link_down() -> EfaEvidence:
    """The node agent's finding: an EFA port is down."""
    return EfaEvidence(
        observed_at=datetime.now(UTC), source="efa-check", check="link", device="rdmap113s0"
    )


def no_grace(pol: Policy) -> Policy:
    return with_fault_class(pol, FaultClass.EFA_LINK_DOWN, grace=timedelta(0))


def link_down_until_reboot() -> FakeFleet:
    return FakeFleet(efa_link_down_until_reboot=True)


async def test_an_efa_link_fault_is_rebooted_and_verified_by_the_efa_checks(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = link_down_until_reboot()
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-e1", efa_link_down(), pol=no_grace(policy()))
        result = await handle.result()
    assert result.fault_class == FaultClass.EFA_LINK_DOWN
    assert result.outcome == Outcome.REPAIRED
    assert result.rungs_tried == [Rung.STOP_GPU_WORK, Rung.REBOOT]
    assert fleet.called(A.CHECK_EFA) >= 1
    # A DCGM diagnostic tests the GPUs only: it cannot verify a network link.
    assert fleet.called(A.RUN_DIAGNOSTIC) == 0


async def test_an_efa_link_still_down_is_never_released_as_no_fault_found(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    pol = with_fault_class(no_grace(policy()), FaultClass.EFA_LINK_DOWN, start_rung=Rung.DIAGNOSE)
    fleet = link_down_until_reboot()
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-e2", efa_link_down(), pol=pol)
        result = await handle.result()
        state = await c.state(handle)
    assert result.outcome == Outcome.REPAIRED  # by the reboot, not "no fault found"
    # Diagnose failed on the link, the GPU reset was passed over, the reboot fixed it.
    assert result.rungs_tried == [Rung.STOP_GPU_WORK, Rung.DIAGNOSE, Rung.REBOOT]
    assert fleet.called(A.RESET_GPUS) == 0
    passed_over = [d for d in state.decisions if d.action == "pass over gpu_reset"]
    assert passed_over
    assert "cannot fix" in passed_over[0].reason
    verdicts = [d.action for d in state.decisions if d.stage == "verify"]
    assert verdicts == ["efa_check fail", "efa_check pass"]


async def test_the_efa_check_waits_for_the_agent_to_report_on_the_new_boot(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    not_yet = a.CheckEfaResult(passed=False, reported=False, summary="not reported yet")
    fleet = FakeFleet(efa_checks=[not_yet, not_yet])
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-e3", efa_link_down(), pol=no_grace(policy()))
        result = await handle.result()
    assert result.outcome == Outcome.REPAIRED
    assert fleet.called(A.CHECK_EFA) == 3


async def test_a_host_not_back_after_a_delivered_reboot_climbs_after_one_window(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(host_dead_after_reboot=True)
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-d1", xid(79, gpu=2))
        result = await handle.result()
    # One reboot, not one per retry: the host that did not come back is replaced.
    assert fleet.called(A.REBOOT_NODE) == 1
    assert result.outcome == Outcome.REPLACED
    assert result.rungs_tried == [Rung.STOP_GPU_WORK, Rung.REBOOT, Rung.REPLACE]


def with_p5_override(pol: Policy) -> Policy:
    return Policy.model_validate(
        {
            **pol.model_dump(mode="python"),
            "pools": {"p5": {"rungs": {"gpu_reset": {"enabled": False}}}},
        }
    )


async def test_the_p5_pool_override_skips_gpu_resets(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(node_pool="p5")
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-p5", xid(48, gpu=1), pol=with_p5_override(policy()))
        result = await handle.result()
        state = await c.state(handle)
    assert fleet.called(A.RESET_GPUS) == 0
    assert Rung.REBOOT in result.rungs_tried
    assert result.outcome == Outcome.REPAIRED
    assert any(d.action == "pass over gpu_reset" for d in state.decisions)


async def test_a_pool_without_an_override_keeps_the_gpu_reset(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(node_pool="p4d")
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-p4", xid(48, gpu=1), pol=with_p5_override(policy()))
        result = await handle.result()
    assert fleet.called(A.RESET_GPUS) == 1
    assert result.rungs_tried == [Rung.STOP_GPU_WORK, Rung.GPU_RESET]


async def test_a_slow_efa_port_s_step_is_verified_by_the_degradation_check_too(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    # Issue 37: EfaHealthProblem (devices, provider, link) never shows a slow port, so
    # verifying the reboot by it alone would release a port still slow.
    still_slow = a.CheckEfaResult(
        passed=False,
        reported=True,
        summary="EfaDegraded: Degraded on EFA rdmap113s0 [efa_port_rate]",
        evidence=[slow_port()],
    )
    fleet = FakeFleet(efa_checks=[still_slow])
    pol = with_fault_class(policy(), FaultClass.EFA_DEGRADED, grace=timedelta(0))
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-e9", slow_port(), pol=pol)
        result = await handle.result()
    checks = [arg for name, arg in fleet.calls if name == A.CHECK_EFA]
    assert [check.conditions for check in checks] == [  # type: ignore[attr-defined]
        ["EfaHealthProblem", "EfaDegraded"]
    ] * len(checks)
    # The reboot's check still saw the slow port: the ladder climbed to a replacement.
    assert result.rungs_tried == [Rung.STOP_GPU_WORK, Rung.REBOOT, Rung.REPLACE]
    assert result.outcome == Outcome.REPLACED


def slow_port() -> ConditionEvidence:
    return ConditionEvidence(
        observed_at=datetime.now(UTC),
        source="watcher",
        type="EfaDegraded",
        status="True",
        reason="EfaDegradationDetected",
        message="Degraded on EFA rdmap113s0 [efa_port_rate]: 100 Gb/sec, expected 400 Gb/sec",
    )


def loopback_failure() -> contracts.EfaLoopbackResult:
    """The loopback's verdict on a port that retransmits under load."""
    problem = "retrans_timeout_events rose by 250 under the load (more than 100)"
    return contracts.EfaLoopbackResult(
        passed=False,
        summary=f"EFA loopback under load: 32 devices, 1 failed; rdmap113s0: {problem}",
        failures=[
            EfaEvidence(
                observed_at=datetime.now(UTC),
                source="efa-loopback",
                check="loopback",
                device="rdmap113s0",
                message=f"EFA loopback under load failed: {problem}",
            )
        ],
    )


def slow_port_policy(**load: object) -> Policy:
    pol = with_fault_class(policy(), FaultClass.EFA_DEGRADED, grace=timedelta(0))
    if not load:
        return pol
    verification = pol.verification.model_copy(
        update={"efa_load_test": pol.verification.efa_load_test.model_copy(update=load)}
    )
    return pol.model_copy(update={"verification": verification})


async def test_a_slow_efa_port_that_fails_under_load_climbs_without_waiting_for_the_agent(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    # Idle after its reboot, the port would pass the agent's counters; under load it fails.
    fleet = FakeFleet(efa_loopbacks=[loopback_failure()])
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-e10", slow_port(), pol=slow_port_policy())
        result = await handle.result()
        state = await c.state(handle)
    assert result.rungs_tried == [Rung.STOP_GPU_WORK, Rung.REBOOT, Rung.REPLACE]
    assert result.outcome == Outcome.REPLACED
    assert fleet.called(A.RUN_EFA_LOOPBACK) == 1
    assert fleet.called(A.CHECK_EFA) == 0, "a failed load test needs no counter read"
    [verdict] = [d for d in state.decisions if d.stage == "verify"]
    assert verdict.action == "efa_check fail"
    assert "rdmap113s0: retrans_timeout_events rose by 250" in verdict.reason


async def test_a_slow_efa_port_that_passes_under_load_is_still_read_by_the_agent(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet()
    pol = slow_port_policy(max_counter_increase=7, min_bandwidth_fraction=0.25)
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-e11", slow_port(), pol=pol)
        result = await handle.result()
        state = await c.state(handle)
    assert (result.outcome, result.rungs_tried) == (
        Outcome.REPAIRED,
        [Rung.STOP_GPU_WORK, Rung.REBOOT],
    )
    [load] = [arg for name, arg in fleet.calls if name == A.RUN_EFA_LOOPBACK]
    assert isinstance(load, contracts.RunEfaLoopbackInput)
    assert (load.max_counter_increase, load.min_bandwidth_fraction) == (7, 0.25)
    assert fleet.names().index(A.RUN_EFA_LOOPBACK) < fleet.names().index(A.CHECK_EFA)
    actions = [d.action for d in state.decisions if d.stage == "verify"]
    assert actions == ["EFA load test pass", "efa_check pass"]


async def test_a_host_without_fi_pingpong_gets_the_counter_read_alone(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    not_run = contracts.EfaLoopbackResult(
        passed=False, ran=False, summary="EFA loopback not run: fi_pingpong not found"
    )
    fleet = FakeFleet(efa_loopbacks=[not_run])
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-e12", slow_port(), pol=slow_port_policy())
        result = await handle.result()
        state = await c.state(handle)
    assert result.outcome == Outcome.REPAIRED
    assert fleet.called(A.CHECK_EFA) == 1
    not_run_decision = next(d for d in state.decisions if d.action == "EFA load test not run")
    assert "fi_pingpong not found" in not_run_decision.reason


async def test_the_load_test_runs_only_for_a_slow_port_and_only_when_enabled(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = link_down_until_reboot()
    disabled = FakeFleet()
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        down = await c.report("gpu-e13", efa_link_down(), pol=no_grace(policy()))
        assert (await down.result()).outcome == Outcome.REPAIRED
    async with cluster(time_skipping_env, task_queue, disabled) as c:
        slow = await c.report("gpu-e14", slow_port(), pol=slow_port_policy(enabled=False))
        assert (await slow.result()).outcome == Outcome.REPAIRED
    assert fleet.called(A.RUN_EFA_LOOPBACK) == 0, "a link down is the agent's to judge"
    assert disabled.called(A.RUN_EFA_LOOPBACK) == 0
    assert disabled.called(A.CHECK_EFA) == 1
