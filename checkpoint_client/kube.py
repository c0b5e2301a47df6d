"""The one Kubernetes call the job makes: a merge patch of its own pod's annotations.

In-cluster configuration as client-go's ``rest.InClusterConfig`` reads it:
``KUBERNETES_SERVICE_HOST`` / ``KUBERNETES_SERVICE_PORT``, the service
account's token and CA under ``/var/run/secrets/kubernetes.io/serviceaccount``.
The token is read afresh for every request (the kubelet rotates bound tokens).
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
MERGE_PATCH = "application/merge-patch+json"
MAX_RESPONSE_BYTES = 1024 * 1024
MAX_TOKEN_BYTES = 64 * 1024


class KubeError(RuntimeError):
    """The API server could not be reached or refused the patch; the message says why.

    Attributes:
        status: The HTTP status (None when no response arrived).
        reason: The ``Status`` reason (``Forbidden``, ``NotFound``...), when given.
    """

    def __init__(self, message: str, status: int | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


@dataclass(frozen=True, slots=True)
class KubeConfig:
    """Where the API server is and how to authenticate to it.

    Attributes:
        base_url: ``https://host:port`` (no trailing slash).
        token_path: File with the bearer token (None: send none).
        ca_path: CA bundle to verify the server with (None: the system's).
        timeout: Seconds per request.
    """

    base_url: str
    token_path: Path | None = SERVICE_ACCOUNT_DIR / "token"
    ca_path: Path | None = SERVICE_ACCOUNT_DIR / "ca.crt"
    timeout: float = 10.0

    @classmethod
    def in_cluster(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        service_account_dir: Path = SERVICE_ACCOUNT_DIR,
    ) -> KubeConfig:
        """The pod's own configuration (``KUBERNETES_SERVICE_HOST``/``_PORT``, token, CA).

        Raises:
            KubeError: Not running in a pod (the variables are missing).
        """
        env = os.environ if env is None else env
        host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
        if not host or not port:
            raise KubeError(
                "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set: not in a pod "
                "(pass KubeConfig(base_url=...) to run elsewhere)"
            )
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"  # an IPv6 service address
        return cls(
            base_url=f"https://{host}:{port}",
            token_path=service_account_dir / "token",
            ca_path=service_account_dir / "ca.crt",
        )


def _read_token(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_TOKEN_BYTES + 1)
    except OSError as err:
        raise KubeError(f"cannot read the service account token {path}: {err}") from err
    if len(data) > MAX_TOKEN_BYTES:
        raise KubeError(f"the service account token {path} is larger than {MAX_TOKEN_BYTES} bytes")
    token = data.decode(errors="replace").strip()
    if not token:
        raise KubeError(f"the service account token {path} is empty")
    return token


def _status_message(body: bytes) -> tuple[str, str]:
    try:
        status = json.loads(body)
    except ValueError:
        return body[:200].decode(errors="replace"), ""
    if isinstance(status, dict):
        return str(status.get("message", "")), str(status.get("reason", ""))
    return "", ""


def patch_pod_annotations(
    config: KubeConfig, namespace: str, name: str, annotations: Mapping[str, str | None]
) -> dict[str, Any]:
    """Merge-patch ``metadata.annotations`` of pod ``namespace/name`` (None removes a key).

    Returns:
        The pod as the API server returned it.

    Raises:
        KubeError: Unreachable, TLS or token trouble, or a non-2xx answer (403 means the
            Role in deploy/examples/checkpoint-rbac.yaml is missing).
    """
    path = (
        f"/api/v1/namespaces/{urllib.parse.quote(namespace, safe='')}"
        f"/pods/{urllib.parse.quote(name, safe='')}"
    )
    body = json.dumps({"metadata": {"annotations": dict(annotations)}}).encode()
    headers = {"Content-Type": MERGE_PATCH, "Accept": "application/json"}
    if config.token_path is not None:
        headers["Authorization"] = f"Bearer {_read_token(config.token_path)}"
    request = urllib.request.Request(
        config.base_url.rstrip("/") + path, data=body, headers=headers, method="PATCH"
    )
    context = None
    if config.base_url.startswith("https:"):
        try:
            context = ssl.create_default_context(
                cafile=str(config.ca_path) if config.ca_path is not None else None
            )
        except (OSError, ssl.SSLError) as err:
            raise KubeError(f"cannot load the CA bundle {config.ca_path}: {err}") from err
    where = f"PATCH pod {namespace}/{name}"
    try:
        with urllib.request.urlopen(request, timeout=config.timeout, context=context) as resp:
            data = resp.read(MAX_RESPONSE_BYTES + 1)
    except urllib.error.HTTPError as err:
        message, reason = _status_message(err.read(MAX_RESPONSE_BYTES))
        raise KubeError(
            f"{where}: HTTP {err.code} {reason or err.reason}: {message}".rstrip(": "),
            status=err.code,
            reason=reason,
        ) from err
    except (urllib.error.URLError, OSError) as err:
        why = err.reason if isinstance(err, urllib.error.URLError) else err
        raise KubeError(f"{where}: cannot reach {config.base_url}: {why}") from err
    if len(data) > MAX_RESPONSE_BYTES:
        raise KubeError(f"{where}: the response is larger than {MAX_RESPONSE_BYTES} bytes")
    try:
        pod = json.loads(data)
    except ValueError as err:
        raise KubeError(f"{where}: the response is not JSON") from err
    if not isinstance(pod, dict):
        raise KubeError(f"{where}: the response is not a JSON object")
    return pod
