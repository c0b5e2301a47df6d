"""The three PATCH flavours the API server accepts for JSON bodies.

* JSON merge patch (RFC 7386): maps merge, ``null`` deletes, lists are replaced.
* JSON patch (RFC 6902): ``add``, ``remove``, ``replace``, ``move``, ``copy``, ``test``.
* Strategic merge patch: like a merge patch, but lists with a patch merge key (node
  ``status.conditions`` by ``type``, pod ``spec.containers`` by ``name``...) are merged
  element by element, ``metadata.finalizers`` is a set union, and the directives
  ``$patch: replace|delete|merge``, ``$deleteFromPrimitiveList/<field>`` and
  ``$retainKeys`` are honoured. ``$setElementOrder/<field>`` is accepted and ignored: the
  emulator keeps the original order and appends new elements (a documented deviation).
"""

from __future__ import annotations

import copy
from typing import Any

from .errors import bad_request, unprocessable
from .resources import MergeKeys

JSON = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


def merge_patch(original: Any, patch: Any) -> Any:
    """Apply an RFC 7386 JSON merge patch and return the result (inputs untouched)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result: JSON = copy.deepcopy(original) if isinstance(original, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _strip_directives(value: Any) -> Any:
    # Directives must never reach the stored object, even inside replaced values.
    if isinstance(value, dict):
        return {
            k: _strip_directives(v)
            for k, v in value.items()
            if not k.startswith("$") and v is not None
        }
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value


def strategic_merge_patch(original: JSON, patch: Any, keys: MergeKeys) -> JSON:
    """Apply a strategic merge patch using ``keys`` for list merge semantics.

    Raises:
        ApiError: 400 when the patch is not a JSON object or a directive is malformed.
    """
    if not isinstance(patch, dict):
        raise bad_request("strategic merge patch body must be a JSON object")
    return _merge_map(original, patch, keys, ())


def _merge_map(original: JSON, patch: JSON, keys: MergeKeys, path: tuple[str, ...]) -> JSON:
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: _strip_directives(v) for k, v in patch.items() if k != "$patch"}
    if directive not in (None, "merge", "replace", "delete"):
        raise bad_request(f"unknown patch type: {directive}")
    result = copy.deepcopy(original)
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            target = key.split("/", 1)[1]
            if not isinstance(value, list):
                raise bad_request(f"{key} must be a list")
            if isinstance(result.get(target), list):
                result[target] = [v for v in result[target] if v not in value]
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        sub = (*path, key)
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            if value.get("$patch") == "delete":
                result.pop(key, None)
                continue
            current = result.get(key)
            result[key] = _merge_map(current if isinstance(current, dict) else {}, value, keys, sub)
        elif isinstance(value, list):
            result[key] = _merge_list(result.get(key), value, keys, sub)
        else:
            result[key] = value
    retain = patch.get("$retainKeys")
    if retain is not None:
        if not isinstance(retain, list):
            raise bad_request("$retainKeys must be a list")
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_list(original: Any, patch: list[Any], keys: MergeKeys, path: tuple[str, ...]) -> Any:
    merge_key = keys.get(path)
    if merge_key is None:
        return _strip_directives(patch)
    if not isinstance(original, list):
        original = []
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return _strip_directives(
            [i for i in patch if not (isinstance(i, dict) and i.get("$patch") == "replace")]
        )
    if merge_key == "":
        # A list of primitives with patchStrategy=merge is a set union (finalizers).
        merged = list(original)
        merged.extend(v for v in patch if v not in merged)
        return merged
    result: list[Any] = copy.deepcopy(original)
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise bad_request(f"map: {item!r} does not contain declared merge key: {merge_key}")
        idx = next(
            (
                i
                for i, cur in enumerate(result)
                if isinstance(cur, dict) and cur.get(merge_key) == item[merge_key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if idx is not None:
                del result[idx]
        elif idx is None:
            result.append(_strip_directives(item))
        else:
            result[idx] = _merge_map(result[idx], item, keys, path)
    return result


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise unprocessable(f"invalid JSON pointer: {path!r}")
    return [_unescape(t) for t in path.split("/")[1:]] if path else []


def _parent(doc: Any, tokens: list[str]) -> Any:
    cur = doc
    for tok in tokens[:-1]:
        cur = _child(cur, tok)
    return cur


def _child(container: Any, tok: str) -> Any:
    if isinstance(container, dict):
        if tok not in container:
            raise unprocessable(f"jsonpatch: missing key {tok!r}")
        return container[tok]
    if isinstance(container, list):
        return container[_index(container, tok, allow_end=False)]
    raise unprocessable(f"jsonpatch: cannot traverse into {tok!r}")


def _index(container: list[Any], tok: str, *, allow_end: bool) -> int:
    if allow_end and tok == "-":
        return len(container)
    if not tok.isdigit():
        raise unprocessable(f"jsonpatch: invalid array index {tok!r}")
    idx = int(tok)
    limit = len(container) if allow_end else len(container) - 1
    if idx > limit:
        raise unprocessable(f"jsonpatch: array index {idx} out of bounds")
    return idx


def _add(doc: Any, tokens: list[str], value: Any) -> Any:
    if not tokens:
        return value
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, allow_end=True), value)
    else:
        raise unprocessable(f"jsonpatch: cannot add at {last!r}")
    return doc


def _remove(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        raise unprocessable("jsonpatch: cannot remove the whole document")
    parent = _parent(doc, tokens)
    last = tokens[-1]
    value = _child(parent, last)
    if isinstance(parent, dict):
        del parent[last]
    else:
        del parent[_index(parent, last, allow_end=False)]
    return value


def json_patch(original: JSON, operations: Any) -> Any:
    """Apply an RFC 6902 JSON patch.

    Raises:
        ApiError: 400 when the body is not a list of operations, 422 when an operation
            fails (missing path, failed ``test``), as the real server answers.
    """
    if not isinstance(operations, list):
        raise bad_request("json patch body must be a JSON array of operations")
    doc: Any = copy.deepcopy(original)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op:
            raise bad_request(f"invalid json patch operation: {op!r}")
        kind = op["op"]
        tokens = _pointer(op.get("path"))
        if kind == "add":
            doc = _add(doc, tokens, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            _remove(doc, tokens)
        elif kind == "replace":
            if not tokens:
                doc = copy.deepcopy(op.get("value"))
                continue
            _child(_parent(doc, tokens), tokens[-1])  # must exist
            _remove(doc, tokens)
            doc = _add(doc, tokens, copy.deepcopy(op.get("value")))
        elif kind in ("move", "copy"):
            source = _pointer(op.get("from"))
            value = _child(_parent(doc, source), source[-1]) if source else doc
            if kind == "move":
                _remove(doc, source)
            doc = _add(doc, tokens, copy.deepcopy(value))
        elif kind == "test":
            current = _child(_parent(doc, tokens), tokens[-1]) if tokens else doc
            if current != op.get("value"):
                raise unprocessable(
                    f"the server rejected our request due to an error in our request: "
                    f"testing value {op.get('path')} failed"
                )
        else:
            raise bad_request(f"unexpected json patch operation: {kind!r}")
    return doc
