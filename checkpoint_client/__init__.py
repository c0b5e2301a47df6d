"""The job's side of gpu-remediation's checkpoint handshake, standard library only.

Before gpu-remediation disrupts a node it writes a checkpoint request on the
pods of each opted-in job there; the job saves and answers on its own pod
(docs/checkpoint-contract.md). In a training loop::

    from checkpoint_client import CheckpointClient

    handshake = CheckpointClient.from_environment()
    for step in range(start, total_steps):
        train_step()
        if step % 1000 == 0:
            save(step)
            handshake.after_save(step)  # a waiting request is answered by this checkpoint
        elif step % 20 == 0:
            handshake.checkpoint_if_requested(lambda: save(step))  # save returns the step

In a multi-rank job let rank 0 call :meth:`CheckpointClient.pending`, broadcast
the decision so every rank saves at the same step, and answer from rank 0 once
the checkpoint is durable. See deploy/examples/ for the pod spec and RBAC.

Optionally, each pod reports its own time per step, so a node slower than the
rest of its gang is found (docs/checkpoint-contract.md, "Step times")::

    handshake.report_step_time(step, seconds=compute_seconds, steps=window)

from one process per pod (its local rank 0, with the slowest of the pod's ranks);
it writes at most once a minute.
"""

from checkpoint_client.client import CheckpointClient, CheckpointClientError
from checkpoint_client.downward import AnnotationsFormatError, parse_annotations, read_annotations
from checkpoint_client.kube import KubeConfig, KubeError, patch_pod_annotations
from checkpoint_client.protocol import (
    ANSWER_ANNOTATION,
    MAX_ANSWER_BYTES,
    OPT_IN_ANNOTATION,
    REQUEST_ANNOTATION,
    STEP_TIME_ANNOTATION,
    SUPPORTED,
    Answer,
    ProtocolError,
    Request,
    StepTime,
    format_time,
    parse_answer,
    parse_request,
    parse_step_time,
)

__all__ = [
    "ANSWER_ANNOTATION",
    "MAX_ANSWER_BYTES",
    "OPT_IN_ANNOTATION",
    "REQUEST_ANNOTATION",
    "STEP_TIME_ANNOTATION",
    "SUPPORTED",
    "AnnotationsFormatError",
    "Answer",
    "CheckpointClient",
    "CheckpointClientError",
    "KubeConfig",
    "KubeError",
    "ProtocolError",
    "Request",
    "StepTime",
    "format_time",
    "parse_annotations",
    "parse_answer",
    "parse_request",
    "parse_step_time",
    "patch_pod_annotations",
    "read_annotations",
]
