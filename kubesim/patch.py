"""The three PATCH formats the API server accepts: JSON merge patch, strategic merge patch and JSON patch.

Strategic merge here is the subset kubectl and controllers rely on: maps merge recursively, `null` deletes
a key, lists of objects merge by their merge key (`name` for containers, env, volumes and the like; `type`
for conditions and node addresses), other lists are replaced, and the `$patch: replace|delete`,
`$retainKeys`, `$setElementOrder/<field>` and `$deleteFromPrimitiveList/<field>` directives are honoured
or ignored as harmless.
"""

from __future__ import annotations

import copy
from typing import Any

Obj = dict[str, Any]


class PatchError(ValueError):
    """A patch that cannot be applied (400 BadRequest, or 422 for a failed JSON-patch test)."""

    def __init__(self, message: str, code: int = 400) -> None:
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------------------------- JSON merge (RFC 7386)


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# ---------------------------------------------------------------------------------- strategic merge

MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "imagePullSecrets": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "conditions": "type",
    "addresses": "type",
    "ownerReferences": "uid",
    "readinessGates": "conditionType",
    "hostAliases": "ip",
    "resourceClaims": "name",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "schedulingGates": "name",
}
MERGED_PRIMITIVE_LISTS = {"finalizers"}


def _merge_key(field: str, items: list[Any]) -> str | None:
    key = MERGE_KEYS.get(field)
    if key is not None:
        return key
    if items and all(isinstance(i, dict) and "name" in i for i in items):
        return "name"
    return None


def _merge_list(field: str, target: list[Any], patch: list[Any]) -> list[Any]:
    if field in MERGED_PRIMITIVE_LISTS and all(not isinstance(p, dict) for p in patch):
        out = list(target)
        out.extend(p for p in patch if p not in out)
        return out
    key = _merge_key(field, [p for p in patch if not (isinstance(p, dict) and "$patch" in p)] or patch)
    if key is None or not all(isinstance(i, dict) for i in target):
        if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
            return [p for p in patch if not (isinstance(p, dict) and "$patch" in p)]
        return copy.deepcopy(patch)
    out = [copy.deepcopy(t) for t in target]
    index = {t.get(key): i for i, t in enumerate(out) if isinstance(t, dict)}
    for item in patch:
        if not isinstance(item, dict):
            raise PatchError(f"list {field!r} merges by {key!r}: every element must be an object")
        directive = item.get("$patch")
        if directive == "replace":
            return [p for p in patch if not (isinstance(p, dict) and "$patch" in p)]
        if key not in item:
            raise PatchError(f"element of list {field!r} lacks its merge key {key!r}")
        pos = index.get(item[key])
        if directive == "delete":
            if pos is not None:
                out[pos] = None
            continue
        if pos is None:
            index[item[key]] = len(out)
            out.append(strategic_merge(None, item))
        else:
            out[pos] = strategic_merge(out[pos], item)
    return [o for o in out if o is not None]


def strategic_merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$retainKeys", "$patch"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(result.get(field), list):
                result[field] = [v for v in result[field] if v not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            merged = strategic_merge(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list) and isinstance(result.get(key), list):
            result[key] = _merge_list(key, result[key], value)
        elif isinstance(value, list):
            result[key] = [
                strategic_merge(None, v) if isinstance(v, dict) else v
                for v in value
                if not (isinstance(v, dict) and "$patch" in v)
            ]
        else:
            result[key] = value
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


# ---------------------------------------------------------------------------------- JSON patch (RFC 6902)


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str]) -> Any:
    cur = doc
    for p in parts:
        if isinstance(cur, dict):
            if p not in cur:
                raise PatchError(f"path segment {p!r} not found")
            cur = cur[p]
        elif isinstance(cur, list):
            try:
                cur = cur[int(p)]
            except (ValueError, IndexError):
                raise PatchError(f"invalid list index {p!r}") from None
        else:
            raise PatchError(f"cannot descend into {p!r}")
    return cur


def _add(doc: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent = _walk(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        else:
            try:
                idx = int(last)
            except ValueError:
                raise PatchError(f"invalid list index {last!r}") from None
            if not 0 <= idx <= len(parent):
                raise PatchError(f"list index {idx} out of range")
            parent.insert(idx, value)
    else:
        raise PatchError(f"cannot add at {'/'.join(parts)!r}")
    return doc


def _remove(doc: Any, parts: list[str]) -> tuple[Any, Any]:
    if not parts:
        raise PatchError("cannot remove the whole document")
    parent = _walk(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"path {'/' + '/'.join(parts)!r} does not exist")
        return doc, parent.pop(last)
    if isinstance(parent, list):
        try:
            return doc, parent.pop(int(last))
        except (ValueError, IndexError):
            raise PatchError(f"invalid list index {last!r}") from None
    raise PatchError(f"cannot remove at {'/'.join(parts)!r}")


def json_patch(doc: Any, ops: Any) -> Any:
    if not isinstance(ops, list):
        raise PatchError("a JSON patch is a list of operations")
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"invalid JSON patch operation {op!r}")
        kind, parts = op["op"], _pointer(op["path"])
        if kind == "add":
            doc = _add(doc, parts, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            doc, _ = _remove(doc, parts)
        elif kind == "replace":
            _walk(doc, parts)
            if not parts:
                doc = copy.deepcopy(op.get("value"))
            else:
                doc, _ = _remove(doc, parts)
                doc = _add(doc, parts, copy.deepcopy(op.get("value")))
        elif kind in ("move", "copy"):
            src = _pointer(op.get("from", ""))
            if kind == "move":
                doc, value = _remove(doc, src)
            else:
                value = copy.deepcopy(_walk(doc, src))
            doc = _add(doc, parts, value)
        elif kind == "test":
            if _walk(doc, parts) != op.get("value"):
                raise PatchError(f"test operation failed at {op['path']!r}", code=422)
        else:
            raise PatchError(f"unknown JSON patch operation {kind!r}")
    return doc
