"""API errors carried as real ``metav1.Status`` bodies.

Every failure the emulator reports is an :class:`ApiError`; the HTTP layer turns it into
the status code and the JSON ``Status`` object the real kube-apiserver sends, so the
official client raises ``ApiException`` with the same ``status``, ``reason`` and body.
"""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]


class ApiError(Exception):
    """A Kubernetes API failure: an HTTP code plus a ``Status`` body."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: JSON | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.retry_after = retry_after

    def status(self) -> JSON:
        """Return the ``Status`` object the real API server would send."""
        return status_body(
            "Failure", self.code, reason=self.reason, message=self.message, details=self.details
        )


def status_body(
    status: str,
    code: int,
    *,
    reason: str | None = None,
    message: str | None = None,
    details: JSON | None = None,
) -> JSON:
    """Build a ``metav1.Status`` dict (``Success`` or ``Failure``)."""
    body: JSON = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": status}
    if message is not None:
        body["message"] = message
    if reason is not None:
        body["reason"] = reason
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def _details(name: str, group: str, kind: str) -> JSON:
    # The real server puts the resource (plural) in details.kind and omits an empty group.
    details: JSON = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    return details


def qualified(group: str, plural: str) -> str:
    """``nodes`` for core resources, ``nodeclaims.karpenter.sh`` otherwise (as in messages)."""
    return f"{plural}.{group}" if group else plural


def not_found(group: str, plural: str, name: str) -> ApiError:
    """404 NotFound for a named object."""
    return ApiError(
        404,
        "NotFound",
        f'{qualified(group, plural)} "{name}" not found',
        details=_details(name, group, plural),
    )


def already_exists(group: str, plural: str, name: str) -> ApiError:
    """409 AlreadyExists on create."""
    return ApiError(
        409,
        "AlreadyExists",
        f'{qualified(group, plural)} "{name}" already exists',
        details=_details(name, group, plural),
    )


def conflict(group: str, plural: str, name: str, why: str) -> ApiError:
    """409 Conflict (stale resourceVersion, failed precondition)."""
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(group, plural)} "{name}": {why}',
        details=_details(name, group, plural),
    )


STALE_WRITE = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def stale(group: str, plural: str, name: str) -> ApiError:
    """409 Conflict for a write carrying an out-of-date resourceVersion."""
    return conflict(group, plural, name, STALE_WRITE)


def invalid(group: str, kind: str, name: str, causes: list[tuple[str, str]]) -> ApiError:
    """422 Invalid with field causes ``(field, message)``, worded like the real validation."""
    summary = ", ".join(f"{field}: {msg}" for field, msg in causes)
    details: JSON = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = [
        {"reason": "FieldValueInvalid", "message": msg, "field": field} for field, msg in causes
    ]
    label = f"{kind}.{group}" if group else kind
    return ApiError(422, "Invalid", f'{label} "{name}" is invalid: {summary}', details=details)


def unprocessable(message: str) -> ApiError:
    """422 for a patch that cannot be applied (e.g. a failed JSON-patch ``test``)."""
    return ApiError(422, "Invalid", message)


def bad_request(message: str) -> ApiError:
    """400 BadRequest (undecodable body, unsupported selector, bad query)."""
    return ApiError(400, "BadRequest", message)


def internal(message: str) -> ApiError:
    """500 InternalError with the message repeated as a cause, as the real server does."""
    return ApiError(
        500,
        "InternalError",
        f"Internal error occurred: {message}",
        details={"causes": [{"message": message}]},
    )


def too_many_requests(message: str, causes: list[JSON] | None = None) -> ApiError:
    """429 TooManyRequests (PodDisruptionBudget refusals carry no Retry-After)."""
    details: JSON = {}
    if causes:
        details["causes"] = causes
    return ApiError(429, "TooManyRequests", message, details=details)


def expired(message: str) -> ApiError:
    """410 Expired: a watch or continue token older than the retained history."""
    return ApiError(410, "Expired", message)


def method_not_allowed(method: str) -> ApiError:
    """405 for a verb the resource does not serve."""
    return ApiError(405, "MethodNotAllowed", f"the server does not allow this method ({method})")


def unsupported_media_type(content_type: str) -> ApiError:
    """415 for a patch type the resource does not accept."""
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format: {content_type}",
    )


def path_not_found() -> ApiError:
    """404 for a URL the server does not serve at all."""
    return ApiError(404, "NotFound", "the server could not find the requested resource")
