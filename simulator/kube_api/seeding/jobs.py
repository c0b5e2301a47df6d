"""Job status as the job controller writes it, and the Job's pods."""

from __future__ import annotations

import secrets

from ..resources import JOBS, PODS
from .base import SeedingBase
from .objects import JSON, owner_reference


class JobSeeding(SeedingBase):
    """Job helpers of :class:`~simulator.kube_api.seeding.KubeStore` (no job controller runs)."""

    def set_job_status(self, namespace: str, name: str, status: JSON) -> JSON:
        """Replace a Job's status (the emulator runs no job controller)."""

        def change(job: JSON) -> None:
            job["status"] = dict(status)

        return self.mutate(JOBS, name, namespace, change)

    def finish_job(
        self,
        namespace: str,
        name: str,
        *,
        succeeded: bool = True,
        reason: str | None = None,
        message: str = "",
        failed_pods: int = 1,
    ) -> JSON:
        """Give a Job the terminal status the job controller would write.

        Args:
            namespace: Namespace of the Job.
            name: Job name.
            succeeded: Complete (one pod succeeded) or Failed.
            reason: Condition reason; ``CompletionsReached`` or ``BackoffLimitExceeded``
                by default (``DeadlineExceeded`` when activeDeadlineSeconds passed).
            message: Condition message.
            failed_pods: ``status.failed`` of a failed Job (0 when no pod ever ran).
        """
        now = self.now()
        if succeeded:
            why = reason or "CompletionsReached"
            conds = [
                {"type": "SuccessCriteriaMet", "status": "True", "reason": why},
                {"type": "Complete", "status": "True", "reason": why},
            ]
            status: JSON = {"succeeded": 1, "completionTime": now}
        else:
            why = reason or "BackoffLimitExceeded"
            conds = [
                {"type": "FailureTarget", "status": "True", "reason": why},
                {"type": "Failed", "status": "True", "reason": why},
            ]
            status = {"failed": failed_pods} if failed_pods else {}
        for cond in conds:
            cond.update(message=message, lastProbeTime=now, lastTransitionTime=now)
        start = (self.get(JOBS, name, namespace).get("status") or {}).get("startTime", now)
        return self.set_job_status(
            namespace,
            name,
            {**status, "startTime": start, "active": 0, "ready": 0, "conditions": conds},
        )

    def add_job_pod(
        self,
        namespace: str,
        job_name: str,
        *,
        node_name: str | None = None,
        phase: str = "Running",
        ready: bool = False,
    ) -> JSON:
        """Create a pod of the Job from its template, as the job controller would.

        The pod gets the template's labels and an ownerReference to the Job, and counts
        in the Job's ``status.active`` while it is Pending or Running.
        """
        with self.lock:
            job = self.get(JOBS, job_name, namespace)
            template = job["spec"]["template"]
            suffix = "".join(secrets.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
            spec = dict(template.get("spec") or {})
            if node_name is not None:
                spec["nodeName"] = node_name
            pod: JSON = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{job_name}-{suffix}",
                    "namespace": namespace,
                    # The labels the job controller adds to every pod it creates.
                    "labels": {
                        **dict((template.get("metadata") or {}).get("labels") or {}),
                        "batch.kubernetes.io/job-name": job_name,
                        "job-name": job_name,
                        "batch.kubernetes.io/controller-uid": job["metadata"]["uid"],
                        "controller-uid": job["metadata"]["uid"],
                    },
                    "ownerReferences": [owner_reference("Job", job_name, job["metadata"]["uid"])],
                },
                "spec": spec,
                "status": self._pod_status({}, phase, ready),
            }
            created = self.create_object(PODS, pod, namespace, keep_status=True)
            if phase in ("Pending", "Running"):
                status = dict(job.get("status") or {})
                status.setdefault("startTime", self.now())
                status["active"] = int(status.get("active", 0)) + 1
                self.set_job_status(namespace, job_name, status)
            return created
