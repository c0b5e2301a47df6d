"""``remediate compare``'s faulty-arrival probabilities reach the fleet every policy runs on."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from cli.main import app
from whatif.options import CompareError, compare_fleet, options_from


def test_arrival_probabilities_reach_the_fleet_with_the_startup_taint_kept() -> None:
    config, _ = compare_fleet(
        options_from(nodes=6, new_node_fault_probability=0.05, reboot_fault_probability=0.01)
    )
    assert config.admission is not None
    assert config.admission.new_node_fault_probability == 0.05
    assert config.admission.reboot_fault_probability == 0.01
    assert config.admission.startup_taint


def test_without_the_options_no_arrival_is_faulty() -> None:
    config, _ = compare_fleet(options_from(nodes=6))
    assert config.admission is not None
    assert config.admission.new_node_fault_probability == 0.0
    assert config.admission.reboot_fault_probability == 0.0


@pytest.mark.parametrize(
    ("field", "value"),
    [("new_node_fault_probability", -0.1), ("reboot_fault_probability", 1.5)],
)
def test_a_probability_outside_0_to_1_is_refused_naming_the_option(
    field: str, value: float
) -> None:
    with pytest.raises(CompareError, match="--" + field.replace("_", "-")):
        options_from(**{field: value})


def test_the_command_refuses_a_bad_probability_and_starts_nothing() -> None:
    result = CliRunner().invoke(
        app, ["compare", "--nodes", "4", "--new-node-fault-probability", "2"]
    )
    assert result.exit_code == 2
    assert "--new-node-fault-probability" in result.output
    assert "Comparing" not in result.output
