"""No test asserts a duration and none sleeps to synchronise (issue 49): read from every file under tests/
with `ast`, as tests/unit/test_architecture.py reads the code. How fast something runs is a benchmark's
figure (benchmarks/, docs/benchmarks.md); a test that asserts it passes on a fast machine and fails on a
loaded one, and a test that sleeps instead of waiting for the thing it needs does both at random.

The rules, exactly:

1. *No duration assert.* Within one function, a **clock reading** is a call with no arguments of
   `time.monotonic`, `time.time`, `time.perf_counter` or their `_ns` forms (as `time.X()` or as a name
   imported from `time`); a **time point** is a clock reading or a name assigned an expression that
   holds one; a **duration** is a subtraction whose both sides hold a time point
   (`time.monotonic() - start`), or a name assigned an expression that holds a duration
   (`elapsed = (time.monotonic() - t0) * 1000`). An `assert` whose test holds a comparison with a
   duration in it is a duration assert. (`time.time() - 0.5`, a point in the past, is not a duration;
   `assert time.monotonic() < deadline`, a poll's deadline, is no duration either. A fake clock's
   values are not clock readings: tests should prefer one.)
2. *No sleep outside a polling loop.* A call of `time.sleep` or `asyncio.sleep` (or `sleep` imported from
   either) is a poll's pause when it is inside, in the same function, a `while` loop's body (the loop's
   test is the condition) or a `for` loop's body that checks a condition (holds an `if`, `break`,
   `return`, `assert` or `raise`). `sleep(0)` only yields to other tasks and is always allowed. Any other
   sleep (a bare sleep before an action or an assert) is a violation, unless `ALLOWED` names its file
   and function with the reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLOCKS = frozenset({"monotonic", "time", "perf_counter", "monotonic_ns", "perf_counter_ns", "time_ns"})
SLEEP_MODULES = frozenset({"time", "asyncio"})

# (file relative to the repo, the enclosing function's name) -> why its sleep is not a synchronisation.
ALLOWED: dict[tuple[str, str], str] = {
    ("tests/unit/test_hub_watcher.py", "open_watch"): (
        "a stub member's watch that stays open a moment and ends, as a quiet watch does: it stands for the "
        "member's time, nothing in the test waits on it"
    ),
}


def _imported_from(tree: ast.Module, modules: frozenset[str], names: frozenset[str]) -> set[str]:
    """Local names bound by `from <module> import <name>` for the given modules and names."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in modules:
            out |= {a.asname or a.name for a in node.names if a.name in names}
    return out


