"""Label and field selectors, as the API server parses and applies them.

Label selectors: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k` (exists), `!k` (does not exist),
`k>n`, `k<n`, joined by commas (AND). Field selectors: `f=v`, `f==v`, `f!=v` joined by commas, over the
fields each resource supports (others are a 400 BadRequest, as on a real API server).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]


class SelectorError(ValueError):
    """A selector that does not parse or names an unsupported field (400 BadRequest)."""


# ------------------------------------------------------------------------------------------------ labels

_KEY = r"[A-Za-z0-9](?:[-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VAL = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET_RE = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s*\(([^)]*)\)\s*$")
_CMP_RE = re.compile(rf"^\s*({_KEY})\s*(==|!=|=|>|<)\s*({_VAL})\s*$")
_EXISTS_RE = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    op: str  # = != in notin exists !exists gt lt
    values: frozenset[str] = frozenset()

    def matches(self, labels: dict[str, str]) -> bool:
        op, key = self.op, self.key
        if op == "=":
            return labels.get(key) in self.values
        if op == "!=":
            return labels.get(key) not in self.values
        if op == "in":
            return key in labels and labels[key] in self.values
        if op == "notin":
            return labels.get(key) not in self.values
        if op == "exists":
            return key in labels
        if op == "!exists":
            return key not in labels
        value = labels.get(key)
        if value is None:
            return False
        try:
            have, want = int(value), int(next(iter(self.values)))
        except ValueError:
            return False
        return have > want if op == "gt" else have < want


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def parse_label_selector(text: str | None) -> tuple[Requirement, ...]:
    if not text or not text.strip():
        return ()
    reqs = []
    for part in _split_top(text):
        if not part.strip():
            raise SelectorError(f"unable to parse requirement: empty requirement in {text!r}")
        m = _SET_RE.match(part)
        if m:
            values = frozenset(v.strip() for v in m.group(3).split(",") if v.strip())
            reqs.append(Requirement(m.group(1), m.group(2), values))
            continue
        m = _CMP_RE.match(part)
        if m:
            key, op, value = m.groups()
            if op in (">", "<"):
                if not value.lstrip("-").isdigit():
                    raise SelectorError(f"unable to parse requirement: {value!r} is not an integer")
                reqs.append(Requirement(key, "gt" if op == ">" else "lt", frozenset([value])))
            else:
                reqs.append(Requirement(key, "!=" if op == "!=" else "=", frozenset([value])))
            continue
        m = _EXISTS_RE.match(part)
        if m:
            reqs.append(Requirement(m.group(2), "!exists" if m.group(1) else "exists"))
            continue
        raise SelectorError(f"unable to parse requirement: found {part.strip()!r}, expected a requirement")
    return tuple(reqs)


def labels_match(reqs: tuple[Requirement, ...], obj: Obj) -> bool:
    if not reqs:
        return True
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(r.matches(labels) for r in reqs)


# ------------------------------------------------------------------------------------------------ fields

_COMMON_FIELDS = ("metadata.name", "metadata.namespace")
SUPPORTED_FIELDS: dict[str, tuple[str, ...]] = {
    "pods": (
        *_COMMON_FIELDS,
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ),
    "events": (
        *_COMMON_FIELDS,
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
    "nodes": (*_COMMON_FIELDS, "spec.unschedulable"),
    "namespaces": (*_COMMON_FIELDS, "status.phase"),
    "jobs.batch": (*_COMMON_FIELDS, "status.successful"),
    "resourceslices.resource.k8s.io": (*_COMMON_FIELDS, "spec.nodeName", "spec.driver"),
}


def _field_value(obj: Obj, path: str) -> str:
    if path == "source":  # events: source.component
        return str(((obj.get("source") or {}).get("component")) or "")
    if path == "status.successful":  # jobs
        return str((obj.get("status") or {}).get("succeeded") or 0)
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    if cur is None:
        return "false" if path in ("spec.unschedulable", "spec.hostNetwork") else ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    field: str
    equal: bool
    value: str

    def matches(self, obj: Obj) -> bool:
        return (_field_value(obj, self.field) == self.value) == self.equal


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", r"\1", value)


def parse_field_selector(text: str | None, resource_key: str) -> tuple[FieldRequirement, ...]:
    if not text or not text.strip():
        return ()
    allowed = SUPPORTED_FIELDS.get(resource_key, _COMMON_FIELDS)
    reqs = []
    for part in re.split(r"(?<!\\),", text):
        m = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|!=|=)(.*)$", part)
        if not m:
            raise SelectorError(f"invalid selector: {text!r}; can't understand {part!r}")
        name, op, value = m.groups()
        if name not in allowed:
            raise SelectorError(f"field label not supported: {name}")
        reqs.append(FieldRequirement(name, op != "!=", _unescape(value.strip())))
    return tuple(reqs)


def fields_match(reqs: tuple[FieldRequirement, ...], obj: Obj) -> bool:
    return all(r.matches(obj) for r in reqs)


def matcher(
    labels: tuple[Requirement, ...], fields: tuple[FieldRequirement, ...]
) -> Callable[[Obj], bool] | None:
    """A predicate over objects, or None when nothing is selected on (the fast path)."""
    if not labels and not fields:
        return None
    return lambda obj: labels_match(labels, obj) and fields_match(fields, obj)


def label_selector_matches(selector: Obj, labels: dict[str, str]) -> bool:
    """A metav1.LabelSelector object (matchLabels + matchExpressions In/NotIn/Exists/DoesNotExist) against
    labels. An empty selector matches everything (as in policy/v1 PodDisruptionBudgets)."""
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True
