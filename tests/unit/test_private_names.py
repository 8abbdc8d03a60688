"""No package reaches into another's private names (issue 43): a `_name` (not a dunder) is its package's
own. A module of broker/ or adapters/ neither imports one from another package nor reads one off another
package's module (`routes._caller`); what two packages share is public, in the lower one."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("broker", "adapters", "kubesim")


def _package(module: str) -> str:
    """broker.api.routes -> broker.api; adapters.kube -> adapters; kubesim.api -> kubesim."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "broker" else parts[0]


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _ours(module: str) -> bool:
    return module.split(".", maxsplit=1)[0] in FOLDERS


def reach_ins(source: str, module: str) -> Iterator[str]:
    """Every private name of another package that the module's source imports or reads off a module."""
    own = _package(module)
    modules: dict[str, str] = {}  # local name -> the module of ours it is bound to
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _ours(alias.name) and alias.asname is not None:
                    modules[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and _ours(node.module):
            for alias in node.names:
                target = f"{node.module}.{alias.name}"
                if _is_module(target):
                    modules[alias.asname or alias.name] = target
                elif _private(alias.name) and _package(node.module) != own:
                    yield f"{module}: from {node.module} import {alias.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name):
            bound = modules.get(node.value.id)
            if bound is not None and _package(bound) != own:
                yield f"{module}: {node.value.id}.{node.attr} ({bound})"


def test_no_module_uses_a_private_name_of_another_package() -> None:
    found: list[str] = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            found.extend(reach_ins(path.read_text(), module))
    assert found == [], (
        "private names used across packages (make them public in the lower one):\n" + "\n".join(found)
    )


def test_the_check_sees_a_private_import_and_a_private_attribute_across_packages() -> None:
    source = (
        "from broker.api import routes\n"
        "from broker.api.routes import _error\n"
        "from broker.ha.drain import _WRITES\n"
        "routes._caller\n"
    )
    assert sorted(reach_ins(source, "broker.ha.drain")) == [
        "broker.ha.drain: from broker.api.routes import _error",
        "broker.ha.drain: routes._caller (broker.api.routes)",
    ]
