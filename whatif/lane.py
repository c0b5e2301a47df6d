"""One policy of a comparison in a process of its own (``python -m whatif.lane``).

Reads the lane's spec (``whatif.lanes.lane_spec``) as JSON on stdin, runs the
policy as the sequential comparison would (``CompareRun.run_policy``) against the
parent's dev server, and writes JSON lines on stdout: ``{"progress": ...}`` after
each sample, then ``{"result": ...}`` or ``{"error": ...}``. Logs go to the
comparison's directory (``compare-<index>.log``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from rich.console import Console


def _emit(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


async def run(spec: dict[str, Any]) -> int:
    """Run the lane ``spec`` describes; 0 when it produced a result."""
    # Imported here: the simulator and the worker's dependencies load only now.
    from demo.server import connect
    from whatif.logs import log_to
    from whatif.options import CompareError, CompareOptions
    from whatif.runner import CompareRun

    index = int(spec["index"])
    run_dir = Path(spec["run_dir"])
    try:
        compare = CompareRun(
            CompareOptions.model_validate(spec["options"]),
            ui=Console(quiet=True),
            on_progress=lambda p: _emit({"progress": dataclasses.asdict(p)}),
            tag=str(spec["tag"]),
            run_dir=run_dir,
        )
        with log_to(run_dir / f"compare-{index}.log"):
            # Clock-free, the lane starts a test server of its own (run_policy).
            client = (
                None
                if compare.clock_free
                else await connect(str(spec["address"]), str(spec["namespace"]))
            )
            result = await compare.run_policy(index, client, str(spec["address"]))
    except (CompareError, RuntimeError, TimeoutError, OSError) as err:
        _emit({"error": f"{type(err).__name__}: {err}"})
        return 1
    _emit({"result": result.model_dump(mode="json")})
    return 0


async def _main(spec: dict[str, Any]) -> int:
    # SIGTERM from the parent (another lane failed, or it was interrupted): cancel the
    # run, so the stack's cleanup stops this lane's worker process and fleet.
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    return await run(spec)


def main() -> None:
    """The child's entry point."""
    spec = json.loads(sys.stdin.read())
    code = asyncio.run(_main(spec))
    # Everything the lane reports is written and flushed by now. Skipping the
    # interpreter's finalization is deliberate: a Temporal runtime thread that
    # touches the GIL while Python finalizes aborts the process (seen once:
    # "PyGILState_Release: thread state ... must be current", exit -6), which
    # turned a finished lane into a failed comparison.
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code)


if __name__ == "__main__":
    main()
