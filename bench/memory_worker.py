"""The memory benchmark's worker process: the real worker wiring, FakeFleet activities.

Run by ``bench.memory`` as ``python -m bench.memory_worker ADDRESS TASK_QUEUE
MAX_CACHED``; prints ``READY`` once polling and exits on SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from bench.common import connect
from tests.doubles import FakeFleet
from worker import build_worker


async def serve(address: str, task_queue: str, max_cached: int) -> None:
    """Poll ``task_queue`` until told to stop."""
    client = await connect(address)
    worker = build_worker(
        client,
        FakeFleet().activities(),
        task_queue,
        production=True,
        max_cached_workflows=max_cached,
        max_concurrent_workflow_tasks=100,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        print("READY", flush=True)
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], sys.argv[2], int(sys.argv[3])))
    sys.stdout.flush()
    # Skip interpreter finalisation: the SDK's native threads may still hold the
    # GIL state, which aborts the process with a fatal error at exit.
    os._exit(0)
