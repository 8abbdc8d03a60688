"""The PromQL subset kubesim's Prometheus API answers: instant vector selectors joined by `or`.

Owns `parse(text) -> Query` and `Query.evaluate(series)`, with Prometheus's semantics for what it
supports:

- `name`, `name{l="v", l!="v", l=~"re", l!~"re"}`, `{__name__=~"A|B", ...}` (regexes fully anchored, as
  Prometheus anchors them), a trailing comma, "double", 'single' and `back-quoted` strings;
- `a or b [or c ...]` (and `(a or b)`): every series of `a`, plus those of `b` whose label set *without
  the metric name* is not already in the result (so `A or B` with the same labels keeps only `A`'s series,
  as on a real Prometheus: ask for several metrics with `{__name__=~"A|B"}`).

Anything else (functions, aggregations, arithmetic, comparisons, range vectors, offset, @) is a
`PromQLError`, answered as Prometheus answers a bad query: 400 with errorType bad_data. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

Labels = dict[str, str]

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_OPS = ("=~", "!~", "!=", "=")
_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'", "r": "\r", "a": "\a", "b": "\b"}


class PromQLError(ValueError):
    """A query outside the subset or not PromQL at all; the message reads like Prometheus's."""


@dataclass(frozen=True, slots=True)
class Matcher:
    label: str
    op: str
    value: str

    def matches(self, actual: str) -> bool:
        if self.op == "=":
            return actual == self.value
        if self.op == "!=":
            return actual != self.value
        hit = _compile(self.value).fullmatch(actual) is not None
        return hit if self.op == "=~" else not hit


_REGEX_CACHE: dict[str, re.Pattern[str]] = {}


def _compile(pattern: str) -> re.Pattern[str]:
    compiled = _REGEX_CACHE.get(pattern)
    if compiled is None:
        try:
            compiled = re.compile(f"(?:{pattern})", re.DOTALL)
        except re.error as e:
            raise PromQLError(f"error parsing regexp: {e}: `{pattern}`") from None
        if len(_REGEX_CACHE) < 1024:
            _REGEX_CACHE[pattern] = compiled
    return compiled


@dataclass(frozen=True, slots=True)
class Selector:
    matchers: tuple[Matcher, ...]

    def accepts_name(self, name: str) -> bool:
        return all(m.matches(name) for m in self.matchers if m.label == "__name__")

    def matches(self, labels: Labels) -> bool:
        return all(m.matches(labels.get(m.label, "")) for m in self.matchers)


