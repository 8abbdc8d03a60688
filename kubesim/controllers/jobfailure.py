"""How the Job controller judges a failed pod: podFailurePolicy rules, index sets, OnFailure restarts.

Owns the pure helpers of the simulated Job controller (no store, no clock):
- `match_pod_failure_policy(policy, pod)` -> `PolicyVerdict`: the first rule that matches a Failed pod
  (onExitCodes In/NotIn over the terminated non-zero exit codes of its containers, optionally one named
  container; onPodConditions type/status), its action (FailJob, FailIndex, Ignore, Count), whether the
  failure counts towards backoffLimit, and the FailJob message in the real controller's words
  ("Container main for pod default/x failed with exit code 42 matching FailJob rule at index 0",
  "Pod default/x has condition DisruptionTarget matching FailJob rule at index 1").
- `parse_indexes` / `format_indexes`: the `"0-3,5"` interval strings of completedIndexes and failedIndexes.
- `restarts_past_backoff_limit(restart_policy, pods, backoff_limit)`: restartPolicy OnFailure, the sum of
  container restartCounts of Pending/Running pods reaching backoffLimit (more than 0 when it is 0).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kubesim.store import Obj


@dataclass(frozen=True, slots=True)
class PolicyVerdict:
    action: str | None  # the matching rule's action, None when no rule matched
    counts: bool  # whether the failure counts towards backoffLimit / backoffLimitPerIndex
    message: str | None = None  # FailJob / FailIndex: the condition message


def _terminated_codes(pod: Obj, container: str | None) -> list[tuple[str, int]]:
    st = pod.get("status") or {}
    out = []
    for cs in [*(st.get("initContainerStatuses") or ()), *(st.get("containerStatuses") or ())]:
        if container and cs.get("name") != container:
            continue
        term = (cs.get("state") or {}).get("terminated")
        if term and int(term.get("exitCode", 0)) != 0:
            out.append((str(cs.get("name", "")), int(term["exitCode"])))
    return out


def match_pod_failure_policy(policy: Obj | None, pod: Obj) -> PolicyVerdict:
    """The verdict of spec.podFailurePolicy on a failed pod (no policy or no match: counted)."""
    if not policy:
        return PolicyVerdict(None, True)
    meta = pod.get("metadata") or {}
    who = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    for index, rule in enumerate(policy.get("rules") or ()):
        action = str(rule.get("action", ""))
        on_codes = rule.get("onExitCodes")
        if on_codes is not None:
            values = {int(v) for v in on_codes.get("values") or ()}
            op_in = on_codes.get("operator") == "In"
            for name, code in _terminated_codes(pod, on_codes.get("containerName")):
                if (code in values) == op_in:
                    message = (
                        f"Container {name} for pod {who} failed with exit code {code} matching {action} "
                        f"rule at index {index}"
                    )
                    return PolicyVerdict(action, action != "Ignore", message)
            continue
        for want in rule.get("onPodConditions") or ():
            for cond in (pod.get("status") or {}).get("conditions") or ():
                if cond.get("type") == want.get("type") and cond.get("status") == want.get("status", "True"):
                    message = (
                        f"Pod {who} has condition {cond['type']} matching {action} rule at index {index}"
                    )
                    return PolicyVerdict(action, action != "Ignore", message)
    return PolicyVerdict(None, True)


def parse_indexes(text: str | None) -> set[int]:
    """`"0-3,5"` -> `{0, 1, 2, 3, 5}`; malformed parts are skipped."""
    out: set[int] = set()
    for part in (text or "").split(","):
        first, _, last = part.strip().partition("-")
        try:
            lo = int(first)
            hi = int(last) if last else lo
        except ValueError:
            continue
        out.update(range(lo, hi + 1))
    return out


def format_indexes(indexes: Iterable[int]) -> str:
    """`{0, 1, 2, 3, 5}` -> `"0-3,5"` (the completedIndexes / failedIndexes format)."""
    out: list[str] = []
    ordered = sorted(set(indexes))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)


def restarts_past_backoff_limit(restart_policy: str | None, pods: Iterable[Obj], backoff_limit: int) -> bool:
    """pastBackoffLimitOnFailure: restarts of the containers of Pending/Running pods reach backoffLimit."""
    if restart_policy != "OnFailure":
        return False
    total = 0
    for pod in pods:
        st = pod.get("status") or {}
        if st.get("phase", "Pending") not in ("Pending", "Running"):
            continue
        for cs in [*(st.get("initContainerStatuses") or ()), *(st.get("containerStatuses") or ())]:
            total += int(cs.get("restartCount") or 0)
    return total > 0 if backoff_limit == 0 else total >= backoff_limit
