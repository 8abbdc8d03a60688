"""`-l/--selector` on the jobs list: kubectl's equality-based label selectors over the labels a job
carries (its `labels`, or a plain Job's metadata and pod template labels)."""

from __future__ import annotations

from typing import Any

from broker.cli.client import EXIT_USAGE, CliError

__all__ = ["matches", "parse_selector"]


def parse_selector(selector: str | None) -> list[tuple[str, str, str]]:
    """`team=nlp,tier!=batch,gpu` -> [(key, op, value)], op one of =, != and `exists` (a key alone)."""
    terms: list[tuple[str, str, str]] = []
    for raw in (selector or "").split(","):
        term = raw.strip()
        if not term:
            continue
        op = "!=" if "!=" in term else ("==" if "==" in term else ("=" if "=" in term else "exists"))
        key, _, value = term.partition(op) if op != "exists" else (term, "", "")
        if not key.strip():
            raise CliError(f"--selector: {raw!r} has no label key", EXIT_USAGE)
        terms.append(
            (key.strip(), "!=" if op == "!=" else ("exists" if op == "exists" else "="), value.strip())
        )
    return terms


def matches(job: dict[str, Any], terms: list[tuple[str, str, str]]) -> bool:
    """Whether a job's labels satisfy every term (kubectl: a != term also matches a job without the key)."""
    labels = (job.get("request") or {}).get("labels") or {}
    for key, op, value in terms:
        if op == "exists" and key not in labels:
            return False
        if op == "=" and labels.get(key) != value:
            return False
        if op == "!=" and labels.get(key) == value:
            return False
    return True
