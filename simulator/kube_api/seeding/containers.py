"""Container states and logs, as the kubelet reports them and serves pods/log.

Container logs live on the node, not in etcd: they are keyed by pod uid, so a pod
recreated under the same name starts with no log, as a real one does.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime

from .. import errors
from ..resources import PODS
from ..watch import Change
from .base import SeedingBase
from .objects import JSON, container_status

# The kubelet keeps this much of a failed container's log as its termination message
# under terminationMessagePolicy FallbackToLogsOnError.
FALLBACK_MESSAGE_LINES = 80
FALLBACK_MESSAGE_BYTES = 2048
_LINE = re.compile(r"[^\n]*\n|[^\n]+\Z")


def _tail_lines(text: str, count: int) -> str:
    # A trailing newline ends the last line rather than starting an empty one.
    return "".join(_LINE.findall(text)[-count:]) if count > 0 else ""


class ContainerSeeding(SeedingBase):
    """Container and log helpers of :class:`~simulator.kube_api.seeding.KubeStore`."""

    def __init__(
        self,
        *,
        history_size: int = 10_000,
        clock: Callable[[], datetime] | None = None,
        pod_grace_scale: float = 0.0,
    ) -> None:
        super().__init__(history_size=history_size, clock=clock, pod_grace_scale=pod_grace_scale)
        self._logs: dict[str, dict[str, str]] = {}
        self.add_hook(self._forget_logs)

    def _forget_logs(self, change: Change) -> None:
        if change.resource == PODS.key and change.type == "DELETED":
            self._logs.pop(change.obj["metadata"]["uid"], None)

    def _container(self, pod: JSON, container: str | None) -> JSON:
        """The container a log request or status change names (the only one by default).

        Raises:
            ApiError: 400 when no container is named and the pod has several, or the
                named one is not in the pod (the real server's messages).
        """
        name = pod["metadata"]["name"]
        containers: list[JSON] = (pod.get("spec") or {}).get("containers") or []
        if container is None:
            if len(containers) == 1:
                return containers[0]
            choices = " ".join(c["name"] for c in containers)
            raise errors.bad_request(
                f"a container name must be specified for pod {name}, choose one of: [{choices}]"
            )
        for candidate in containers:
            if candidate["name"] == container:
                return candidate
        raise errors.bad_request(f"container {container} is not valid for pod {name}")

    def set_container_running(
        self, namespace: str, name: str, *, container: str | None = None
    ) -> JSON:
        """Mark a container started and running, as the kubelet reports it.

        The pod becomes Running; it is Ready once every container runs.

        Raises:
            ApiError: 404 when the pod is missing, 400 for an unknown container.
        """
        now = self.now()

        def change(pod: JSON) -> None:
            target = self._container(pod, container)
            status = pod.get("status") or {}
            statuses = {s["name"]: s for s in status.get("containerStatuses") or []}
            statuses[target["name"]] = container_status(
                target, {"running": {"startedAt": now}}, ready=True
            )
            ordered = [
                statuses[c["name"]] for c in pod["spec"]["containers"] if c["name"] in statuses
            ]
            all_running = len(ordered) == len(pod["spec"]["containers"]) and all(
                "running" in s["state"] for s in ordered
            )
            status = self._pod_status(status, "Running", all_running)
            status["containerStatuses"] = ordered
            status.setdefault("startTime", now)
            pod["status"] = status

        return self.mutate(PODS, name, namespace, change)

    def terminate_container(
        self,
        namespace: str,
        name: str,
        exit_code: int,
        *,
        container: str | None = None,
        reason: str | None = None,
        message: str | None = None,
        log: str | None = None,
    ) -> JSON:
        """Mark a container terminated with ``exit_code``, as the kubelet reports it.

        Once every container has terminated the pod is Succeeded (all exited 0) or
        Failed, as for ``restartPolicy: Never`` (nothing is restarted here).

        Args:
            namespace: Namespace of the pod.
            name: Pod name.
            exit_code: The process's exit code.
            container: Container name (the only one when omitted).
            reason: ``Completed`` for exit 0, ``Error`` otherwise, unless given
                (e.g. ``OOMKilled``).
            message: The termination message. When omitted it is empty, or for a
                failure under ``terminationMessagePolicy: FallbackToLogsOnError`` the
                log's last 80 lines (at most 2048 bytes), as the kubelet does.
            log: Replace the container's log first (see :meth:`set_pod_log`).

        Raises:
            ApiError: 404 when the pod is missing, 400 for an unknown container.
        """
        now = self.now()
        with self.lock:
            if log is not None:
                self.set_pod_log(namespace, name, log, container=container)

            def change(pod: JSON) -> None:
                target = self._container(pod, container)
                status = pod.get("status") or {}
                statuses = {s["name"]: s for s in status.get("containerStatuses") or []}
                previous = statuses.get(target["name"], {}).get("state", {})
                text = message
                if text is None:
                    text = ""
                    if exit_code != 0 and (
                        target.get("terminationMessagePolicy") == "FallbackToLogsOnError"
                    ):
                        logs = self._logs.get(pod["metadata"]["uid"], {})
                        tail = _tail_lines(logs.get(target["name"], ""), FALLBACK_MESSAGE_LINES)
                        text = tail.encode()[-FALLBACK_MESSAGE_BYTES:].decode(errors="ignore")
                terminated: JSON = {
                    "exitCode": exit_code,
                    "reason": reason or ("Completed" if exit_code == 0 else "Error"),
                    "startedAt": (previous.get("running") or {}).get("startedAt", now),
                    "finishedAt": now,
                }
                if text:
                    terminated["message"] = text
                statuses[target["name"]] = container_status(
                    target, {"terminated": terminated}, ready=False
                )
                containers = pod["spec"]["containers"]
                ordered = [statuses[c["name"]] for c in containers if c["name"] in statuses]
                finished = [s["state"]["terminated"] for s in ordered if "terminated" in s["state"]]
                phase = "Running"
                if len(finished) == len(containers):
                    ok = all(t["exitCode"] == 0 for t in finished)
                    phase = "Succeeded" if ok else "Failed"
                status = self._pod_status(status, phase, False)
                status["containerStatuses"] = ordered
                status.setdefault("startTime", now)
                pod["status"] = status

            return self.mutate(PODS, name, namespace, change)

    def set_pod_log(
        self, namespace: str, name: str, text: str, *, container: str | None = None
    ) -> None:
        """Replace a container's log (what ``GET .../pods/{name}/log`` answers).

        A real kubelet interleaves the container's stdout and stderr in one log.

        Raises:
            ApiError: 404 when the pod is missing, 400 for an unknown container.
        """
        with self.lock:
            pod = self.get(PODS, name, namespace)
            target = self._container(pod, container)
            self._logs.setdefault(pod["metadata"]["uid"], {})[target["name"]] = text

    def pod_log(
        self,
        namespace: str,
        name: str,
        *,
        container: str | None = None,
        tail_lines: int | None = None,
        limit_bytes: int | None = None,
    ) -> str:
        """Read a container's log as the pods/log subresource does.

        Args:
            namespace: Namespace of the pod.
            name: Pod name.
            container: Container name (required when the pod has several).
            tail_lines: Only the last this many lines.
            limit_bytes: At most this many bytes (from the start of what is left).

        Raises:
            ApiError: 404 when the pod is missing; 400 when the container is not
                named or unknown, the pod is not scheduled, or the container has not
                started (the real server's messages).
        """
        with self.lock:
            pod = self.get(PODS, name, namespace)
            target = self._container(pod, container)
            if not (pod.get("spec") or {}).get("nodeName"):
                raise errors.bad_request(f"pod {name} does not have a host assigned")
            status = pod.get("status") or {}
            statuses = {s["name"]: s for s in status.get("containerStatuses") or []}
            own = statuses.get(target["name"])
            if own is not None:
                started = "running" in own["state"] or "terminated" in own["state"]
            else:
                # Pods seeded by put_pod/add_job_pod carry no container statuses: a
                # phase past Pending means the containers ran.
                started = not statuses and status.get("phase") in ("Running", "Succeeded", "Failed")
            if not started:
                waiting = ((own or {}).get("state") or {}).get("waiting") or {}
                raise errors.bad_request(
                    f'container "{target["name"]}" in pod "{name}" is waiting to start: '
                    f"{waiting.get('reason', 'ContainerCreating')}"
                )
            text = self._logs.get(pod["metadata"]["uid"], {}).get(target["name"], "")
        if tail_lines is not None:
            text = _tail_lines(text, tail_lines)
        if limit_bytes is not None:
            # Cutting inside a character drops it, rather than sending half of it.
            text = text.encode()[:limit_bytes].decode(errors="ignore")
        return text
