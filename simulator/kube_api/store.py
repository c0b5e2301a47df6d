"""The thread-safe in-memory object store with the real registry's write semantics.

One global resourceVersion counter (like etcd's revision) stamps every write; each write
is recorded in the watch history. Stored objects are never mutated in place: every write
stores a fresh dict, so history entries stay valid snapshots.
"""

from __future__ import annotations

import copy
import re
import secrets
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from . import errors
from .errors import ApiError
from .owners import OwnerIndex
from .resources import ALL_RESOURCES, BY_KEY, ResourceType
from .selectors import FieldSelector, LabelSelector
from .watch import Change, History, Wakers, Watcher

JSON = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)
_ORDER = {r.key: i for i, r in enumerate(ALL_RESOURCES)}
ChangeHook = Callable[[Change], None]

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_IMMUTABLE_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds")
# Status writes cannot touch these (apiserver's ResetObjectMetaForStatus).
_STATUS_RESET_META = ("labels", "annotations", "finalizers", "ownerReferences")


def rfc3339(moment: datetime) -> str:
    """Format a time the way the API server does (second precision, UTC, ``Z``)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _spec_view(obj: JSON) -> JSON:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def _normalize(rtype: ResourceType, obj: JSON) -> None:
    # Go serializes non-pointer struct fields even when empty: "spec": {}, "status": {}.
    for struct in rtype.struct_fields:
        if not isinstance(obj.get(struct), dict):
            obj[struct] = {}


def _meta(obj: JSON) -> JSON:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


class ObjectStore:
    """Objects of every served type, their history, and the generic write rules.

    Args:
        history_size: How many changes are retained for watches; a watch from an older
            resourceVersion gets 410 Expired.
        clock: Returns "now" (UTC); injectable so the simulator can run on virtual time.
    """

    def __init__(
        self, *, history_size: int = 10_000, clock: Callable[[], datetime] | None = None
    ) -> None:
        self._lock = threading.RLock()
        self._wakers = Wakers(self._lock, [r.key for r in ALL_RESOURCES])
        self._objects: dict[str, dict[Key, JSON]] = {r.key: {} for r in ALL_RESOURCES}
        self._owners = OwnerIndex()
        # A fresh etcd is at revision 1; never 0, which a watch or list reads as "any".
        self._rv = 1
        self._latest: dict[str, int] = {}
        self._history = History(history_size)
        self._closed = False
        self._hooks: list[ChangeHook] = []
        self._clock = clock or (lambda: datetime.now(UTC))

    # ----------------------------------------------------------------- plumbing

    @property
    def lock(self) -> threading.RLock:
        """The store lock; hold it to make several operations atomic."""
        return self._lock

    @property
    def resource_version(self) -> str:
        """The current global resourceVersion."""
        with self._lock:
            return str(self._rv)

    def now(self) -> str:
        """The current time as an RFC 3339 timestamp."""
        return rfc3339(self._clock())

    def set_history_size(self, size: int) -> None:
        """Change the retained watch window (smaller windows make 410 Gone easy to force)."""
        with self._lock:
            self._history.size = size
            self._history.trim()

    def compact(self) -> None:
        """Forget all history: every resourceVersion before now becomes too old to watch."""
        with self._lock:
            self._history.compact(self._rv)

    def add_hook(self, hook: ChangeHook) -> None:
        """Call ``hook`` (under the store lock) after every committed change."""
        with self._lock:
            self._hooks.append(hook)

    def close(self) -> None:
        """Wake every watcher so streams end (server shutdown)."""
        with self._lock:
            self._closed = True
            self._wakers.notify_all()

    def wake(self) -> None:
        """Wake every waiting watcher so it re-checks its stop condition."""
        with self._lock:
            self._wakers.notify_all()

    def latest_version(self, resource: str) -> int:
        """The resourceVersion of the last change to any object of ``resource`` (0: none).

        A watcher of that resource that has seen this version has seen every
        change (the clock-free what-if waits for it before time moves on).
        """
        with self._lock:
            return self._latest.get(resource, 0)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def _commit(self, rtype: ResourceType, kind: str, new: JSON, old: JSON | None) -> JSON:
        # Caller holds the lock. Stamps the next resourceVersion, stores, records, notifies.
        self._rv += 1
        stored = copy.deepcopy(new)
        _normalize(rtype, stored)
        _meta(stored)["resourceVersion"] = str(self._rv)
        ns = str(_meta(stored).get("namespace") or "")
        key = (ns, str(_meta(stored)["name"]))
        previous = self._objects[rtype.key].get(key)
        self._owners.update(rtype.key, key, previous, None if kind == "DELETED" else stored)
        if kind == "DELETED":
            self._objects[rtype.key].pop(key, None)
        else:
            self._objects[rtype.key][key] = stored
        self._latest[rtype.key] = self._rv
        change = Change(self._rv, kind, rtype.key, ns, stored, old)
        self._history.append(change)
        self._wakers.notify(rtype.key)
        for hook in list(self._hooks):
            hook(change)
        return copy.deepcopy(stored)

    def _current(self, rtype: ResourceType, name: str, namespace: str | None) -> JSON:
        obj = self._objects[rtype.key].get((namespace or "", name))
        if obj is None:
            raise errors.not_found(rtype.group, rtype.plural, name)
        return obj

    # --------------------------------------------------------------------- reads

    def get(self, rtype: ResourceType, name: str, namespace: str | None = None) -> JSON:
        """Return a copy of one object.

        Raises:
            ApiError: 404 when it does not exist.
        """
        with self._lock:
            return copy.deepcopy(self._current(rtype, name, namespace))

    def list_objects(
        self,
        rtype: ResourceType,
        namespace: str | None = None,
        labels: LabelSelector | None = None,
        fields: FieldSelector | None = None,
        copies: bool = True,
    ) -> tuple[list[JSON], str]:
        """Return matching objects sorted by (namespace, name) and the list resourceVersion.

        ``copies=False`` returns the stored objects themselves (never mutated in place,
        see the module docstring): for callers that only serialize them.
        """
        with self._lock:
            items = [
                copy.deepcopy(obj) if copies else obj
                for (ns, _), obj in sorted(self._objects[rtype.key].items())
                if (namespace is None or ns == namespace)
                and (labels is None or labels.matches(_meta(obj).get("labels")))
                and (fields is None or fields.matches(obj))
            ]
            return items, str(self._rv)

    def peek(self, rtype: ResourceType, namespace: str | None = None) -> list[JSON]:
        """The stored objects themselves, unsorted, for read-only scans under :attr:`lock`.

        Cheaper than :meth:`list_objects` (no copies): callers must not mutate them.
        """
        with self._lock:
            return [
                obj
                for (ns, _), obj in self._objects[rtype.key].items()
                if namespace is None or ns == namespace
            ]

    def watch(
        self,
        rtype: ResourceType,
        namespace: str | None = None,
        labels: LabelSelector | None = None,
        fields: FieldSelector | None = None,
        resource_version: str | None = None,
    ) -> Watcher:
        """Start a watch; no resourceVersion (or "0") first replays the current state.

        Usable from Python too: ``watcher.poll(timeout)`` returns the next events.

        Raises:
            ApiError: 400 for a non-numeric resourceVersion, 410 when it is too old.
        """
        labels = labels or LabelSelector()
        fields = fields or FieldSelector((), rtype.field_getters())
        with self._lock:
            initial: list[JSON] = []
            if resource_version in (None, "", "0"):
                initial, _ = self.list_objects(rtype, namespace, labels, fields)
                start = self._rv
            else:
                try:
                    start = int(str(resource_version))
                except ValueError:
                    raise errors.bad_request(
                        f"invalid resource version: {resource_version!r}"
                    ) from None
            watcher = Watcher(
                rtype=rtype,
                namespace=namespace,
                labels=labels,
                fields=fields,
                cond=self._wakers.of(rtype.key),
                history=self._history,
                current_rv=lambda: self._rv,
                closed=lambda: self._closed,
                start_rv=start,
                initial=initial,
            )
            if start < self._history.compacted_rv:
                raise errors.expired(
                    f"too old resource version: {start} ({self._history.compacted_rv + 1})"
                )
            return watcher

    # -------------------------------------------------------------------- writes

    def _validate_new(self, rtype: ResourceType, obj: Any, namespace: str | None) -> JSON:
        if not isinstance(obj, dict):
            raise errors.bad_request(f"the body of the request must be a {rtype.kind} object")
        api_version = obj.get("apiVersion")
        if api_version not in (None, "", rtype.api_version):
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected "
                f"API version ({rtype.api_version})"
            )
        if obj.get("kind") not in (None, "", rtype.kind):
            raise errors.bad_request(
                f"the kind in the data ({obj.get('kind')}) does not match the expected kind "
                f"({rtype.kind})"
            )
        new: JSON = copy.deepcopy(obj)
        new["apiVersion"] = rtype.api_version
        new["kind"] = rtype.kind
        meta = new.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        if rtype.namespaced:
            body_ns = meta.get("namespace")
            if body_ns and namespace and body_ns != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request"
                )
            meta["namespace"] = namespace or body_ns or "default"
        else:
            meta.pop("namespace", None)
        return new

    def _check_name(self, rtype: ResourceType, name: Any) -> None:
        if not name:
            raise errors.invalid(
                rtype.group,
                rtype.kind,
                "",
                [("metadata.name", "Required value: name or generateName is required")],
            )
        if not isinstance(name, str) or len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
            raise errors.invalid(
                rtype.group,
                rtype.kind,
                str(name),
                [
                    (
                        "metadata.name",
                        f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist '
                        "of lower case alphanumeric characters, '-' or '.', and must start and "
                        "end with an alphanumeric character",
                    )
                ],
            )

    def create(
        self,
        rtype: ResourceType,
        obj: Any,
        namespace: str | None = None,
        *,
        keep_status: bool = False,
        prepare: Callable[[JSON], None] | None = None,
    ) -> JSON:
        """Create an object like POST does: new uid, timestamps, resourceVersion.

        Args:
            rtype: The resource type.
            obj: The object (a dict); it is copied.
            namespace: The namespace of the URL (namespaced types).
            keep_status: Keep the given status (seeding from Python); POST resets it for
                types whose real registry does.
            prepare: Type-specific defaulting/validation, run on the copy before storing.

        Raises:
            ApiError: 400/422 for invalid objects, 409 AlreadyExists, 500 when a
                resourceVersion is set.
        """
        new = self._validate_new(rtype, obj, namespace)
        meta = new["metadata"]
        if meta.get("resourceVersion"):
            raise ApiError(
                500, "Unknown", "resourceVersion should not be set on objects to be created"
            )
        if not meta.get("name") and meta.get("generateName"):
            # Five random characters from the real generator's alphabet.
            suffix = "".join(secrets.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
            meta["name"] = f"{meta['generateName']}{suffix}"
        self._check_name(rtype, meta.get("name"))
        if rtype.has_status and rtype.reset_status_on_create and not keep_status:
            new.pop("status", None)
        for field in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(field, None)
        with self._lock:
            if (meta.get("namespace", ""), meta["name"]) in self._objects[rtype.key]:
                raise errors.already_exists(rtype.group, rtype.plural, meta["name"])
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = self.now()
            if rtype.has_generation:
                meta["generation"] = 1
            if prepare is not None:
                # Runs after the uid exists: Jobs derive their selector from it.
                prepare(new)
            return self._commit(rtype, "ADDED", new, None)

    def update(
        self,
        rtype: ResourceType,
        name: str,
        namespace: str | None,
        obj: Any,
        *,
        subresource: str | None = None,
        prepare: Callable[[JSON, JSON], None] | None = None,
    ) -> JSON:
        """Replace an object like PUT does, with optimistic concurrency.

        ``subresource="status"`` changes only the status; otherwise the status is kept.
        A resourceVersion in ``obj`` that is not the current one fails with 409 Conflict.

        Args:
            rtype: The resource type.
            name: The name from the URL.
            namespace: The namespace from the URL.
            obj: The new object.
            subresource: None or "status".
            prepare: Type-specific validation ``(old, new)`` run before storing.

        Raises:
            ApiError: 404, 409 Conflict, 400/422 for invalid objects.
        """
        new = self._validate_new(rtype, obj, namespace)
        with self._lock:
            old = self._current(rtype, name, namespace)
            return self._apply_update(rtype, old, new, subresource, prepare)

    def _apply_update(
        self,
        rtype: ResourceType,
        old: JSON,
        new: JSON,
        subresource: str | None,
        prepare: Callable[[JSON, JSON], None] | None,
    ) -> JSON:
        # Caller holds the lock; ``new`` is a private copy.
        old_meta, meta = _meta(old), new["metadata"]
        name = old_meta["name"]
        if meta.get("name") not in (None, "", name):
            raise errors.bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on "
                f"the URL ({name})"
            )
        meta["name"] = name
        rv = meta.get("resourceVersion")
        if rv:
            if str(rv) != old_meta["resourceVersion"]:
                raise errors.stale(rtype.group, rtype.plural, name)
        elif not rtype.allow_unconditional_update:
            raise errors.invalid(
                rtype.group,
                rtype.kind,
                name,
                [
                    (
                        "metadata.resourceVersion",
                        "Invalid value: 0x0: must be specified for an update",
                    )
                ],
            )
        if meta.get("uid") and meta["uid"] != old_meta["uid"]:
            raise errors.conflict(
                rtype.group,
                rtype.plural,
                name,
                f"Precondition failed: UID in precondition: {meta['uid']}, "
                f"UID in object meta: {old_meta['uid']}",
            )
        for field in _IMMUTABLE_META:
            if field in old_meta:
                meta[field] = old_meta[field]
            else:
                meta.pop(field, None)
        if subresource == "status":
            status = new.get("status")
            new = {k: copy.deepcopy(v) for k, v in old.items() if k != "status"}
            if status is not None:
                new["status"] = status
            meta = new["metadata"]
        elif rtype.has_status:
            new.pop("status", None)
            if "status" in old:
                new["status"] = copy.deepcopy(old["status"])
        if old_meta.get("deletionTimestamp"):
            added = set(meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
            if added:
                raise errors.invalid(
                    rtype.group,
                    rtype.kind,
                    name,
                    [
                        (
                            "metadata.finalizers",
                            "Forbidden: no new finalizers can be added if the object is "
                            "being deleted",
                        )
                    ],
                )
        if rtype.has_generation:
            generation = int(old_meta.get("generation", 1))
            meta["generation"] = generation + (_spec_view(new) != _spec_view(old))
        if prepare is not None:
            # After the generation bump: a PDB's status reports the observed generation.
            prepare(old, new)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        _normalize(rtype, new)
        if new == old:
            # A no-op write neither bumps the resourceVersion nor emits an event.
            return copy.deepcopy(old)
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            # Removing the last finalizer of a deleting object deletes it (DELETED only).
            return self._commit(rtype, "DELETED", new, old)
        return self._commit(rtype, "MODIFIED", new, old)

    def mutate(
        self,
        rtype: ResourceType,
        name: str,
        namespace: str | None,
        change: Callable[[JSON], None],
    ) -> JSON:
        """Atomically apply ``change`` to a copy of the object (status included) and store it.

        This is the Python-side write path (simulator, tests): no resourceVersion check,
        spec and status both writable, but the same events and finalizer rules.

        Raises:
            ApiError: 404 when the object does not exist.
        """
        with self._lock:
            old = self._current(rtype, name, namespace)
            new = copy.deepcopy(old)
            change(new)
            new_meta = _meta(new)
            new_meta["resourceVersion"] = _meta(old)["resourceVersion"]
            for field in ("name", "namespace", "uid", "creationTimestamp"):
                if field in _meta(old):
                    new_meta[field] = _meta(old)[field]
            if rtype.has_generation:
                new_meta["generation"] = int(_meta(old).get("generation", 1)) + (
                    _spec_view(new) != _spec_view(old)
                )
            _normalize(rtype, new)
            if new == old:
                return copy.deepcopy(old)
            if new_meta.get("deletionTimestamp") and not new_meta.get("finalizers"):
                return self._commit(rtype, "DELETED", new, old)
            return self._commit(rtype, "MODIFIED", new, old)

    def delete(
        self,
        rtype: ResourceType,
        name: str,
        namespace: str | None = None,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        graceful_until: str | None = None,
        grace_seconds: int | None = None,
    ) -> tuple[JSON, bool]:
        """Delete an object, honouring preconditions and finalizers.

        An object with finalizers (or a graceful deadline) gets ``deletionTimestamp`` and
        stays until its finalizers are gone; otherwise it is removed.

        Args:
            rtype: The resource type.
            name: Object name.
            namespace: Object namespace (namespaced types).
            uid: Precondition: the object's uid must match.
            resource_version: Precondition: the object's resourceVersion must match.
            graceful_until: Timestamp to record as deletionTimestamp when the object stays
                for graceful termination (pods); None deletes immediately.
            grace_seconds: The deletionGracePeriodSeconds to record with it.

        Returns:
            The object as stored or as last seen, and whether it is gone.

        Raises:
            ApiError: 404 when missing, 409 when a precondition fails.
        """
        with self._lock:
            old = self._current(rtype, name, namespace)
            old_meta = _meta(old)
            for label, want, have in (
                ("UID", uid, old_meta["uid"]),
                ("ResourceVersion", resource_version, old_meta["resourceVersion"]),
            ):
                if want and want != have:
                    raise errors.conflict(
                        rtype.group,
                        rtype.plural,
                        name,
                        f"Precondition failed: {label} in precondition: {want}, "
                        f"{label} in object meta: {have}",
                    )
            if old_meta.get("finalizers") or graceful_until:
                if old_meta.get("deletionTimestamp"):
                    return copy.deepcopy(old), False
                new = copy.deepcopy(old)
                meta = new["metadata"]
                meta["deletionTimestamp"] = graceful_until or self.now()
                meta["deletionGracePeriodSeconds"] = grace_seconds or 0
                if rtype.has_generation:
                    # The real registry bumps generation when deletionTimestamp is set.
                    meta["generation"] = int(meta.get("generation", 1)) + 1
                return self._commit(rtype, "MODIFIED", new, old), False
            return self._commit(rtype, "DELETED", old, old), True  # _commit copies it

    def finish_deletion(self, rtype: ResourceType, name: str, namespace: str | None) -> bool:
        """Remove a gracefully deleting object whose finalizers are gone (kubelet's part).

        Returns:
            Whether the object was removed (False when it is gone or still has finalizers).
        """
        with self._lock:
            obj = self._objects[rtype.key].get((namespace or "", name))
            if obj is None or not _meta(obj).get("deletionTimestamp"):
                return False
            if _meta(obj).get("finalizers"):
                # Graceful period over; the finalizers still hold it (like grace 0 delete).
                return False
            self._commit(rtype, "DELETED", copy.deepcopy(obj), obj)
            return True

    def dependents(self, owner_uid: str) -> list[tuple[ResourceType, JSON]]:
        """Objects whose ownerReferences name ``owner_uid`` (for cascading deletion)."""
        with self._lock:
            owned = sorted(self._owners.owned(owner_uid), key=lambda e: _ORDER[e[0]])
            objs = [(BY_KEY[rkey], self._objects[rkey].get(key)) for rkey, key in owned]
            return [(rtype, copy.deepcopy(obj)) for rtype, obj in objs if obj is not None]

    def clear(self) -> None:
        """Remove every object (DELETED events are emitted; finalizers are ignored)."""
        with self._lock:
            for rtype in ALL_RESOURCES:
                for obj in list(self._objects[rtype.key].values()):
                    self._commit(rtype, "DELETED", copy.deepcopy(obj), obj)