@dataclass(frozen=True, slots=True)
class Query:
    selectors: tuple[Selector, ...]  # joined by `or`, left to right

    def accepts_name(self, name: str) -> bool:
        """Whether any selector could match a series of this metric (lets callers skip whole metrics)."""
        return any(s.accepts_name(name) for s in self.selectors)

    def evaluate(
        self, series: Callable[[Callable[[str], bool]], Iterable[tuple[Labels, str]]]
    ) -> list[tuple[Labels, str]]:
        """The instant vector: `series(name_filter)` yields candidate (labels with __name__, value)."""
        result: list[tuple[Labels, str]] = []
        seen: set[tuple[tuple[str, str], ...]] = set()
        for i, sel in enumerate(self.selectors):
            batch = [(lbls, v) for lbls, v in series(sel.accepts_name) if sel.matches(lbls)]
            keys = [tuple(sorted((k, v) for k, v in lbls.items() if k != "__name__")) for lbls, _ in batch]
            if i == 0:
                result.extend(batch)
                seen.update(keys)
                continue
            for sample, key in zip(batch, keys, strict=True):
                if key not in seen:
                    result.append(sample)
            seen.update(keys)
        return result


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def _err(self, message: str, pos: int | None = None) -> PromQLError:
        at = self.pos if pos is None else pos
        line = self.text.count("\n", 0, at) + 1
        col = at - (self.text.rfind("\n", 0, at) + 1) + 1
        return PromQLError(f"{line}:{col}: parse error: {message}")

    def _ws(self) -> None:
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch.isspace():
                self.pos += 1
            elif ch == "#":
                end = self.text.find("\n", self.pos)
                self.pos = len(self.text) if end < 0 else end
            else:
                return

    def _peek(self) -> str:
        self._ws()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def parse(self) -> Query:
        if not self.text.strip():
            raise self._err("no expression found in input", 0)
        selectors = self._or_expr()
        self._ws()
        if self.pos < len(self.text):
            raise self._unsupported()
        return Query(tuple(selectors))

    def _or_expr(self) -> list[Selector]:
        selectors = self._operand()
        while True:
            self._ws()
            m = re.compile(r"or\b", re.IGNORECASE).match(self.text, self.pos)
            if m is None:
                return selectors
            self.pos = m.end()
            selectors += self._operand()

    def _operand(self) -> list[Selector]:
        if self._peek() == "(":
            self.pos += 1
            inner = self._or_expr()
            if self._peek() != ")":
                raise self._err("unclosed left parenthesis" if self.pos >= len(self.text) else "unexpected")
            self.pos += 1
            return inner
        return [self._selector()]

    def _unsupported(self) -> PromQLError:
        rest = self.text[self.pos :].strip()
        token = rest.split()[0] if rest else "end of input"
        return self._err(
            f'unexpected "{token[:20]}": kubesim answers only vector selectors joined by "or" '
            "(see docs/kubesim.md, GPU health)"
        )

    def _selector(self) -> Selector:
        self._ws()
        start = self.pos
        matchers: list[Matcher] = []
        name = _NAME.match(self.text, self.pos)
        if name is not None:
            word = name.group(0)
            if word.lower() in ("or", "and", "unless", "by", "without", "offset", "bool", "on", "ignoring"):
                raise self._err(f'unexpected "{word}"')
            self.pos = name.end()
            matchers.append(Matcher("__name__", "=", word))
            if self._peek() == "(":
                raise self._err(
                    f'unexpected "(": functions ({word}) are not answered by kubesim (see docs/kubesim.md)'
                )
        if self._peek() == "{":
            self.pos += 1
            matchers += self._matchers()
        elif name is None:
            if self.pos >= len(self.text):
                raise self._err("unexpected end of input")
            raise self._unsupported()
        if self._peek() == "[":
            raise self._err('unexpected "[": range vectors are not answered by kubesim')
        if not any(not m.matches("") for m in matchers):
            raise PromQLError("vector selector must contain at least one non-empty matcher")
        del start
        return Selector(tuple(matchers))

    def _matchers(self) -> list[Matcher]:
        out: list[Matcher] = []
        while True:
            if self._peek() == "}":
                self.pos += 1
                return out
            label = _LABEL.match(self.text, self.pos)
            if label is None:
                if self.pos >= len(self.text):
                    raise self._err("unexpected end of input inside braces")
                raise self._err(f"unexpected character inside braces: {self.text[self.pos]!r}")
            self.pos = label.end()
            self._ws()
            op = next((o for o in _OPS if self.text.startswith(o, self.pos)), None)
            if op is None:
                raise self._err(
                    f'unexpected {self.text[self.pos : self.pos + 1]!r} in label matching, expected "="'
                )
            self.pos += len(op)
            value = self._string()
            if op in ("=~", "!~"):
                _compile(value)
            out.append(Matcher(label.group(0), op, value))
            nxt = self._peek()
            if nxt == ",":
                self.pos += 1
            elif not nxt:
                raise self._err("unexpected end of input inside braces")
            elif nxt != "}":
                raise self._err('unexpected character inside braces, expected "," or "}"')

    def _string(self) -> str:
        quote = self._peek()
        if quote not in ('"', "'", "`"):
            raise self._err("unexpected identifier in label matching, expected string")
        self.pos += 1
        out: list[str] = []
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            self.pos += 1
            if ch == quote:
                return "".join(out)
            if ch == "\\" and quote != "`" and self.pos < len(self.text):
                esc = self.text[self.pos]
                self.pos += 1
                out.append(_ESCAPES.get(esc, "\\" + esc))
            else:
                out.append(ch)
        raise self._err("unterminated quoted string")


def parse(text: str) -> Query:
    """Parse a query of the subset; PromQLError names the position and what is not understood."""
    return _Parser(text).parse()
