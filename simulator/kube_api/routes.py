"""URL routing and request handling, independent of sockets.

Paths are the real API's: ``/api/v1/nodes/{name}/status``,
``/api/v1/namespaces/{ns}/pods/{name}/eviction``, ``/apis/karpenter.sh/v1/nodeclaims``...
A handler returns a :class:`Response`, or a :class:`WatchStream` the server streams.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import discovery, errors
from .errors import ApiError, status_body
from .faults import FaultInjector, FaultRule, RequestRecord
from .patching import JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH
from .resources import PODS, ResourceType, lookup
from .seeding import KubeStore
from .selectors import parse_field_selector, parse_label_selector
from .watch import Watcher

JSON = dict[str, Any]
ADMIN_PREFIX = "/_emulator/"


@dataclass(frozen=True)
class Request:
    """An HTTP request as the router sees it."""

    method: str
    path: str
    query: Mapping[str, str]
    content_type: str
    body: bytes


@dataclass
class Response:
    """A complete (non-streamed) answer."""

    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"


@dataclass
class WatchStream:
    """A watch to stream: events from ``watcher``, or a single ERROR for ``error``."""

    watcher: Watcher | None
    error: ApiError | None
    timeout: float
    bookmarks: bool


def error_response(exc: ApiError) -> Response:
    """Render an :class:`ApiError` as the real server does."""
    headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after is not None else {}
    return Response(exc.code, exc.status(), headers)


def _decode(body: bytes, required: bool = True) -> Any:
    if not body.strip():
        if required:
            raise errors.bad_request("the body of the request is empty")
        return None
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise errors.bad_request(f"couldn't get version/kind; json parse error: {exc}") from None


def _record_json(record: RequestRecord) -> JSON:
    return {
        "method": record.method,
        "path": record.path,
        "query": record.query,
        "status": record.status,
        "fault": record.fault,
        "duration": record.duration,
    }


@dataclass(frozen=True)
class _Target:
    rtype: ResourceType
    namespace: str | None  # None: all namespaces (or cluster-scoped)
    name: str | None
    subresource: str | None


class Router:
    """Maps requests to store operations.

    Args:
        store: The cluster state.
        faults: Fault rules and request log (for the admin endpoints).
        server_address: ``host:port`` advertised by ``/api``.
        default_watch_timeout: Watch duration when the client gives no timeoutSeconds.
    """

    def __init__(
        self,
        store: KubeStore,
        faults: FaultInjector,
        *,
        server_address: str,
        default_watch_timeout: float,
    ) -> None:
        self.store = store
        self.faults = faults
        self.server_address = server_address
        self.default_watch_timeout = default_watch_timeout

    def handle(self, req: Request) -> Response | WatchStream:
        """Serve one request; API failures become Status responses."""
        try:
            if req.path.startswith(ADMIN_PREFIX):
                return self._admin(req)
            return self._api(req)
        except ApiError as exc:
            return error_response(exc)

    # ------------------------------------------------------------------ routing

    def _api(self, req: Request) -> Response | WatchStream:
        parts = [p for p in req.path.split("/") if p]
        if req.method == "GET":
            doc = self._discovery(parts)
            if doc is not None:
                return doc
        if len(parts) >= 2 and parts[0] == "api" and parts[1] == "v1":
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise errors.path_not_found()
        target = self._target(group, version, rest)
        if target.name is None:
            return self._collection(req, target)
        if target.subresource is None:
            return self._object(req, target)
        return self._subresource(req, target)

    def _discovery(self, parts: list[str]) -> Response | None:
        doc: JSON | None = None
        if parts == ["version"]:
            doc = discovery.version_info()
        elif parts in (["healthz"], ["readyz"], ["livez"]):
            return Response(200, "ok", content_type="text/plain")
        elif parts == ["api"]:
            doc = discovery.api_versions(self.server_address)
        elif parts == ["api", "v1"]:
            doc = discovery.resource_list("", "v1")
        elif parts == ["apis"]:
            doc = discovery.api_group_list()
        elif len(parts) == 2 and parts[0] == "apis":
            doc = discovery.api_group(parts[1])
            if doc is None:
                raise errors.path_not_found()
        elif len(parts) == 3 and parts[0] == "apis":
            doc = discovery.resource_list(parts[1], parts[2])
            if doc is None:
                raise errors.path_not_found()
        return None if doc is None else Response(200, doc)

    def _target(self, group: str, version: str, rest: list[str]) -> _Target:
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise errors.path_not_found()
        rtype = lookup(group, version, rest[0])
        if rtype is None or (namespace is not None and not rtype.namespaced):
            raise errors.path_not_found()
        name = rest[1] if len(rest) > 1 else None
        if name is not None and rtype.namespaced and namespace is None:
            raise errors.path_not_found()  # /api/v1/pods/{name} does not exist
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and not (
            (sub == "status" and rtype.has_status) or (sub in ("eviction", "log") and rtype is PODS)
        ):
            raise errors.path_not_found()
        return _Target(rtype, namespace, name, sub)

    # -------------------------------------------------------------- collections

    def _collection(self, req: Request, t: _Target) -> Response | WatchStream:
        rtype, q = t.rtype, req.query
        if req.method == "GET":
            labels = parse_label_selector(q.get("labelSelector"))
            fields = parse_field_selector(q.get("fieldSelector"), rtype.field_getters())
            if _flag(q, "watch"):
                return self._watch(req, t)
            # Only serialized: no copies (a list of 1,000 nodes copied each was costly).
            items, rv = self.store.list_objects(rtype, t.namespace, labels, fields, copies=False)
            meta: JSON = {"resourceVersion": rv}
            items, meta = _paginate(items, meta, q)
            body: JSON = {"kind": rtype.list_kind, "apiVersion": rtype.api_version}
            body["metadata"] = meta
            body["items"] = items
            return Response(200, body)
        if req.method == "POST":
            if rtype.namespaced and t.namespace is None:
                raise errors.method_not_allowed(req.method)
            _refuse_dry_run(q)
            created = self.store.create_object(rtype, _decode(req.body), t.namespace)
            return Response(201, created)
        if req.method == "DELETE":
            _refuse_dry_run(q)
            labels = parse_label_selector(q.get("labelSelector"))
            fields = parse_field_selector(q.get("fieldSelector"), rtype.field_getters())
            items, rv = self.store.list_objects(rtype, t.namespace, labels, fields)
            options = self._delete_options(req)
            remaining = []
            for item in items:
                meta = item["metadata"]
                try:
                    obj, gone = self.store.delete_object(
                        rtype, meta["name"], meta.get("namespace"), options
                    )
                except ApiError as exc:
                    if exc.code != 404:  # deleted concurrently: nothing left to do
                        raise
                    continue
                if not gone:
                    remaining.append(obj)
            result: JSON = {"kind": rtype.list_kind, "apiVersion": rtype.api_version}
            result["metadata"] = {"resourceVersion": self.store.resource_version}
            result["items"] = remaining
            return Response(200, result)
        raise errors.method_not_allowed(req.method)

    def _watch(self, req: Request, t: _Target) -> WatchStream:
        q = req.query
        labels = parse_label_selector(q.get("labelSelector"))
        fields = parse_field_selector(q.get("fieldSelector"), t.rtype.field_getters())
        timeout = self.default_watch_timeout
        if q.get("timeoutSeconds"):
            try:
                requested = float(q["timeoutSeconds"])
            except ValueError:
                raise errors.bad_request("timeoutSeconds must be a number") from None
            # Like the real server, 0 (or less) means "the server's default".
            if requested > 0:
                timeout = requested
        bookmarks = _flag(q, "allowWatchBookmarks")
        try:
            watcher = self.store.watch(
                t.rtype, t.namespace, labels, fields, q.get("resourceVersion")
            )
        except ApiError as exc:
            if exc.code != 410:
                raise
            # The real server answers 200 and sends the 410 as an ERROR event.
            return WatchStream(None, exc, timeout, bookmarks)
        return WatchStream(watcher, None, timeout, bookmarks)

    # ------------------------------------------------------------------ objects

    def _object(self, req: Request, t: _Target) -> Response:
        assert t.name is not None
        rtype, q = t.rtype, req.query
        if req.method == "GET":
            return Response(200, self.store.get(rtype, t.name, t.namespace))
        if req.method in ("PUT", "PATCH", "DELETE"):
            _refuse_dry_run(q)
        if req.method == "PUT":
            body = _decode(req.body)
            return Response(200, self.store.replace_object(rtype, t.name, t.namespace, body))
        if req.method == "PATCH":
            return Response(200, self._patch(req, t, None))
        if req.method == "DELETE":
            obj, _ = self.store.delete_object(rtype, t.name, t.namespace, self._delete_options(req))
            return Response(200, obj)
        raise errors.method_not_allowed(req.method)

    def _subresource(self, req: Request, t: _Target) -> Response:
        assert t.name is not None
        if t.subresource == "eviction":
            if req.method != "POST":
                raise errors.method_not_allowed(req.method)
            _refuse_dry_run(req.query)
            assert t.namespace is not None
            return Response(201, self.store.evict(t.namespace, t.name, _decode(req.body)))
        if t.subresource == "log":
            if req.method != "GET":
                raise errors.method_not_allowed(req.method)
            assert t.namespace is not None
            return self._pod_log(req, t.namespace, t.name)
        if req.method == "GET":
            return Response(200, self.store.get(t.rtype, t.name, t.namespace))
        _refuse_dry_run(req.query)
        if req.method == "PUT":
            body = _decode(req.body)
            obj = self.store.replace_object(
                t.rtype, t.name, t.namespace, body, subresource="status"
            )
            return Response(200, obj)
        if req.method == "PATCH":
            return Response(200, self._patch(req, t, "status"))
        raise errors.method_not_allowed(req.method)

    def _pod_log(self, req: Request, namespace: str, name: str) -> Response:
        q = req.query
        # Not emulated; refusing beats answering as if the option had been honoured.
        for option in ("follow", "previous", "timestamps", "insecureSkipTLSVerifyBackend"):
            if _flag(q, option):
                raise errors.bad_request(
                    f"{option}=true is not supported by the Kubernetes API emulator"
                )
        for option in ("sinceSeconds", "sinceTime", "stream"):
            if q.get(option):
                raise errors.bad_request(
                    f"{option} is not supported by the Kubernetes API emulator"
                )
        text = self.store.pod_log(
            namespace,
            name,
            container=q.get("container") or None,
            tail_lines=_int_at_least(q, "tailLines", name, 0),
            limit_bytes=_int_at_least(q, "limitBytes", name, 1),
        )
        return Response(200, text, content_type="text/plain")

    def _patch(self, req: Request, t: _Target, subresource: str | None) -> JSON:
        assert t.name is not None
        content_type = req.content_type.split(";")[0].strip().lower()
        if content_type not in (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH):
            # Checked before decoding: e.g. server-side apply bodies are YAML.
            raise errors.unsupported_media_type(content_type)
        return self.store.patch_object(
            t.rtype, t.name, t.namespace, content_type, _decode(req.body), subresource
        )

    def _delete_options(self, req: Request) -> JSON:
        options = _decode(req.body, required=False) or {}
        if not isinstance(options, dict):
            raise errors.bad_request("DeleteOptions must be a JSON object")
        q = req.query
        if "gracePeriodSeconds" in q:
            try:
                options["gracePeriodSeconds"] = int(q["gracePeriodSeconds"])
            except ValueError:
                raise errors.bad_request("gracePeriodSeconds must be an integer") from None
        if "propagationPolicy" in q:
            options["propagationPolicy"] = q["propagationPolicy"]
        if "orphanDependents" in q:
            options["orphanDependents"] = _flag(q, "orphanDependents")
        policy = options.get("propagationPolicy")
        if policy not in (None, "Orphan", "Background", "Foreground"):
            raise errors.unprocessable(f'propagationPolicy: Unsupported value: "{policy}"')
        return options

    # -------------------------------------------------------------------- admin

    def _admin(self, req: Request) -> Response:
        parts = [p for p in req.path[len(ADMIN_PREFIX) :].split("/") if p]
        if parts == ["faults"]:
            if req.method == "GET":
                return Response(200, [r.to_json() for r in self.faults.rules()])
            if req.method == "POST":
                data = _decode(req.body)
                if not isinstance(data, dict):
                    raise errors.bad_request("a fault rule must be a JSON object")
                try:
                    rule = FaultRule.from_json(data)
                except (TypeError, ValueError) as exc:
                    raise errors.bad_request(str(exc)) from None
                return Response(201, self.faults.add(rule).to_json())
            if req.method == "DELETE":
                self.faults.clear()
                return Response(200, status_body("Success", 200))
        if len(parts) == 2 and parts[0] == "faults" and req.method == "DELETE":
            if not parts[1].isdigit() or not self.faults.remove(int(parts[1])):
                raise errors.ApiError(404, "NotFound", f"fault rule {parts[1]} not found")
            return Response(200, status_body("Success", 200))
        if parts == ["requests"]:
            if req.method == "GET":
                return Response(200, [_record_json(r) for r in self.faults.requests()])
            if req.method == "DELETE":
                self.faults.clear_requests()
                return Response(200, status_body("Success", 200))
        if parts == ["reset"] and req.method == "POST":
            self.faults.clear()
            self.faults.clear_requests()
            self.store.clear()
            return Response(200, status_body("Success", 200))
        if parts == ["history"] and req.method == "POST":
            data = _decode(req.body)
            size = data.get("size") if isinstance(data, dict) else None
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise errors.bad_request('expected {"size": <non-negative integer>}')
            self.store.set_history_size(size)
            return Response(200, {"size": size})
        if parts == ["compact"] and req.method == "POST":
            self.store.compact()
            return Response(200, {"resourceVersion": self.store.resource_version})
        raise errors.path_not_found()


def _flag(query: Mapping[str, str], name: str) -> bool:
    """A boolean query parameter, parsed like Go's strconv.ParseBool (the client sends True).

    Raises:
        ApiError: 400 for a value that is not a boolean.
    """
    value = query.get(name)
    if value is None or value in ("0", "f", "F", "false", "FALSE", "False", ""):
        return False
    if value in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    raise errors.bad_request(f"invalid boolean for {name}: {value!r}")


def _int_at_least(query: Mapping[str, str], name: str, pod: str, minimum: int) -> int | None:
    """An optional integer PodLogOptions field, validated as the real server does.

    Raises:
        ApiError: 400 for a value that is not an integer, 422 for one below ``minimum``.
    """
    value = query.get(name)
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except ValueError:
        raise errors.bad_request(f"{name} must be an integer: {value!r}") from None
    if number < minimum:
        word = "greater than or equal to 0" if minimum == 0 else f"greater than {minimum - 1}"
        raise errors.invalid(
            "", "PodLogOptions", pod, [(name, f"Invalid value: {number}: must be {word}")]
        )
    return number


def _refuse_dry_run(query: Mapping[str, str]) -> None:
    # Not emulated: refusing is better than silently applying a "dry" write.
    if query.get("dryRun"):
        raise errors.bad_request("dryRun is not supported by the Kubernetes API emulator")


def _paginate(items: list[JSON], meta: JSON, query: Mapping[str, str]) -> tuple[list[JSON], JSON]:
    start = 0
    token = query.get("continue")
    if token:
        try:
            state = json.loads(base64.urlsafe_b64decode(token.encode()))
            after = tuple(state["start"])
            meta["resourceVersion"] = str(state["rv"])
        except (ValueError, KeyError, TypeError, binascii.Error):
            raise errors.bad_request("invalid continue token") from None
        keys = [(i["metadata"].get("namespace", ""), i["metadata"]["name"]) for i in items]
        start = next((n for n, k in enumerate(keys) if k > after), len(items))
    limit_text = query.get("limit")
    if not limit_text:
        return items[start:], meta
    try:
        limit = int(limit_text)
    except ValueError:
        raise errors.bad_request("limit must be an integer") from None
    if limit <= 0:
        return items[start:], meta
    page = items[start : start + limit]
    rest = len(items) - start - len(page)
    if rest > 0:
        last = page[-1]["metadata"]
        state = {
            "rv": int(meta["resourceVersion"]),
            "start": [last.get("namespace", ""), last["name"]],
        }
        meta["continue"] = base64.urlsafe_b64encode(json.dumps(state).encode()).decode()
        meta["remainingItemCount"] = rest
    return page, meta
