"""A policy recorded before a fault class existed still decodes (histories, running workflows)."""

from __future__ import annotations

from gpu_remediation.models import FaultClass as FC
from gpu_remediation.models import Rung
from gpu_remediation.policy import ADDED_FAULT_CLASSES, Policy
from gpu_remediation.policy_loader import load_policy


def test_a_recorded_policy_without_the_configuration_class_gets_its_default() -> None:
    data = load_policy().model_dump(mode="json")
    del data["fault_classes"]["configuration"]
    policy = Policy.model_validate(data)
    assert policy.fault_class(FC.CONFIGURATION) == ADDED_FAULT_CLASSES[FC.CONFIGURATION]
    assert policy.fault_class(FC.CONFIGURATION).start_rung == Rung.ESCALATE


def test_the_shipped_default_of_an_added_class_is_the_one_old_policies_get() -> None:
    shipped = load_policy()
    for fault_class, default in ADDED_FAULT_CLASSES.items():
        assert shipped.fault_class(fault_class) == default


def test_a_recorded_policy_without_the_uncontained_class_gets_its_default() -> None:
    data = load_policy().model_dump(mode="json")
    del data["fault_classes"]["uncontained_error"]
    policy = Policy.model_validate(data)
    assert policy.fault_class(FC.UNCONTAINED_ERROR) == ADDED_FAULT_CLASSES[FC.UNCONTAINED_ERROR]
