"""The checkpoint relay of a comparison's policy in a process of its own.

The relay (``triggers.checkpoint_relay``) watches every Pod and decodes each event
with the Kubernetes client; in the simulator's process it took about two thirds
of that process's CPU at 1,000 nodes (the jobs' pods come and go all the time)
and, holding the interpreter lock, halved the speed the simulated clock could
keep. Here it runs unchanged, as ``remediate watch`` would run it beside the
watcher, only in another process: :class:`RelayProcess` starts
``python -m whatif.relay`` with the fleet's settings (the worker's environment),
waits until it has listed the pods, and stops it with SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from demo.stack import DemoStack

READY_LINE = "listening"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 15.0


class RelayProcess:
    """Starts and stops one relay child process for one stack.

    Args:
        cluster: The stack's cluster name (only its incidents are signalled).
        address: Temporal frontend ``host:port``.
        namespace: Temporal namespace.
        log_path: The child's log.
    """

    def __init__(self, *, cluster: str, address: str, namespace: str, log_path: Path) -> None:
        self._args = ["--cluster", cluster, "--address", address, "--namespace", namespace]
        self._log_path = log_path
        self.process: asyncio.subprocess.Process | None = None
        self.start_seconds = 0.0
        """Real seconds the last start took (until the pods were listed)."""

    async def start(self, stack: DemoStack) -> None:
        """Start the relay against the stack's fleet; return once it has listed the pods.

        Raises:
            RuntimeError: It exited or did not list the pods within ``START_TIMEOUT``.
        """
        began = time.monotonic()
        with self._log_path.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "whatif.relay",
                *self._args,
                "--kube-api-url",
                stack.fleet.kube_url,
                "--log",
                str(self._log_path),
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
            )
        assert self.process.stdout is not None
        try:
            line = await asyncio.wait_for(self.process.stdout.readline(), START_TIMEOUT)
        except TimeoutError:
            line = b""
        if line.decode().strip() != READY_LINE:
            await self.stop()
            tail = self._log_path.read_text(errors="replace")[-1500:]
            raise RuntimeError(f"the checkpoint relay process did not start: {tail}")
        self.start_seconds = time.monotonic() - began

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL after ``STOP_TIMEOUT`` (nothing when not running)."""
        process, self.process = self.process, None
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        try:
            await asyncio.wait_for(process.wait(), STOP_TIMEOUT)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()


async def _relay(kube_api_url: str, cluster: str, address: str, namespace: str) -> None:
    # Imported here: only the child needs the clients.
    from kubernetes import client as k8s

    from demo.server import connect
    from triggers.checkpoint_relay import CheckpointRelay

    # What worker.kube_api_client builds for a URL, without importing every activity.
    api = k8s.ApiClient(k8s.Configuration(host=kube_api_url))
    try:
        client = await connect(address, namespace)
        relay = CheckpointRelay(api, client, cluster)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        task = asyncio.create_task(relay.run(stop))
        # The list happens on the relay's watch thread, which signals nothing: poll.
        while relay.source.lists == 0 and not task.done():  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        if not task.done():
            print(READY_LINE, flush=True)
        await task
    finally:
        api.close()


def main() -> None:
    """The child's entry point."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cluster", required=True)
    parser.add_argument("--address", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--kube-api-url", required=True)
    parser.add_argument("--log", type=Path, required=True)
    args = parser.parse_args()
    from whatif.logs import log_to

    with log_to(args.log):
        asyncio.run(_relay(args.kube_api_url, args.cluster, args.address, args.namespace))


if __name__ == "__main__":
    main()
