"""Per-pool overrides (issue 33): what a pool's effective policy is, and bad overrides refused."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gpu_remediation.models import FaultClass, Rung
from gpu_remediation.policy import Policy
from gpu_remediation.policy_loader import PolicyError, load_policy, parse_policy
from gpu_remediation.policy_override import PoolOverrideError

P5_NO_RESET = "pools: {p5: {rungs: {gpu_reset: {enabled: false}}}}"


def refused(text: str) -> list[str]:
    with pytest.raises(PolicyError) as caught:
        parse_policy(text)
    return caught.value.problems


def test_overriding_one_field_of_one_rung_keeps_the_rungs_other_fields() -> None:
    policy = parse_policy(P5_NO_RESET)
    base = policy.rung(Rung.GPU_RESET)
    p5 = policy.for_pool("p5").rung(Rung.GPU_RESET)
    assert base.enabled
    assert not p5.enabled
    assert p5 == base.model_copy(update={"enabled": False})
    assert p5.timeout == timedelta(minutes=10)  # the default file's, not the model's default


def test_a_nested_field_keeps_its_siblings() -> None:
    policy = parse_policy("pools: {p5: {rungs: {reboot: {retry: {max_attempts: 7}}}}}")
    base, p5 = policy.rung(Rung.REBOOT).retry, policy.for_pool("p5").rung(Rung.REBOOT).retry
    assert p5.max_attempts == 7
    assert p5 == base.model_copy(update={"max_attempts": 7})
    assert base.initial_interval == timedelta(seconds=30)


def test_the_rest_of_the_policy_is_the_base_policys() -> None:
    policy = parse_policy(P5_NO_RESET)
    p5 = policy.for_pool("p5")
    assert p5 != policy
    rungs = {**p5.rungs, Rung.GPU_RESET: policy.rung(Rung.GPU_RESET)}
    assert p5.model_copy(update={"rungs": rungs}) == policy


def test_a_fault_class_override_changes_that_class_and_keeps_its_other_fields() -> None:
    policy = parse_policy("pools: {p5: {fault_classes: {unknown: {start_rung: null}}}}")
    base = policy.fault_class(FaultClass.UNKNOWN)
    p5 = policy.for_pool("p5").fault_class(FaultClass.UNKNOWN)
    assert base.start_rung == Rung.DIAGNOSE
    assert p5.start_rung is None  # notify only in that pool: null is a value, not "unset"
    assert (p5.max_rung, p5.grace, p5.urgency) == (base.max_rung, base.grace, base.urgency)
    others = policy.for_pool("p5").fault_class(FaultClass.NVLINK_ERROR)
    assert others == policy.fault_class(FaultClass.NVLINK_ERROR)


def test_sections_are_overridden_per_pool_each_pool_its_own() -> None:
    policy = parse_policy(
        "pools:\n"
        "  p4d: {verification: {diag_level: 3}, breaker: {max_unhealthy_fraction: 0.1}}\n"
        "  p5: {cooldown: 5m}\n"
    )
    p4d, p5 = policy.for_pool("p4d"), policy.for_pool("p5")
    assert (p4d.verification.diag_level, p4d.breaker.max_unhealthy_fraction) == (3, 0.1)
    assert p4d.verification.timeout == policy.verification.timeout
    assert p4d.breaker.min_unhealthy_nodes == policy.breaker.min_unhealthy_nodes
    assert p4d.cooldown == policy.cooldown == timedelta(minutes=30)
    assert p5.cooldown == timedelta(minutes=5)
    assert p5.verification.diag_level == 2


@pytest.mark.parametrize("pool", [None, "h100", "P5"])
def test_no_pool_or_a_pool_without_an_override_gets_the_base_policy(pool: str | None) -> None:
    policy = parse_policy(P5_NO_RESET)
    assert policy.for_pool(pool) is policy


def test_for_pool_leaves_the_base_alone_and_applying_it_again_changes_nothing() -> None:
    policy = parse_policy(P5_NO_RESET)
    before = policy.model_dump()
    p5 = policy.for_pool("p5")
    assert policy.model_dump() == before
    assert p5.pools == policy.pools  # kept: the effective policy still records the overrides
    assert p5.for_pool("p5") == p5


def test_the_shipped_default_has_no_override() -> None:
    policy = load_policy()
    assert policy.pools == {}
    assert policy.for_pool("p5") is policy


def test_overrides_survive_a_round_trip_as_a_workflow_input() -> None:
    policy = parse_policy(
        "pools: {p5: {rungs: {gpu_reset: {enabled: false}}, "
        "fault_classes: {unknown: {start_rung: null}}, verification: {timeout: 3m}}}"
    )
    dumped = policy.model_dump(mode="json")
    # Only what was given travels: an unset field dumped as null would override with null.
    assert dumped["pools"] == {
        "p5": {
            "rungs": {"gpu_reset": {"enabled": False}},
            "fault_classes": {"unknown": {"start_rung": None}},
            "verification": {"timeout": "PT3M"},
        }
    }
    decoded = Policy.model_validate_json(policy.model_dump_json())
    assert decoded == policy
    assert decoded.for_pool("p5") == policy.for_pool("p5")
    assert decoded.for_pool("p5").fault_class(FaultClass.UNKNOWN).start_rung is None


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "pools: {p5: {rungs: {gpu_reset: {enabled: maybe}}}}",
            "pools.p5.rungs.gpu_reset.enabled: Input should be a valid boolean",
        ),
        (
            "pools: {p5: {rungs: {gpu_reset: {enabled: null}}}}",
            "pools.p5.rungs.gpu_reset.enabled: Input should be a valid boolean",
        ),
        ("pools: {p5: {rungs: {bogus: {}}}}", "pools.p5.rungs.bogus.(key): Input should be"),
        (
            "pools: {p5: {fault_classes: {bogus: {start_rung: null}}}}",
            "pools.p5.fault_classes.bogus.(key): Input should be",
        ),
        (
            "pools: {p5: {rungs: {reboot: {timout: 5m}}}}",
            "pools.p5.rungs.reboot.timout: Extra inputs are not permitted",
        ),
        ("pools: {p5: {bogus: 1}}", "pools.p5.bogus: Extra inputs are not permitted"),
        (
            "pools: {p5: {rungs: {reboot: {max_attempts: 0}}}}",
            "pools.p5.rungs.reboot.max_attempts: Input should be greater than or equal to 1",
        ),
        (
            "pools: {p5: {cooldown: forever}}",
            "pools.p5.cooldown: Input should be a valid timedelta",
        ),
        (
            "pools: {p5: {rungs: {quarantine: {enabled: false}}}}",
            "pools.p5: rungs.quarantine.enabled cannot be false",
        ),
        (
            "pools: {p5: {fault_classes: {unknown: {start_rung: replace}}}}",
            "pools.p5.fault_classes.unknown: start_rung replace is above max_rung reboot",
        ),
        (
            "pools: {p5: {breaker: {per_pool: {p5: 2}}}}",
            "pools.p5.breaker: per_pool[p5] must be in (0, 1], got 2",
        ),
        ("pools: {p5: null}", "pools.p5: Input should be a valid dictionary"),
        ('pools: {"": {}}', "pools..(key): String should have at least 1 character"),
    ],
)
def test_an_invalid_override_is_refused_naming_its_path(text: str, problem: str) -> None:
    problems = refused(text)
    assert len(problems) == 1, problems
    assert problems[0].startswith(problem), problems


def test_every_bad_field_of_every_pool_is_named() -> None:
    problems = refused(
        "pools:\n"
        "  p5: {rungs: {reboot: {max_attempts: 0, timeout: 0s}}}\n"
        "  p4d: {verification: {diag_level: 9}}\n"
    )
    assert [p.split(":")[0] for p in problems] == [
        "pools.p5.rungs.reboot.timeout",
        "pools.p5.rungs.reboot.max_attempts",
        "pools.p4d.verification.diag_level",
    ]


@pytest.mark.parametrize("key", ["pools", "version"])
def test_an_override_may_hold_neither_pools_nor_version(key: str) -> None:
    value = "{p4d: {dry_run: true}}" if key == "pools" else "1"
    problems = refused(f"pools: {{p5: {{{key}: {value}}}}}")
    assert problems == [f"pools.p5: {key!r} cannot be overridden per pool"]


def test_a_policy_built_in_code_is_refused_too() -> None:
    data = load_policy().model_dump()
    data["pools"] = {"p5": {"rungs": {"escalate": {"enabled": False}}}}
    with pytest.raises(ValueError, match=r"pools\.p5: rungs\.escalate\.enabled cannot be false"):
        Policy.model_validate(data)
    # The loader names the same problem at its path, through the error's cause.
    problems = refused("pools: {p5: {rungs: {escalate: {enabled: false}}}}")
    assert problems == ["pools.p5: rungs.escalate.enabled cannot be false"]
    assert issubclass(PoolOverrideError, ValueError)
