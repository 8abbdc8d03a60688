"""A documented subset of CEL, enough for DRA device selectors as the NVIDIA driver's examples write them.

Owns `compile_selector(text) -> Selector` and `Selector.matches(device_view) -> bool`. Supported:

- `device.driver`, `device.attributes['<domain>'].<name>`, `device.capacity['<domain>'].<name>`
  (also `device.attributes["<domain>"]["<name>"]`);
- literals: 'strings' and "strings", integers, true/false, lists `['a', 'b']`;
- `quantity('40Gi')` and `semver('9.0.0')`, and `<value>.compareTo(<value>)` (-1, 0, 1);
- `==`, `!=`, `<`, `<=`, `>`, `>=`, `in` (list membership), `&&`, `||`, `!`, parentheses.

Anything else is a `CelError` naming the position. A missing attribute or capacity is a runtime error in
real CEL, which makes the device not match: here too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubesim.quantity import QuantityError, parse_quantity

__all__ = ["CelError", "DeviceView", "Selector", "compile_selector"]


class CelError(ValueError):
    """An expression outside the supported subset, or malformed."""


@dataclass(frozen=True)
class DeviceView:
    """What a selector sees of one device: its driver and its attributes/capacity by qualified name."""

    driver: str
    attributes: Mapping[str, Mapping[str, Any]]  # domain -> name -> value (str, int, bool, _Version)
    capacity: Mapping[str, Mapping[str, float]]  # domain -> name -> quantity as float


class _Missing(Exception):
    """A runtime lookup of an absent attribute: the device does not match."""


@dataclass(frozen=True, order=True)
class Version:
    parts: tuple[int, int, int]

    @classmethod
    def parse(cls, text: str) -> Version:
        m = re.match(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?", text.strip())
        if m is None:
            raise CelError(f"not a semantic version: {text!r}")
        return cls(tuple(int(g or 0) for g in m.groups()))  # type: ignore[arg-type]


_TOKEN = re.compile(
    r"\s*(?:(?P<str>'[^']*'|\"[^\"]*\")|(?P<num>-?\d+)|(?P<op>==|!=|<=|>=|&&|\|\||[<>!()\[\].,])"
    r"|(?P<id>[A-Za-z_][A-Za-z0-9_]*))"
)

Node = Callable[[DeviceView], Any]


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, str, int]] = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                raise CelError(f"unsupported syntax at position {pos}: {text[pos : pos + 20]!r}")
            kind = m.lastgroup or ""
            self.tokens.append((kind, m.group(kind), m.start(kind)))
            pos = m.end()
        self.i = 0

    def peek(self) -> tuple[str, str, int] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, value: str | None = None) -> tuple[str, str, int]:
        tok = self.peek()
        if tok is None:
            raise CelError(f"unexpected end of expression{f', expected {value!r}' if value else ''}")
        if value is not None and tok[1] != value:
            raise CelError(f"expected {value!r} at position {tok[2]}, got {tok[1]!r}")
        self.i += 1
        return tok

    def at(self, value: str) -> bool:
        tok = self.peek()
        return tok is not None and tok[1] == value and tok[0] in ("op", "id")

    # grammar -------------------------------------------------------------------------------------

    def parse(self) -> Node:
        node = self.or_()
        tok = self.peek()
        if tok is not None:
            raise CelError(f"unexpected {tok[1]!r} at position {tok[2]}")
        return node

    def or_(self) -> Node:
        left = self.and_()
        while self.at("||"):
            self.take()
            right = self.and_()
            left = _or(left, right)
        return left

    def and_(self) -> Node:
        left = self.not_()
        while self.at("&&"):
            self.take()
            right = self.not_()
            left = _and(left, right)
        return left

    def not_(self) -> Node:
        if self.at("!"):
            self.take()
            inner = self.not_()
            return lambda d: not _bool(inner(d))
        return self.cmp()

    def cmp(self) -> Node:
        left = self.postfix()
        tok = self.peek()
        if tok is not None and tok[1] in ("==", "!=", "<", "<=", ">", ">=", "in"):
            self.take()
            right = self.postfix()
            return _compare(tok[1], left, right)
        return left

    def postfix(self) -> Node:
        node = self.primary()
        while True:
            if self.at("."):
                self.take()
                kind, name, pos = self.take()
                if kind != "id":
                    raise CelError(f"expected a name after '.' at position {pos}")
                if self.at("("):
                    if name != "compareTo":
                        raise CelError(f"unsupported method {name!r} at position {pos}")
                    self.take("(")
                    arg = self.or_()
                    self.take(")")
                    node = _compare_to(node, arg)
                else:
                    node = _member(node, name)
            elif self.at("["):
                self.take()
                kind, text, pos = self.take()
                if kind != "str":
                    raise CelError(f"expected a quoted key at position {pos}")
                self.take("]")
                node = _member(node, text[1:-1])
            else:
                return node

    def primary(self) -> Node:
        kind, text, pos = self.take()
        if kind == "str":
            value = text[1:-1]
            return lambda d: value
        if kind == "num":
            number = int(text)
            return lambda d: number
        if text == "(":
            inner = self.or_()
            self.take(")")
            return inner
        if text == "[":
            items: list[Node] = []
            while not self.at("]"):
                items.append(self.or_())
                if not self.at("]"):
                    self.take(",")
            self.take("]")
            return lambda d: [item(d) for item in items]
        if kind == "id":
            if text in ("true", "false"):
                flag = text == "true"
                return lambda d: flag
            if text == "device":
                return _device
            if text in ("quantity", "semver"):
                self.take("(")
                kind2, arg, pos2 = self.take()
                if kind2 != "str":
                    raise CelError(f"{text}() takes a quoted string at position {pos2}")
                self.take(")")
                raw = arg[1:-1]
                if text == "quantity":
                    try:
                        q = parse_quantity(raw)
                    except QuantityError as exc:
                        raise CelError(str(exc)) from None
                    return lambda d: q
                ver = Version.parse(raw)
                return lambda d: ver
        raise CelError(f"unsupported syntax {text!r} at position {pos}")


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Missing("not a boolean")
    return value


def _or(a: Node, b: Node) -> Node:
    return lambda d: _bool(a(d)) or _bool(b(d))


def _and(a: Node, b: Node) -> Node:
    return lambda d: _bool(a(d)) and _bool(b(d))


def _device(d: DeviceView) -> Any:
    return {"driver": d.driver, "attributes": d.attributes, "capacity": d.capacity}


def _member(node: Node, name: str) -> Node:
    def get(d: DeviceView) -> Any:
        base = node(d)
        if not isinstance(base, Mapping) or name not in base:
            raise _Missing(name)
        return base[name]

    return get


def _compare(op: str, a: Node, b: Node) -> Node:
    def run(d: DeviceView) -> bool:
        left, right = a(d), b(d)
        if op == "in":
            if not isinstance(right, list):
                raise _Missing("'in' needs a list")
            return left in right
        if op == "==":
            return bool(left == right)
        if op == "!=":
            return bool(left != right)
        if type(left) is not type(right) and not (
            isinstance(left, int | float) and isinstance(right, int | float)
        ):
            raise _Missing("no such overload")
        if op == "<":
            return bool(left < right)
        if op == "<=":
            return bool(left <= right)
        if op == ">":
            return bool(left > right)
        return bool(left >= right)

    return run


def _compare_to(a: Node, b: Node) -> Node:
    def run(d: DeviceView) -> int:
        left, right = a(d), b(d)
        if isinstance(left, str) and isinstance(right, Version):
            left = Version.parse(left)
        if type(left) is not type(right) and not (
            isinstance(left, int | float) and isinstance(right, int | float)
        ):
            raise _Missing("no such overload")
        return -1 if left < right else (1 if left > right else 0)

    return run


@dataclass(frozen=True)
class Selector:
    expression: str
    _node: Node

    def matches(self, device: DeviceView) -> bool:
        try:
            return _bool(self._node(device))
        except _Missing:
            return False


def compile_selector(expression: str) -> Selector:
    """Compile a selector of the supported subset; CelError says where it is outside it."""
    if not isinstance(expression, str) or not expression.strip():
        raise CelError("expression is empty")
    return Selector(expression, _Parser(expression).parse())
