"""YAML from untrusted text with bounded cost: a size cap on the text, and a cap on the size and
depth of the document *after* aliases are expanded, checked on the composed node graph (where an
alias is a shared node) before anything is constructed.

A 507-byte alias bomb expands to 10^7 leaves; `yaml.safe_load` builds all of them (40 s, 2 GB).
Here it is refused after composing a few dozen nodes. Ordinary anchors and merge keys
(`<<: *defaults`) stay usable.
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_TEXT_BYTES = 1024 * 1024  # an experiment config; Determined's are a few KiB
MAX_NODES = 200_000  # scalars, sequences and mappings after alias expansion
MAX_DEPTH = 64

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class YamlTooBig(ValueError):
    """The document is over one of the caps; the message says which."""


def load(text: str, *, max_bytes: int = MAX_TEXT_BYTES, max_nodes: int = MAX_NODES,
         max_depth: int = MAX_DEPTH) -> Any:
    """Parse one YAML document like `yaml.safe_load`, within the caps (YamlTooBig otherwise;
    malformed text raises yaml.YAMLError as usual)."""
    size = len(text.encode("utf-8", "surrogatepass")) if len(text) * 4 > max_bytes else 0
    if size > max_bytes:
        raise YamlTooBig(f"the text is {_human(size)}, over the limit of {_human(max_bytes)}")
    loader = _Loader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError as exc:
            raise YamlTooBig(f"nested more than {max_depth} levels deep") from exc
        if node is None:
            return None
        _check_expansion(node, max_nodes, max_depth)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_expansion(root: yaml.Node, max_nodes: int, max_depth: int) -> None:
    """Size (with every alias expanded) and depth of the document, computed once per distinct
    node (iteratively, so neither deep nesting nor shared nodes cost more than the graph)."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            kids = _children(node)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            depth[key] = 1 + max((depth[id(k)] for k in kids), default=0)
            if size[key] > max_nodes:
                raise YamlTooBig(f"more than {max_nodes:,} values once aliases are expanded "
                                 "(an alias bomb?)")
            if depth[key] > max_depth:
                raise YamlTooBig(f"nested more than {max_depth} levels deep")
            continue
        if key in size:
            continue
        if key in on_path:
            raise YamlTooBig("an alias refers to a node that contains it (a recursive document)")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in _children(node) if id(k) not in size)


def _human(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB"):
        if n < 1024 or unit == "MiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} MiB"
