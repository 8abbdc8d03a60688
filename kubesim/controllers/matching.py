"""Node selection predicates: nodeSelector, node affinity (required and preferred), taints and tolerations.

Owns the label/taint matching kube-scheduler's NodeAffinity and TaintToleration plugins do, as pure
functions over plain dicts, so the scheduler and the cluster autoscaler agree on what fits where.
"""

from __future__ import annotations

from typing import Any

from kubesim.store import Obj

Labels = dict[str, str]


def _int(value: str) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def expression_matches(expr: Obj, labels: Labels) -> bool:
    """One NodeSelectorRequirement: In, NotIn, Exists, DoesNotExist, Gt, Lt."""
    key = expr.get("key", "")
    op = expr.get("operator", "")
    values = expr.get("values") or []
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        if not present or len(values) != 1:
            return False
        have, want = _int(labels[key]), _int(values[0])
        if have is None or want is None:
            return False
        return have > want if op == "Gt" else have < want
    return False


def term_matches(term: Obj, labels: Labels, node_name: str) -> bool:
    """A NodeSelectorTerm: all matchExpressions and matchFields (metadata.name) hold. An empty term matches nothing."""
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False
    if not all(expression_matches(e, labels) for e in exprs):
        return False
    return all(expression_matches(f, {"metadata.name": node_name}) for f in fields)


def _node_affinity(pod_spec: Obj) -> Obj:
    return ((pod_spec.get("affinity") or {}).get("nodeAffinity")) or {}


def selector_and_affinity_match(pod_spec: Obj, labels: Labels, node_name: str) -> bool:
    """nodeSelector and requiredDuringSchedulingIgnoredDuringExecution (terms ORed)."""
    for k, v in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    required = _node_affinity(pod_spec).get("requiredDuringSchedulingIgnoredDuringExecution")
    if required:
        terms = required.get("nodeSelectorTerms") or []
        if not any(term_matches(t, labels, node_name) for t in terms):
            return False
    return True


def preferred_score(pod_spec: Obj, labels: Labels, node_name: str) -> int:
    """Sum of the weights of the preferredDuringScheduling terms the node matches."""
    score = 0
    for pref in _node_affinity(pod_spec).get("preferredDuringSchedulingIgnoredDuringExecution") or ():
        if term_matches(pref.get("preference") or {}, labels, node_name):
            score += int(pref.get("weight") or 0)
    return score


def tolerates(toleration: Obj, taint: Obj) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    op = toleration.get("operator") or "Equal"
    if op == "Exists":
        return not key or key == taint.get("key")
    return key == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated_taint(pod_spec: Obj, taints: list[Any]) -> Obj | None:
    """The first NoSchedule/NoExecute taint no toleration of the pod matches, or None."""
    tolerations = pod_spec.get("tolerations") or []
    for taint in taints:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return dict(taint)
    return None


def taint_text(taint: Obj) -> str:
    return f"{{{taint.get('key', '')}: {taint.get('value', '')}}}"
