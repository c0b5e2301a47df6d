"""A simulated kubelet and job controller for the project's host-command Jobs.

The emulator runs no controllers, so a Job created through the API would never get a
pod. :class:`JobKubelet` plays both parts for the Jobs the ``JobExecutor`` creates
(labelled ``app.kubernetes.io/managed-by=gpu-remediation``): it creates the pod on the
Job's ``nodeName``, starts its container, asks a host callback what the fixed script
does on that host, then writes the container's log and terminated state and the Job's
terminal status, as the real kubelet and job controller would.

Store hooks run under the store lock, so the hook only hands the Job to a thread of its
own; every write happens there, through the store's ordinary helpers.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import NamedTuple

from gpu_remediation.host_command import HostCommand, parse_tag

from .errors import ApiError
from .resources import JOBS
from .seeding import JSON, KubeStore
from .selectors import parse_label_selector
from .watch import Change

log = logging.getLogger(__name__)

MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-remediation"}


class HostResult(NamedTuple):
    """What the fixed script did on the host."""

    exit_code: int
    stdout: str = ""
    stderr: str = ""


HostRunner = Callable[[JSON, HostCommand | None], tuple[int, str, str] | None]
"""``(job, parsed command or None) -> (exit code, stdout, stderr)``.

None means no pod ever runs: the Job fails with ``DeadlineExceeded``, as when its pod
cannot start (image pull, admission) until ``activeDeadlineSeconds`` passes.
"""


def job_command(job: JSON) -> HostCommand | None:
    """The host command a Job's script names in its tag line, if it is one of ours.

    The container command is ``["/bin/sh", "-c", script]``; anything else, or a
    script without a valid tag, is not a command this project runs.
    """
    containers = ((job.get("spec") or {}).get("template") or {}).get("spec", {}).get(
        "containers"
    ) or []
    if len(containers) != 1:
        return None
    argv = containers[0].get("command") or []
    if len(argv) != 3 or argv[:2] != ["/bin/sh", "-c"] or not isinstance(argv[2], str):
        return None
    try:
        return parse_tag(argv[2].split("\n"))
    except ValueError:
        # A malformed tag (bad JSON, invalid arguments) is an unknown script.
        return None


class JobKubelet:
    """Runs matching Jobs of a :class:`KubeStore` on simulated hosts.

    Args:
        store: The emulated cluster.
        runner: Decides each command's result (see :data:`HostRunner`).
        selector: Labels a Job must carry to be run here.
        start_delay: Seconds between the Job's creation and its pod starting
            (the pod is Pending meanwhile).
        run_delay: Seconds the container runs before it terminates.

    Per Job: wait ``start_delay``; ask ``runner`` for the result (it decides whether a
    pod runs at all); create the pod (Pending) and start its container (Running);
    wait ``run_delay``; write the log and terminated state; finish the Job.
    """

    def __init__(
        self,
        store: KubeStore,
        runner: HostRunner,
        *,
        selector: Mapping[str, str] = MANAGED_BY,
        start_delay: float = 0.0,
        run_delay: float = 0.0,
    ) -> None:
        self.store = store
        self.runner = runner
        self.start_delay = start_delay
        self.run_delay = run_delay
        self.seen: list[tuple[JSON, HostCommand | None]] = []
        self.errors: list[BaseException] = []
        self._selector = parse_label_selector(",".join(f"{k}={v}" for k, v in selector.items()))
        self._stopping = threading.Event()
        self._threads: set[threading.Thread] = set()
        self._lock = threading.Lock()
        self._started = False

    def start(self) -> JobKubelet:
        """Begin running Jobs created from now on."""
        if not self._started:
            self._started = True
            self.store.add_hook(self._on_change)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop: no new Jobs are run and pending delays end; wait for running ones.

        Raises:
            RuntimeError: When a runner or a store write failed while running a Job,
                so a broken simulation does not pass unnoticed.
        """
        self._stopping.set()
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout)
        if self.errors:
            raise RuntimeError(f"simulated kubelet failed: {self.errors[0]!r}") from self.errors[0]

    def __enter__(self) -> JobKubelet:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _on_change(self, change: Change) -> None:
        # Under the store lock: only decide and hand over, never write from here.
        if change.resource != JOBS.key or change.type != "ADDED" or self._stopping.is_set():
            return
        if not self._selector.matches((change.obj.get("metadata") or {}).get("labels") or {}):
            return
        job = copy.deepcopy(change.obj)  # the thread must not share the stored object
        meta = job["metadata"]
        thread = threading.Thread(
            target=self._run,
            args=(meta["namespace"], meta["name"], job),
            name=f"job-kubelet-{meta['name']}",
            daemon=True,
        )
        with self._lock:
            self._threads.add(thread)
        thread.start()

    def _run(self, namespace: str, name: str, job: JSON) -> None:
        try:
            self._simulate(namespace, name, job)
        except ApiError as exc:
            if exc.code != 404:
                self._failed(exc)
            # 404: the Job (and so its pod) was deleted mid-run; a real kubelet would
            # kill the container and nothing would be left to report.
            log.debug("job %s/%s gone while running: %s", namespace, name, exc)
        except Exception as exc:
            self._failed(exc)
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def _failed(self, exc: BaseException) -> None:
        log.error("simulated kubelet failed", exc_info=exc)
        self.errors.append(exc)

    def _simulate(self, namespace: str, name: str, job: JSON) -> None:
        command = job_command(job)
        self.seen.append((job, command))
        if self._stopping.wait(self.start_delay):
            return
        spec = (job["spec"]["template"].get("spec")) or {}
        result = self.runner(job, command)
        if result is None:
            deadline = job["spec"].get("activeDeadlineSeconds")
            self.store.finish_job(
                namespace,
                name,
                succeeded=False,
                reason="DeadlineExceeded",
                message=f"Job was active longer than specified deadline ({deadline}s)",
                failed_pods=0,
            )
            return
        exit_code, stdout, stderr = result
        pod = self.store.add_job_pod(
            namespace, name, node_name=spec.get("nodeName"), phase="Pending"
        )
        pod_name = pod["metadata"]["name"]
        self.store.set_container_running(namespace, pod_name)
        if self._stopping.wait(self.run_delay):
            return
        # The kubelet keeps one log of both streams in the order written; the fixed
        # scripts print their (encoded) result last, after any diagnostics on stderr.
        self.store.terminate_container(namespace, pod_name, exit_code, log=stderr + stdout)
        self.store.finish_job(namespace, name, succeeded=exit_code == 0)
