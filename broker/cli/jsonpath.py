"""`-o jsonpath=TEMPLATE`: kubectl's JSONPath templates over the broker's JSON answers.

The part of kubectl's template language people type: text with `{...}` blocks holding a path from the
current object (`{.name}`, `{.items[0].id}`, `{.items[*].name}`, `{.request['gpuProducts']}`), string
literals (`{"\\n"}`, `{"\\t"}`), and `{range .items[*]}...{end}` to repeat the text for each element.
Several results of one path are joined by spaces, as kubectl does; a path that finds nothing is an
error naming it (kubectl's `is not found`), so a typo does not pass as an empty answer. A field that is
there with no value (null: a queued job's `placement`) reads as empty, with whatever path follows it.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["JsonPathError", "render_jsonpath"]

_BLOCK = re.compile(r"\{((?:[^{}\"]|\"(?:[^\"\\]|\\.)*\")*)\}")
_STEP = re.compile(r"\.([A-Za-z0-9_-]+)|\[(\*|-?\d+)\]|\['([^']*)'\]|\[\"([^\"]*)\"\]")


class JsonPathError(ValueError):
    """A template that does not parse, or a path that finds nothing."""


def _select(data: Any, path: str) -> list[Any]:
    path = path.strip()
    if path in ("", ".", "@", "$"):
        return [data]
    path = path.removeprefix("$").removeprefix("@")
    found, pos = [data], 0
    while pos < len(path):
        m = _STEP.match(path, pos)
        if m is None:
            raise JsonPathError(f"jsonpath: cannot read {path[pos:]!r} in {path!r}")
        field, index, quoted, dquoted = m.groups()
        key = field if field is not None else (quoted if quoted is not None else dquoted)
        nxt: list[Any] = []
        for item in found:
            if item is None:  # a field that is there without a value (null): empty below it, as kubectl
                nxt.append(None)
            elif key is not None and isinstance(item, dict) and key in item:
                nxt.append(item[key])
            elif index == "*":
                nxt.extend(
                    item if isinstance(item, list) else list(item.values()) if isinstance(item, dict) else []
                )
            elif index is not None and isinstance(item, list) and -len(item) <= int(index) < len(item):
                nxt.append(item[int(index)])
        if not nxt:
            raise JsonPathError(f"jsonpath: {path} is not found")
        found, pos = nxt, m.end()
    return found


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value)


def _tokens(template: str) -> list[tuple[str, str]]:
    """('text', s) / ('path', p) / ('literal', s) / ('range', p) / ('end', '') in order."""
    out: list[tuple[str, str]] = []
    pos = 0
    for m in _BLOCK.finditer(template):
        if m.start() > pos:
            out.append(("text", template[pos : m.start()]))
        body = m.group(1).strip()
        if body.startswith('"') and body.endswith('"') and len(body) >= 2:
            out.append(("literal", json.loads(body)))
        elif body.startswith("range "):
            out.append(("range", body[len("range ") :]))
        elif body == "end":
            out.append(("end", ""))
        else:
            out.append(("path", body))
        pos = m.end()
    if pos < len(template):
        out.append(("text", template[pos:]))
    if "{" in "".join(t for k, t in out if k == "text"):
        raise JsonPathError(f"jsonpath: unbalanced braces in {template!r}")
    return out


def _run(tokens: list[tuple[str, str]], data: Any) -> str:
    parts: list[str] = []
    i = 0
    while i < len(tokens):
        kind, value = tokens[i]
        if kind in ("text", "literal"):
            parts.append(value)
        elif kind == "path":
            parts.append(" ".join(_text(v) for v in _select(data, value)))
        elif kind == "range":
            depth, j = 1, i + 1
            while j < len(tokens) and depth:
                depth += {"range": 1, "end": -1}.get(tokens[j][0], 0)
                j += 1
            if depth:
                raise JsonPathError("jsonpath: {range} without {end}")
            body = tokens[i + 1 : j - 1]
            parts.extend(_run(body, item) for item in _select(data, value))
            i = j
            continue
        else:
            raise JsonPathError("jsonpath: {end} without {range}")
        i += 1
    return "".join(parts)


def render_jsonpath(template: str, data: Any) -> str:
    """The template applied to `data` (a bare path without braces is taken as one block)."""
    if "{" not in template:
        template = "{" + template + "}"
    return _run(_tokens(template), data)
