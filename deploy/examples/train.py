"""An example training loop that speaks gpu-remediation's checkpoint handshake.

It runs in the pod of ``checkpoint-training-job.yaml`` (beside this file), with
``checkpoint_client`` on its path (``pip install`` the project, or copy the
``checkpoint_client/`` folder next to your code: it needs only the standard
library). What it shows:

- it resumes from its latest checkpoint when it starts (a restarted pod, e.g.
  after gpu-remediation drained its node, continues where it saved);
- it saves every ``--checkpoint-every`` steps anyway, and each of those saves
  answers a waiting ``when_idle`` request (``after_save``);
- between saves it looks for a ``checkpoint_first`` request every
  ``--poll-every`` steps (a file read, no API call) and saves at once when one
  waits, then answers on its own pod (one merge PATCH, the only API call).

A checkpoint is written to a temporary file, flushed to disk, then renamed, so
the answer never names a checkpoint that is not durable. Replace ``train_step``
and the checkpoint's contents with your model's; in a multi-rank job let rank 0
call ``handshake.pending()``, broadcast the decision, save on every rank, and
answer from rank 0 once all ranks' shards are durable.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

from checkpoint_client import CheckpointClient, CheckpointClientError

log = logging.getLogger("train")

CHECKPOINT_FILE = "checkpoint.json"


def load_checkpoint(directory: Path) -> tuple[int, dict[str, float]]:
    """The latest checkpoint's step and state (step 0 and an empty state without one)."""
    path = directory / CHECKPOINT_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return 0, {}
    return int(data["step"]), dict(data["state"])


def save_checkpoint(directory: Path, step: int, state: dict[str, float]) -> int:
    """Write the checkpoint durably (temporary file, fsync, rename); returns its step."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / (CHECKPOINT_FILE + ".tmp")
    with tmp.open("w") as handle:
        json.dump({"step": step, "state": state}, handle)
        handle.flush()
        os.fsync(handle.fileno())
    tmp.replace(directory / CHECKPOINT_FILE)
    log.info("checkpoint saved at step %d", step)
    return step


def train_step(step: int, state: dict[str, float]) -> None:
    """Stands in for a real optimiser step."""
    state["loss"] = 1.0 / (step + 1)


def train(
    handshake: CheckpointClient,
    directory: Path,
    *,
    total_steps: int,
    checkpoint_every: int,
    poll_every: int,
    step_fn: Callable[[int, dict[str, float]], None] = train_step,
) -> int:
    """Train from the latest checkpoint to ``total_steps``; returns the last step done.

    A failed answer is logged and training goes on: the system drains the node at the
    request's deadline anyway, and the job resumes from its latest checkpoint.

    Raises:
        CheckpointClientError: At the start, when the pod cannot read its annotations
            (the error says what to mount): a misconfigured pod fails loudly.
    """
    handshake.pending()  # fails now, not at the first request, when the volume is missing
    step, state = load_checkpoint(directory)
    if step:
        log.info("resuming from the checkpoint at step %d", step)
    while step < total_steps:
        step_fn(step, state)
        step += 1
        try:
            if step % checkpoint_every == 0 or step == total_steps:
                save_checkpoint(directory, step, state)
                handshake.after_save(step)  # answers a waiting request with this checkpoint
            elif step % poll_every == 0:
                handshake.checkpoint_if_requested(partial(save_checkpoint, directory, step, state))
        except CheckpointClientError as err:
            log.warning("checkpoint handshake: %s", err)
    return step


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python train.py --checkpoint-dir /checkpoints --steps 100000``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint-dir", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--checkpoint-every", type=int, default=2_000)
    parser.add_argument("--poll-every", type=int, default=20)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        handshake = CheckpointClient.from_environment()
        train(
            handshake,
            args.checkpoint_dir,
            total_steps=args.steps,
            checkpoint_every=args.checkpoint_every,
            poll_every=args.poll_every,
        )
    except CheckpointClientError as err:
        log.error("%s", err)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