class _Scan:
    def __init__(self, tree: ast.Module) -> None:
        self.clock_names = _imported_from(tree, frozenset({"time"}), CLOCKS)
        self.sleep_names = _imported_from(tree, SLEEP_MODULES, frozenset({"sleep"}))

    def is_clock_reading(self, node: ast.AST) -> bool:
        if not isinstance(node, ast.Call) or node.args or node.keywords:
            return False
        f = node.func
        if isinstance(f, ast.Attribute):
            return f.attr in CLOCKS and isinstance(f.value, ast.Name) and f.value.id == "time"
        return isinstance(f, ast.Name) and f.id in self.clock_names

    def is_sleep(self, node: ast.Call) -> bool:
        f = node.func
        if isinstance(f, ast.Attribute):
            return f.attr == "sleep" and isinstance(f.value, ast.Name) and f.value.id in SLEEP_MODULES
        return isinstance(f, ast.Name) and f.id in self.sleep_names

    def duration_asserts(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[int]:
        points: set[str] = set()
        durations: set[str] = set()

        def holds_point(e: ast.AST) -> bool:
            return any(
                self.is_clock_reading(x) or (isinstance(x, ast.Name) and x.id in points) for x in ast.walk(e)
            )

        def holds_duration(e: ast.AST) -> bool:
            return any(
                (isinstance(x, ast.Name) and x.id in durations)
                or (
                    isinstance(x, ast.BinOp)
                    and isinstance(x.op, ast.Sub)
                    and holds_point(x.left)
                    and holds_point(x.right)
                )
                for x in ast.walk(e)
            )

        assigns = [
            (t.id, n.value)
            for n in ast.walk(fn)
            if isinstance(n, ast.Assign | ast.AnnAssign) and n.value is not None
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
            if isinstance(t, ast.Name)
        ]
        for _ in range(3):  # names assigned from names: a few rounds reach a fixed point
            for name, value in assigns:
                if holds_duration(value):
                    durations.add(name)
                elif holds_point(value):
                    points.add(name)
        return [
            n.lineno
            for n in ast.walk(fn)
            if isinstance(n, ast.Assert)
            and any(isinstance(c, ast.Compare) and holds_duration(c) for c in ast.walk(n.test))
        ]

    def bare_sleeps(self, tree: ast.Module) -> list[tuple[int, str]]:
        """(line, enclosing function) of each sleep that is not a poll's pause."""
        out: list[tuple[int, str]] = []

        def checks(loop: ast.For | ast.AsyncFor) -> bool:
            return any(
                isinstance(x, ast.If | ast.Break | ast.Return | ast.Assert | ast.Raise)
                for stmt in loop.body
                for x in ast.walk(stmt)
            )

        def visit(node: ast.AST, polling: bool, function: str) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                    visit(child, False, getattr(child, "name", function))
                    continue
                if isinstance(child, ast.While):
                    visit(child.test, polling, function)
                    for stmt in [*child.body, *child.orelse]:
                        visit_stmt(stmt, True, function)
                    continue
                if isinstance(child, ast.For | ast.AsyncFor):
                    for stmt in child.body:
                        visit_stmt(stmt, polling or checks(child), function)
                    for stmt in child.orelse:
                        visit_stmt(stmt, polling, function)
                    continue
                if isinstance(child, ast.Call) and self.is_sleep(child) and not polling:
                    arg = child.args[0] if child.args else None
                    if not (isinstance(arg, ast.Constant) and arg.value == 0):
                        out.append((child.lineno, function))
                visit(child, polling, function)

        def visit_stmt(stmt: ast.stmt, polling: bool, function: str) -> None:
            wrapper = ast.Module(body=[stmt], type_ignores=[])
            visit(wrapper, polling, function)

        visit(tree, False, "<module>")
        return out


def violations(source: str, path: str = "<snippet>") -> list[str]:
    tree = ast.parse(source)
    scan = _Scan(tree)
    found = [
        f"{path}:{line}: a duration asserted"
        for fn in ast.walk(tree)
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
        for line in scan.duration_asserts(fn)
    ]
    found += [
        f"{path}:{line}: a sleep outside a polling loop (in {function})"
        for line, function in scan.bare_sleeps(tree)
        if (path, function) not in ALLOWED
    ]
    return sorted(set(found))


def test_no_test_asserts_a_duration_or_sleeps_outside_a_polling_loop() -> None:
    found = [
        v
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for v in violations(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert found == [], "\n".join(
        ["move timing to benchmarks/, and poll for what a test waits for (this file's docstring):", *found]
    )


def test_every_allowed_sleep_is_still_there() -> None:
    """An entry of ALLOWED whose sleep went away is removed with it, so the list stays the exceptions."""
    for (path, function), why in ALLOWED.items():
        assert why
        tree = ast.parse((ROOT / path).read_text())
        assert any(f == function for _, f in _Scan(tree).bare_sleeps(tree)), (path, function)


FLAGGED = {
    "elapsed from two readings": (
        "import time\ndef test_x():\n    start = time.monotonic()\n    f()\n    assert time.monotonic() - start < 5\n"
    ),
    "a name holding a duration": (
        "import time\ndef test_x():\n    t0 = time.perf_counter()\n    f()\n"
        "    took = (time.perf_counter() - t0) * 1000\n    assert took <= 50\n"
    ),
    "a reading imported by name": (
        "from time import monotonic\ndef test_x():\n    a = monotonic()\n    assert 0.9 < monotonic() - a\n"
    ),
    "a bare sleep before an assert": "import time\ndef test_x():\n    go()\n    time.sleep(0.3)\n    assert done()\n",
    "an asyncio sleep as a wait": (
        "import asyncio\nasync def test_x():\n    go()\n    await asyncio.sleep(1)\n    assert done()\n"
    ),
    "a sleep in a loop that checks nothing": "import time\ndef test_x():\n    for _ in range(3):\n        time.sleep(1)\n",
    "a sleep in a helper that runs later": "import time\ndef later(d, fn):\n    time.sleep(d)\n    fn()\n",
}

CLEAN = {
    "a poll with a deadline": (
        "import time\ndef test_x():\n    deadline = time.monotonic() + 60\n"
        "    while not done():\n        assert time.monotonic() < deadline\n        time.sleep(0.05)\n"
    ),
    "a for loop that checks and breaks": (
        "import time\ndef test_x():\n    for _ in range(600):\n        if done():\n            break\n"
        "        time.sleep(0.1)\n"
    ),
    "a point in the past is no duration": (
        "import time\ndef test_x():\n    at = time.time() - 0.5\n    assert f(at) == [1]\n"
    ),
    "a fake clock's difference": "def test_x(clock):\n    before = clock.now\n    assert clock.now - before >= 3600\n",
    "a yield to the loop": "import asyncio\nasync def f():\n    await asyncio.sleep(0)\n",
    "a wait on an event": "def test_x(ev):\n    assert ev.wait(60)\n",
}


@pytest.mark.parametrize("name", FLAGGED)
def test_the_rule_flags(name: str) -> None:
    assert violations(FLAGGED[name]) != []


@pytest.mark.parametrize("name", CLEAN)
def test_the_rule_passes(name: str) -> None:
    assert violations(CLEAN[name]) == []
