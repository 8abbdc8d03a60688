"""Field ownership (metadata.managedFields) and server-side apply, close to structured-merge-diff.

What it owns:
- Field sets: an object's fields as paths of FieldsV1 keys (`f:spec`, `k:{"name":"main"}` for an item of an
  associative list, `v:"x"` for an item of a set, `.` for the item itself), converted to and from the
  `fieldsV1` trees kept in `metadata.managedFields`.
- `record_update`: a non-apply write (create, PUT, PATCH) gives its manager (operation Update) the fields it
  changed and takes them from every other manager, as the real field manager does.
- `apply`: server-side apply of a configuration by a manager (operation Apply): conflicts with other
  managers that own a field the configuration sets to a different value (409 `Apply failed with N
  conflict...`, or taken over with force), the configuration merged into the live object (associative lists
  merged by key, other lists replaced), fields the manager applied before and no longer applies removed when
  nobody else owns them.

What it simplifies (said in docs/kubesim.md): list semantics come from a fixed table of field names (the
real server reads them from the OpenAPI schema); ownership of `status` is not tracked; `managedFields` sent
by a client on update are ignored (the stored ones are kept and updated).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import orjson

Obj = dict[str, Any]
Path = tuple[str, ...]

# Lists merged by key (listType=map in the real schemas), by field name.
LIST_KEYS: dict[str, tuple[str, ...]] = {
    "containers": ("name",),
    "initContainers": ("name",),
    "ephemeralContainers": ("name",),
    "env": ("name",),
    "ports": ("containerPort", "protocol"),
    "volumes": ("name",),
    "volumeMounts": ("mountPath",),
    "volumeDevices": ("devicePath",),
    "imagePullSecrets": ("name",),
    "resourceClaims": ("name",),
    "conditions": ("type",),
    "ownerReferences": ("uid",),
    "hostAliases": ("ip",),
    "topologySpreadConstraints": ("topologyKey", "whenUnsatisfiable"),
    "flavors": ("name",),
    "resources": ("name",),
    "podSets": ("name",),
}
# Lists merged as sets (listType=set).
SET_LISTS = frozenset({"finalizers"})
# Metadata the server sets: never owned by a manager.
_SYSTEM_META = frozenset(
    {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
        "generateName",
    }
)
_SKIP_TOP = frozenset({"apiVersion", "kind", "status"})
_ITEM = "."


class _Missing:
    pass


MISSING: Any = _Missing()


class ApplyConflict(Exception):
    """Apply conflicts: the message and the (field path, manager description) pairs, for a 409."""

    def __init__(self, message: str, causes: list[tuple[str, str]]) -> None:
        super().__init__(message)
        self.causes = causes


@dataclass(slots=True)
class Entry:
    """One managedFields entry."""

    manager: str
    operation: str  # Apply | Update
    api_version: str
    time: str
    fields: set[Path]

    def to_json(self) -> Obj:
        return {
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": to_fields_v1(self.fields),
        }

    def describe(self) -> str:
        """As the real server names a manager in a conflict: Apply managers by name, Update ones with their
        apiVersion and time."""
        if self.operation == "Update":
            return f'"{self.manager}" using {self.api_version} at {self.time}'
        return f'"{self.manager}"'


# ------------------------------------------------------------------------------------------ field sets


def _key_of(item: Any, keys: tuple[str, ...]) -> str | None:
    if not isinstance(item, dict):
        return None
    present = {k: item[k] for k in keys if k in item}
    if not present:
        return None
    return "k:" + orjson.dumps(present, option=orjson.OPT_SORT_KEYS).decode()


def _walk(value: Any, prefix: Path, field: str, out: dict[Path, Any]) -> None:
    if isinstance(value, dict) and value:
        for k, v in value.items():
            _walk(v, (*prefix, f"f:{k}"), k, out)
        return
    if isinstance(value, list) and value and field in SET_LISTS:
        for v in value:
            out[(*prefix, "v:" + orjson.dumps(v).decode())] = v
        return
    if isinstance(value, list) and value and field in LIST_KEYS:
        keys = LIST_KEYS[field]
        keyed = [_key_of(item, keys) for item in value]
        if all(keyed) and len(set(keyed)) == len(keyed):
            for item, key in zip(value, keyed, strict=True):
                assert key is not None
                out[(*prefix, key, _ITEM)] = MISSING  # the item itself: no value to conflict on
                for k, v in item.items():
                    _walk(v, (*prefix, key, f"f:{k}"), k, out)
            return
    out[prefix] = value


def leaves(obj: Obj) -> dict[Path, Any]:
    """The object's owned-field paths (leaves and list items) with their values."""
    out: dict[Path, Any] = {}
    for k, v in obj.items():
        if k in _SKIP_TOP:
            continue
        if k == "metadata" and isinstance(v, dict):
            for mk, mv in v.items():
                if mk not in _SYSTEM_META:
                    _walk(mv, ("f:metadata", f"f:{mk}"), mk, out)
            continue
        _walk(v, (f"f:{k}",), k, out)
    return out


