"""``nvidia-smi -r`` -> typed reset result (tool_outputs.gpu_reset)."""

from __future__ import annotations

import pytest

from gpu_remediation.tool_outputs.gpu_reset import parse_gpu_reset

# --------------------------------------------------------------- nvidia-smi -r


def test_reset_exit_0_is_ok() -> None:
    result = parse_gpu_reset(
        0, "GPU 00000000:53:00.0 was successfully reset.\nAll done.\n", "", command_id="c-1"
    )

    assert result.status == "ok"
    assert result.command_id == "c-1"
    assert "successfully reset" in result.detail


def test_reset_exit_3_is_not_supported() -> None:
    result = parse_gpu_reset(
        3, "", "GPU Reset couldn't run because GPU 00000000:53:00.0 is not supported."
    )

    assert result.status == "not_supported"


def test_reset_exit_15_is_fallen_off_bus() -> None:
    result = parse_gpu_reset(
        15, "", "Unable to determine the device handle for GPU 00000000:53:00.0: GPU is lost."
    )

    assert result.status == "fallen_off_bus"
    assert "exited 15" in result.detail


def test_reset_unknown_error_on_ec2_is_not_supported() -> None:
    # On EC2 the hypervisor blocks the function-level reset.
    result = parse_gpu_reset(255, "", "Failed to reset GPU 00000000:53:00.0: Unknown Error\n")

    assert result.status == "not_supported"
    assert "Unknown Error" in result.detail


def test_reset_in_use_by_another_client_is_failed_with_detail() -> None:
    result = parse_gpu_reset(
        255,
        "",
        "GPU 00000000:53:00.0 is currently in use by another process.\n"
        "Unable to reset GPU 00000000:53:00.0: In use by another client\n",
    )

    assert result.status == "failed"
    assert "in use by another client" in result.detail.lower()


@pytest.mark.parametrize(
    ("exit_code", "meaning"),
    [
        (2, "invalid argument"),
        (4, "no permission"),
        (6, "not found"),
        (9, "driver not loaded"),
        (255, "other error"),
        (42, "unexpected exit code"),
    ],
)
def test_reset_other_exit_codes_are_failed_with_their_meaning(exit_code: int, meaning: str) -> None:
    result = parse_gpu_reset(exit_code, "", "nvidia-smi: some error\n")

    assert result.status == "failed"
    assert meaning in result.detail
    assert f"exited {exit_code}" in result.detail
