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
"""

from checkpoint_client.client import CheckpointClient, CheckpointClientError
from checkpoint_client.downward import AnnotationsFormatError, parse_annotations, read_annotations
from checkpoint_client.kube import KubeConfig, KubeError, patch_pod_annotations
from checkpoint_client.protocol import (
    ANSWER_ANNOTATION,
    MAX_ANSWER_BYTES,
    OPT_IN_ANNOTATION,
    REQUEST_ANNOTATION,
    SUPPORTED,
    Answer,
    ProtocolError,
    Request,
    format_time,
    parse_answer,
    parse_request,
)

__all__ = [
    "ANSWER_ANNOTATION",
    "MAX_ANSWER_BYTES",
    "OPT_IN_ANNOTATION",
    "REQUEST_ANNOTATION",
    "SUPPORTED",
    "AnnotationsFormatError",
    "Answer",
    "CheckpointClient",
    "CheckpointClientError",
    "KubeConfig",
    "KubeError",
    "ProtocolError",
    "Request",
    "format_time",
    "parse_annotations",
    "parse_answer",
    "parse_request",
    "patch_pod_annotations",
    "read_annotations",
]
