"""Helpers for the SSM tests: a moto cloud with simulated hosts."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

from activities.host_commands import HostCommand, encode_output
from activities.host_ssm import SsmExecutor
from simulator.aws import MotoCloud, SimulatedInvocation, moto_cloud

FIXTURES = Path(__file__).parent / "fixtures"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def provider_id(instance_id: str) -> str:
    return f"aws:///us-west-2a/{instance_id}"


class Hosts:
    """Scripted host answers per command kind (what the simulator will do for real)."""

    def __init__(self) -> None:
        self.reset = SimulatedInvocation()
        self.diag = SimulatedInvocation(stdout=encode_output(fixture("dcgm4_pass.json")))
        self.health = SimulatedInvocation(stdout=encode_output(fixture("health_healthy.json")))
        self.seen: list[tuple[str, HostCommand | None]] = []

    def __call__(
        self, instance_id: str, command: HostCommand | None, script: list[str]
    ) -> SimulatedInvocation:
        self.seen.append((instance_id, command))
        if command is None:
            return SimulatedInvocation(status="Failed", exit_code=127, stderr="unknown script")
        return {"gpu_reset": self.reset, "dcgm_diag": self.diag, "dcgm_health": self.health}[
            command.kind
        ]


@contextmanager
def ssm_cloud() -> Iterator[tuple[MotoCloud, Hosts, SsmExecutor]]:
    with moto_cloud() as cloud:
        hosts = Hosts()
        cloud.host_simulator = hosts
        # Three attempts keep the persistent-throttling test short.
        ssm = cloud.client("ssm", max_attempts=3)
        executor = SsmExecutor(ssm, poll_interval=timedelta(milliseconds=10))
        yield cloud, hosts, executor
