"""The fixed host commands: their arguments, and decoding their compressed output.

What a host prints is untrusted: ``decode_output`` must not expand a small
payload without bound, nor decode an arbitrarily long one (issue 35). A command
takes only the arguments its kind needs.
"""

from __future__ import annotations

import base64
import gzip
import os
import time

import pytest

from gpu_remediation.host_command import (
    DOCUMENT_ACTION,
    DOCUMENT_GPUS,
    EFA_SYSFS,
    ENCODED_MARKER,
    MAX_DECODED_OUTPUT,
    MAX_ENCODED_OUTPUT,
    HostCommand,
    OutputTooLarge,
    decode_output,
    encode_output,
    parse_tag,
)


def _encoded(raw: bytes) -> str:
    """What the host prints for ``raw`` (level 1: fast, and the limits are about size)."""
    return ENCODED_MARKER + base64.b64encode(gzip.compress(raw, compresslevel=1)).decode()


def test_an_encoded_result_decodes_to_what_the_host_wrote() -> None:
    raw = '{"DCGM Diagnostic": {"version": "4.2.3", "é": [1, 2, 3]}}'
    assert decode_output(encode_output(raw)) == raw
    assert decode_output(f"  {encode_output(raw)}\n") == raw  # whitespace around it


def test_an_empty_payload_decodes_to_empty_text_as_before() -> None:
    assert decode_output(ENCODED_MARKER) == ""


def test_a_gzip_bomb_is_refused_quickly_naming_the_limit() -> None:
    # 64 MiB of zeros at gzip's best ratio: under 100 KB encoded.
    bomb = ENCODED_MARKER + base64.b64encode(gzip.compress(bytes(64 << 20))).decode()
    assert len(bomb) < 100_000
    started = time.perf_counter()
    with pytest.raises(ValueError, match="MAX_DECODED_OUTPUT") as refused:
        decode_output(bomb)
    # Generous: it stops after 16 MiB (milliseconds); expanding 64 MiB takes longer.
    assert time.perf_counter() - started < 2.0
    assert isinstance(refused.value, OutputTooLarge)
    assert f"over {MAX_DECODED_OUTPUT} bytes" in str(refused.value)


def test_an_output_of_exactly_the_limit_decodes_and_one_byte_more_is_refused() -> None:
    raw = b"x" * MAX_DECODED_OUTPUT
    assert decode_output(_encoded(raw)) == raw.decode()
    with pytest.raises(OutputTooLarge, match="MAX_DECODED_OUTPUT"):
        decode_output(_encoded(raw + b"x"))


def test_encoded_text_over_its_limit_is_refused_before_decoding() -> None:
    stdout = ENCODED_MARKER + "A" * (MAX_ENCODED_OUTPUT + 4)
    with pytest.raises(OutputTooLarge, match="MAX_ENCODED_OUTPUT"):
        decode_output(stdout)


def test_the_encoded_limit_admits_any_output_within_the_decoded_limit() -> None:
    # Random bytes are the longest encoding of their size: gzip stores them (a
    # few bytes per block), base64 adds a third. Level 6 is the gzip tool's.
    compressed = gzip.compress(os.urandom(MAX_DECODED_OUTPUT), compresslevel=6)
    assert len(base64.b64encode(compressed)) <= MAX_ENCODED_OUTPUT


@pytest.mark.parametrize("keep", [0.5, 0.99])
def test_a_truncated_stream_still_raises(keep: float) -> None:
    stdout = encode_output('{"body": ' + '"x", ' * 2000 + "1}")
    with pytest.raises(ValueError, match="truncated or corrupt"):
        decode_output(stdout[: int(len(stdout) * keep)])


@pytest.mark.parametrize("keep", [-4, -8, 40], ids=["no-length", "no-trailer", "mid-stream"])
def test_a_gzip_stream_cut_short_but_validly_base64_encoded_still_raises(keep: int) -> None:
    compressed = gzip.compress(('{"body": [' + ", ".join(map(str, range(300))) + "]}").encode())
    assert len(compressed) > 100
    stdout = ENCODED_MARKER + base64.b64encode(compressed[:keep]).decode()
    with pytest.raises(ValueError, match="truncated or corrupt: compressed output ended"):
        decode_output(stdout)


def test_a_corrupt_checksum_is_refused() -> None:
    compressed = bytearray(gzip.compress(b'{"body": 1}'))
    compressed[-8] ^= 0xFF  # the CRC-32 of the data
    with pytest.raises(ValueError, match="truncated or corrupt"):
        decode_output(ENCODED_MARKER + base64.b64encode(bytes(compressed)).decode())


def test_data_after_the_gzip_stream_is_refused() -> None:
    # The host writes one member; a second (a bomb in pieces) is not read.
    compressed = gzip.compress(b'{"body": 1}') * 2
    with pytest.raises(ValueError, match="after the gzip stream"):
        decode_output(ENCODED_MARKER + base64.b64encode(compressed).decode())


def test_unmarked_or_non_gzip_output_is_refused() -> None:
    with pytest.raises(ValueError, match="expected encoding"):
        decode_output('{"body": 1}')
    with pytest.raises(ValueError, match="truncated or corrupt"):
        decode_output(ENCODED_MARKER + base64.b64encode(b"not gzip at all").decode())


# ------------------------------------------------------------- the commands


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"kind": "dcgm_diag"}, "dcgm_diag needs a level"),
        ({"kind": "gpu_reset", "level": 2}, "gpu_reset takes no level"),
        ({"kind": "efa_loopback", "level": 1}, "efa_loopback takes no level"),
        ({"kind": "efa_loopback", "gpu_indices": [0]}, "efa_loopback takes no GPU indices"),
        ({"kind": "dcgm_health", "gpu_indices": [1]}, "dcgm_health takes no GPU indices"),
        ({"kind": "reboot"}, "Input should be"),
    ],
)
def test_a_command_with_arguments_its_kind_does_not_take_is_refused(
    fields: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        HostCommand.model_validate(fields)


def test_the_efa_loopback_travels_by_its_tag_and_its_ssm_action_alone() -> None:
    command = HostCommand(kind="efa_loopback")
    assert parse_tag(command.script()) == command
    assert command.ssm_parameters() == {DOCUMENT_ACTION: ["efa_loopback"], DOCUMENT_GPUS: [""]}
    assert HostCommand.from_ssm_parameters(command.ssm_parameters()) == command
    assert command.encodes_output


def test_the_efa_loopback_has_no_single_argv_since_it_runs_per_device() -> None:
    with pytest.raises(ValueError, match="per EFA device"):
        HostCommand(kind="efa_loopback").argv()


def test_the_efa_loopback_script_is_fixed_text_that_quotes_each_device_name() -> None:
    script = "\n".join(HostCommand(kind="efa_loopback").script()[1:])
    assert script.count(EFA_SYSFS) == 1
    assert script.count('-d "$name-rdm"') == 2, "the server's and the client's device"
    assert script.count("FI_EFA_ENABLE_SHM_TRANSFER=0 ") == 2, "through the device, not memory"
    assert "<device>" not in script
    assert script.splitlines()[-1] == "exit 0"
