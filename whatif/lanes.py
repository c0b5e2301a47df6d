"""Policies side by side: each in a child process of its own, on the shared dev server.

The simulator of one policy (fleet, Kubernetes API emulator, moto, watcher, relay)
runs under one interpreter lock and leaves most of a second core idle; a child
process per policy (``python -m whatif.lane``) gives each its own. A child runs
exactly what the sequential path runs (``CompareRun.run_policy``: a fresh fleet,
its own worker process and watcher, the cluster name, task queue and semaphore
of its index) and answers on stdout, one JSON object per line: ``progress``
while it runs, ``result`` (the ``PolicyResult``) at the end. At most
``CompareRun.lanes`` children run at once; the results keep ``--policies`` order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from whatif.options import CompareError

if TYPE_CHECKING:
    from whatif.runner import CompareRun, PolicyResult

LINE_LIMIT = 1 << 26
"""Longest stdout line read from a child (the result: its samples, summary and timeline)."""
STOP_TIMEOUT = 60.0
"""Real seconds a child gets to stop its worker and fleet after SIGTERM, before SIGKILL."""


def lane_spec(compare: CompareRun, index: int, address: str, namespace: str) -> dict[str, Any]:
    """What a child needs to run policy ``index`` as this comparison would."""
    return {
        "options": compare.options.model_dump(mode="json"),
        "index": index,
        "tag": compare.tag,
        "run_dir": str(compare.run_dir),
        "address": address,
        "namespace": namespace,
    }


async def run_lanes(compare: CompareRun, address: str, namespace: str) -> list[PolicyResult]:
    """Run every policy in a child process, ``compare.lanes`` at a time.

    Raises:
        CompareError: A child failed (its error and the tail of its log).
    """
    gate = asyncio.Semaphore(compare.lanes)
    results: dict[int, PolicyResult] = {}

    async def one(index: int) -> None:
        async with gate:
            results[index] = await _lane(compare, index, address, namespace)

    tasks = [asyncio.create_task(one(i)) for i in range(len(compare.choices))]
    try:
        await asyncio.gather(*tasks)
    finally:
        # One lane failed (or we were cancelled): the others stop too (their children
        # are killed by _lane's own cleanup).
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return [results[i] for i in range(len(compare.choices))]


async def _lane(compare: CompareRun, index: int, address: str, namespace: str) -> PolicyResult:
    from whatif.runner import PolicyResult, Progress

    name = compare.choices[index].name
    err_path = Path(compare.run_dir) / f"lane-{index}-{name}.err"
    with err_path.open("wb") as err:
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "whatif.lane",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=err,
            limit=LINE_LIMIT,
        )
    try:
        assert child.stdin is not None
        assert child.stdout is not None
        child.stdin.write(json.dumps(lane_spec(compare, index, address, namespace)).encode())
        child.stdin.close()
        result: PolicyResult | None = None
        error: str | None = None
        stray: list[str] = []
        async for line in child.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                stray.append(line.decode(errors="replace").rstrip())  # not ours: kept for errors
                continue
            if not isinstance(message, dict):
                continue
            if "progress" in message and compare.on_progress is not None:
                compare.on_progress(Progress(**message["progress"]))
            elif "result" in message:
                result = PolicyResult.model_validate(message["result"])
            elif "error" in message:
                error = str(message["error"])
        code = await child.wait()
    finally:
        if child.returncode is None:
            await _stop(child)
    if result is None or code != 0:
        tail = "\n".join(stray[-20:]) + err_path.read_text(errors="replace")[-2000:]
        what = error or ("no result" if result is None else "it ended badly after its result")
        raise CompareError(f"policy {name!r} (child process, exit {code}): {what}\n{tail}")
    return result


async def _stop(child: asyncio.subprocess.Process) -> None:
    """SIGTERM (the child stops its worker and fleet), then SIGKILL after STOP_TIMEOUT."""
    with contextlib.suppress(ProcessLookupError):
        child.terminate()
    try:
        await asyncio.wait_for(child.wait(), STOP_TIMEOUT)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            child.kill()
        await child.wait()
