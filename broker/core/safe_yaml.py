"""YAML read safely: the safe loader, a size limit, and a limit on what aliases expand to.

Owns `load(text, what)`: plain data only (yaml.SafeLoader, no Python objects), refused when the text is
larger than MAX_BYTES or when the document, with every alias expanded, has more than MAX_NODES nodes (a
"billion laughs" bomb is a few hundred bytes that expand to 10^9 nodes; PyYAML would build it as shared
references and the first json.dumps of it would run out of memory). The node graph is counted once per
distinct node, so the check is as cheap as parsing. A mapping that names one key twice is refused
naming the key and its line (PyYAML would keep the last silently). Booleans are YAML 1.2's: only
true/false (any case of those), so `yes`, `no`, `on`, `off` stay strings (a boolean field refuses them by
name, a string field keeps them as written). Errors are YamlError with a one-line message.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

__all__ = ["MAX_BYTES", "MAX_NODES", "YamlError", "load"]

MAX_BYTES = 1 << 20
MAX_NODES = 100_000


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2's booleans: `yes`, `no`, `on`, `off` are strings."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


class YamlError(ValueError):
    """YAML that is not read: malformed, too large, or expanding beyond the node limit."""


def _expanded_size(root: Node, limit: int) -> int:
    """Nodes in the document with aliases expanded, counted without expanding (memoised per node)."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()  # on the path from the root: meeting one again is a cycle
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        children: list[Node] = []
        if isinstance(node, SequenceNode):
            children = list(node.value)
        elif isinstance(node, MappingNode):
            children = [n for pair in node.value for n in pair]
        if children_done or not children:
            total = 1 + sum(sizes[id(c)] for c in children)
            sizes[id(node)] = min(total, limit + 1)
            open_nodes.discard(id(node))
            continue
        if any(id(c) in open_nodes or c is node for c in children):
            raise YamlError("a recursive alias (a node that contains itself)")
        open_nodes.add(id(node))
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes[id(root)]


def _duplicate_key(root: Node) -> tuple[str, int] | None:
    """The first key a mapping of the document names twice, with its line; None when there is none."""
    seen_nodes: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if isinstance(node, MappingNode):
            keys: set[str] = set()
            for key, value in node.value:
                if isinstance(key, ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    if key.value in keys:
                        return key.value, key.start_mark.line + 1
                    keys.add(key.value)
                stack.extend((key, value))
        elif isinstance(node, SequenceNode):
            stack.extend(node.value)
    return None


def load(
    text: str | bytes, what: str = "YAML", max_bytes: int = MAX_BYTES, max_nodes: int = MAX_NODES
) -> Any:
    """One YAML (or JSON) document as plain data, or YamlError naming `what` and the cause."""
    size = len(text.encode() if isinstance(text, str) else text)
    if size > max_bytes:
        raise YamlError(f"{what}: {size} bytes, more than the limit of {max_bytes}")
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node, max_nodes) > max_nodes:
            raise YamlError(f"{what}: expands to more than {max_nodes} nodes (aliases); refused")
        duplicate = _duplicate_key(node)
        if duplicate is not None:
            raise YamlError(f"{what}: duplicate key {duplicate[0]!r} (line {duplicate[1]}): say it once")
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise YamlError(f"{what}: not valid YAML{where}: {problem}") from None
    except RecursionError:
        raise YamlError(f"{what}: nested too deeply") from None
    finally:
        loader.dispose()
