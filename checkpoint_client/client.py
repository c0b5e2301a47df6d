"""What training code calls: is a checkpoint requested, save, answer."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path

from checkpoint_client.downward import AnnotationsFormatError, read_annotations
from checkpoint_client.kube import SERVICE_ACCOUNT_DIR, KubeConfig, KubeError, patch_pod_annotations
from checkpoint_client.protocol import (
    ANSWER_ANNOTATION,
    REQUEST_ANNOTATION,
    STEP_TIME_ANNOTATION,
    Answer,
    ProtocolError,
    Request,
    StepTime,
    parse_answer,
    parse_request,
)

log = logging.getLogger(__name__)

PODINFO_DIR = Path("/etc/podinfo")
STEP_TIME_INTERVAL = 60.0
"""Seconds between two step-time reports of one pod at most once: each is an API write."""


class CheckpointClientError(RuntimeError):
    """The helper cannot do its part (no pod identity, unreadable annotations, a failed answer)."""


def _read_small(path: Path) -> str | None:
    try:
        with path.open("rb") as handle:
            text = handle.read(1024).decode(errors="replace").strip()
    except OSError:
        return None
    return text or None


class CheckpointClient:
    """The job's side of the checkpoint handshake (docs/checkpoint-contract.md).

    Args:
        namespace: The pod's namespace.
        pod_name: The pod's name (``metadata.name``, not its hostname).
        annotations_path: The downward-API file with the pod's annotations.
        kube: How to reach the API server (default: in-cluster, created on first answer).
        clock: Returns "now" for ``saved_at`` (aware UTC).
    """

    def __init__(
        self,
        *,
        namespace: str,
        pod_name: str,
        annotations_path: Path = PODINFO_DIR / "annotations",
        kube: KubeConfig | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        if not namespace or not pod_name:
            raise CheckpointClientError("namespace and pod_name are required")
        self.namespace = namespace
        self.pod_name = pod_name
        self.annotations_path = annotations_path
        self._kube = kube
        self._clock = clock or (lambda: datetime.now(UTC))
        self._answered: set[str] = set()
        self._warned: set[str] = set()
        self._last_step_report: datetime | None = None

    @classmethod
    def from_environment(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        podinfo_dir: Path = PODINFO_DIR,
        service_account_dir: Path = SERVICE_ACCOUNT_DIR,
    ) -> CheckpointClient:
        """The client for the pod it runs in.

        The pod's name and namespace come from ``POD_NAME`` / ``POD_NAMESPACE`` (downward
        API env vars), else from ``name`` / ``namespace`` files in ``podinfo_dir``, and the
        namespace last from the service account's ``namespace`` file.

        Raises:
            CheckpointClientError: The pod's name or namespace cannot be found.
        """
        env = os.environ if env is None else env
        name = env.get("POD_NAME") or _read_small(podinfo_dir / "name")
        namespace = (
            env.get("POD_NAMESPACE")
            or _read_small(podinfo_dir / "namespace")
            or _read_small(service_account_dir / "namespace")
        )
        if not name or not namespace:
            raise CheckpointClientError(
                "cannot tell which pod this is: set POD_NAME and POD_NAMESPACE from the downward "
                "API (fieldRef metadata.name / metadata.namespace), see "
                "deploy/examples/checkpoint-training-job.yaml"
            )
        try:
            kube = KubeConfig.in_cluster(env, service_account_dir=service_account_dir)
        except KubeError as err:
            raise CheckpointClientError(str(err)) from err
        return cls(
            namespace=namespace,
            pod_name=name,
            annotations_path=podinfo_dir / "annotations",
            kube=kube,
        )

    # ------------------------------------------------------------------ reading

    def pending(self) -> Request | None:
        """The request this pod has not answered yet, or None.

        A malformed request is logged (once per value) and treated as none: the
        system's bug must not stop the training loop.

        Raises:
            CheckpointClientError: The annotations file is missing or unreadable (the
                downward-API volume is not mounted as documented).
        """
        try:
            annotations = read_annotations(self.annotations_path)
        except (OSError, AnnotationsFormatError) as err:
            raise CheckpointClientError(
                f"cannot read the pod's annotations from {self.annotations_path}: {err} "
                "(mount metadata.annotations with a downwardAPI volume)"
            ) from err
        raw = annotations.get(REQUEST_ANNOTATION)
        if raw is None:
            return None
        try:
            request = parse_request(raw)
        except ProtocolError as err:
            if raw not in self._warned:
                self._warned.add(raw)
                log.warning("ignoring a malformed checkpoint request: %s", err)
            return None
        if request.incident in self._answered:
            return None
        answered = annotations.get(ANSWER_ANNOTATION)
        if answered is not None:
            try:
                if parse_answer(answered).incident == request.incident:
                    # Answered before this process started (a restarted container).
                    self._answered.add(request.incident)
                    return None
            except ProtocolError:
                pass  # not a valid answer: answer again
        return request

    # ------------------------------------------------------------------ answering

    def answer(self, request: Request, *, step: int, saved_at: datetime | None = None) -> Answer:
        """Tell the system the checkpoint for ``request`` is durable (writes the answer).

        Call it once the checkpoint is on durable storage, from one pod of the job.

        Raises:
            CheckpointClientError: The answer is invalid or the patch failed (with the
                API server's reason, e.g. Forbidden when the Role is missing).
        """
        return self._write(
            request, Answer(request.incident, step, saved_at or self._clock(), refused=None)
        )

    def refuse(self, request: Request, why: str) -> Answer:
        """Tell the system this job will not checkpoint now, so it stops waiting.

        Raises:
            CheckpointClientError: The answer is too large or the patch failed.
        """
        return self._write(request, Answer(request.incident, None, None, refused=why))

    def checkpoint_if_requested(
        self, save: Callable[[], int], *, include_when_idle: bool = False
    ) -> Answer | None:
        """If a request waits, call ``save()`` (returning the saved step) and answer it.

        ``when_idle`` requests are left for :meth:`after_save` (the next checkpoint the
        job takes anyway) unless ``include_when_idle``.

        Returns:
            The answer written, or None when nothing was requested.

        Raises:
            CheckpointClientError: See :meth:`pending` and :meth:`answer`; an exception
                from ``save`` propagates and nothing is answered.
        """
        request = self.pending()
        if request is None or not (request.urgent or include_when_idle):
            return None
        step = save()
        return self.answer(request, step=step)

    def after_save(self, step: int, saved_at: datetime | None = None) -> Answer | None:
        """Call after every checkpoint the job saves anyway: answers a waiting request with it.

        Raises:
            CheckpointClientError: See :meth:`pending` and :meth:`answer`.
        """
        request = self.pending()
        if request is None:
            return None
        return self.answer(request, step=step, saved_at=saved_at)

    # ------------------------------------------------------------------ step times

    def report_step_time(
        self, step: int, seconds: float, steps: int, *, every: float = STEP_TIME_INTERVAL
    ) -> StepTime | None:
        """Write this pod's mean time per step over its last ``steps`` steps, up to ``step``.

        Optional (docs/checkpoint-contract.md, "Step times"): the system compares
        it with the rest of the job's pods to find a node slower than its gang.
        Call it as often as convenient; it writes at most once per ``every``
        seconds (an API write each time) and returns None when it did not write.

        Raises:
            CheckpointClientError: The values break the contract or the patch failed.
        """
        now = self._clock()
        last = self._last_step_report
        if last is not None and (now - last).total_seconds() < every:
            return None
        report = StepTime(step=step, seconds=seconds, steps=steps)
        try:
            value = report.to_json()
        except ProtocolError as err:
            raise CheckpointClientError(str(err)) from err
        self._patch({STEP_TIME_ANNOTATION: value}, f"could not report step {step}'s time")
        self._last_step_report = now
        return report

    def _patch(self, annotations: dict[str, str], what: str) -> None:
        if self._kube is None:
            try:
                self._kube = KubeConfig.in_cluster()
            except KubeError as err:
                raise CheckpointClientError(str(err)) from err
        try:
            patch_pod_annotations(self._kube, self.namespace, self.pod_name, annotations)
        except KubeError as err:
            raise CheckpointClientError(f"{what}: {err}") from err

    def _write(self, request: Request, answer: Answer) -> Answer:
        try:
            value = answer.to_json()
        except ProtocolError as err:
            raise CheckpointClientError(str(err)) from err
        self._patch(
            {ANSWER_ANNOTATION: value}, f"could not answer checkpoint request {request.incident}"
        )
        self._answered.add(request.incident)
        log.info("answered checkpoint request %s (step %s)", request.incident, answer.step)
        return answer