def to_fields_v1(fields: set[Path]) -> Obj:
    tree: Obj = {}
    for path in sorted(fields):
        node = tree
        for el in path:
            node = node.setdefault(el, {})
    return tree


def from_fields_v1(tree: Any, prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    if not isinstance(tree, dict):
        return out
    for k, v in tree.items():
        path = (*prefix, k)
        if isinstance(v, dict) and v and not (k.startswith("k:") and set(v) == {_ITEM}):
            out |= from_fields_v1(v, path)
            if k.startswith("k:") and _ITEM in v:
                out.add((*path, _ITEM))
                out.discard((*path, _ITEM, _ITEM))
        elif k == _ITEM:
            out.add(path)
        elif k.startswith("k:"):
            out.add((*path, _ITEM))
        else:
            out.add(path)
    return out


def path_string(path: Path) -> str:
    """fieldpath.Path.String(): `.spec.containers[name="main"].image`, `.metadata.finalizers[="x"]`."""
    out = ""
    for el in path:
        if el == _ITEM:
            continue
        kind, _, rest = el.partition(":")
        if kind == "f":
            out += "." + rest
        elif kind == "k":
            key = orjson.loads(rest)
            out += "[" + ",".join(f"{k}={orjson.dumps(v).decode()}" for k, v in key.items()) + "]"
        elif kind == "v":
            out += f"[={rest}]"
        else:
            out += f"[{rest}]"
    return out


def read_entries(obj: Obj) -> list[Entry]:
    out = []
    for e in (obj.get("metadata") or {}).get("managedFields") or []:
        if not isinstance(e, dict) or not e.get("manager"):
            continue
        out.append(
            Entry(
                str(e["manager"]),
                str(e.get("operation") or "Update"),
                str(e.get("apiVersion") or ""),
                str(e.get("time") or ""),
                from_fields_v1(e.get("fieldsV1")),
            )
        )
    return out


def write_entries(obj: Obj, entries: list[Entry]) -> None:
    kept = [e.to_json() for e in entries if e.fields]
    meta = obj.setdefault("metadata", {})
    if kept:
        meta["managedFields"] = kept
    else:
        meta.pop("managedFields", None)


# ------------------------------------------------------------------------------------------ updates


def record_update(old: Obj | None, new: Obj, manager: str, api_version: str, now: str) -> None:
    """Field ownership after a non-apply write of `new` (over `old`, None on create), in place on `new`."""
    entries = read_entries(old) if old is not None else []
    before = leaves(old) if old is not None else {}
    after = leaves(new)
    changed = {p for p, v in after.items() if p not in before or before[p] != v}
    removed = {p for p in before if p not in after}
    for e in entries:
        e.fields -= changed | removed
        e.fields = {p for p in e.fields if not _under_any(p, removed)}
    if changed:
        mine = next((e for e in entries if e.manager == manager and e.operation == "Update"), None)
        if mine is None:
            mine = Entry(manager, "Update", api_version, now, set())
            entries.append(mine)
        mine.fields |= changed
        mine.time, mine.api_version = now, api_version
    write_entries(new, entries)


def _under_any(path: Path, roots: set[Path]) -> bool:
    return any(path[: len(r)] == r for r in roots if len(r) < len(path))


# ------------------------------------------------------------------------------------------ apply


def _find_item(items: list[Any], key: str) -> int:
    for i, item in enumerate(items):
        if isinstance(item, dict) and key.startswith("k:"):
            want = orjson.loads(key[2:])
            if all(item.get(k) == v for k, v in want.items()):
                return i
    return -1


def _merge(live: Any, applied: Any, field: str) -> Any:
    if isinstance(live, dict) and isinstance(applied, dict):
        out = dict(live)
        for k, v in applied.items():
            out[k] = _merge(live.get(k, MISSING), v, k)
        return out
    if isinstance(live, list) and isinstance(applied, list):
        if field in SET_LISTS:
            return live + [v for v in applied if v not in live]
        keys = LIST_KEYS.get(field)
        if keys and all(_key_of(i, keys) for i in applied + live):
            out_list = list(live)
            for item in applied:
                key = _key_of(item, keys)
                assert key is not None
                at = _find_item(out_list, key)
                if at < 0:
                    out_list.append(copy.deepcopy(item))
                else:
                    out_list[at] = _merge(out_list[at], item, "")
            return out_list
    return copy.deepcopy(applied)


def merge_values(live: Any, applied: Any) -> Any:
    """`applied` merged into `live` as apply merges them (keyed lists by key), without ownership: the
    status subresource's apply."""
    if applied is None:
        return copy.deepcopy(live)
    return _merge(live if live is not None else MISSING, applied, "")


def _remove(obj: Any, path: Path) -> None:
    """Remove the field (or list item) at `path` from `obj`, if there."""
    if not path:
        return
    node = obj
    for i, el in enumerate(path):
        last = i == len(path) - 1 or (i == len(path) - 2 and path[-1] == _ITEM)
        kind, _, rest = el.partition(":")
        if kind == "f" and isinstance(node, dict):
            if last:
                node.pop(rest, None)
                return
            node = node.get(rest, MISSING)
        elif kind in ("k", "v") and isinstance(node, list):
            at = _find_item(node, el) if kind == "k" else _value_index(node, rest)
            if at < 0:
                return
            if last:
                del node[at]
                return
            node = node[at]
        else:
            return


def _value_index(items: list[Any], encoded: str) -> int:
    value = orjson.loads(encoded)
    return items.index(value) if value in items else -1


def apply(
    live: Obj | None,
    config: Obj,
    manager: str,
    api_version: str,
    now: str,
    force: bool,
) -> Obj:
    """The object after `manager` applies `config` to `live` (None: the object is created by the apply),
    with managedFields updated. Raises ApplyConflict unless `force`."""
    applied = leaves(config)
    if live is None:
        new = copy.deepcopy(config)
        write_entries(new, [Entry(manager, "Apply", api_version, now, set(applied))])
        return new
    entries = read_entries(live)
    current = leaves(live)
    conflicts: list[tuple[Path, Entry]] = []
    for e in entries:
        if e.manager == manager and e.operation == "Apply":
            continue
        for p in sorted(e.fields & set(applied)):
            if applied[p] is MISSING:
                continue
            if current.get(p, MISSING) != applied[p]:
                conflicts.append((p, e))
    if conflicts and not force:
        raise _conflict_error(conflicts)
    for p, e in conflicts:
        e.fields.discard(p)
    mine = next((e for e in entries if e.manager == manager and e.operation == "Apply"), None)
    previously = mine.fields if mine is not None else set()
    merged: Obj = _merge(live, {k: v for k, v in config.items() if k not in _SKIP_TOP}, "")
    others = set().union(*(e.fields for e in entries if e is not mine))
    for p in sorted(previously - set(applied), key=len, reverse=True):
        base = p[:-1] if p[-1] == _ITEM else p
        if p not in others and not any(q[: len(base)] == base for q in others):
            _remove(merged, base)
    if mine is None:
        mine = Entry(manager, "Apply", api_version, now, set())
        entries.append(mine)
    if mine.fields != set(applied):
        mine.time = now
    mine.fields, mine.api_version = set(applied), api_version
    write_entries(merged, entries)
    return merged


def _conflict_error(conflicts: list[tuple[Path, Entry]]) -> ApplyConflict:
    causes = [(path_string(p), f"conflict with {e.describe()}") for p, e in conflicts]
    if len(conflicts) == 1:
        p, e = conflicts[0]
        return ApplyConflict(
            f"Apply failed with 1 conflict: conflict with {e.describe()}: {path_string(p)}", causes
        )
    by_manager: dict[str, list[str]] = {}
    for p, e in conflicts:
        by_manager.setdefault(e.describe(), []).append(path_string(p))
    lines: list[str] = []
    for m in sorted(by_manager):
        lines.append(f"conflicts with {m}:")
        lines.extend(f"- {p}" for p in by_manager[m])
    return ApplyConflict(f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines), causes)


def manager_name(field_manager: str | None, user_agent: str) -> str:
    """The manager of a write: the fieldManager parameter, else the user agent up to its first '/'."""
    if field_manager:
        return field_manager
    return user_agent.split("/", 1)[0] or "unknown"
