"""Random damage to a saved file, for the property tests of the loaders (issue 20).

A test draws a case from `byte_damage` or `json_damage(retyped)` (hypothesis strategies)
and applies it: `damage_bytes(data, case)` truncates or flips bytes; `damage_json(tree,
case)` drops, retypes or duplicates the entry that `case`'s path of numbers leads to in a
JSON tree (each number picks a child, modulo how many there are). The loader must then
load what the file says, or raise ValueError naming the file; never anything else.
"""
from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

byte_damage = st.one_of(
    st.tuples(st.just("truncate"), st.integers(0, 10 ** 6)),
    st.tuples(st.just("flip"), st.lists(st.tuples(st.integers(0, 10 ** 6), st.integers(1, 255)),
                                        min_size=1, max_size=4)),
)


def json_damage(retyped: list, depth: int = 7) -> st.SearchStrategy:
    """("drop", path), ("retype", path, value) or ("duplicate", path): a change to one JSON entry."""
    path = st.lists(st.integers(0, 100), min_size=1, max_size=depth)
    return st.one_of(st.tuples(st.just("drop"), path), st.tuples(st.just("retype"), path, st.sampled_from(retyped)),
                     st.tuples(st.just("duplicate"), path))


def damage_bytes(data: bytes, case: tuple) -> bytes:
    if case[0] == "truncate":
        return data[: case[1] % len(data)]
    out = bytearray(data)
    for position, mask in case[1]:
        out[position % len(out)] ^= mask
    return bytes(out)


def _walk(tree: Any, path: list[int]) -> tuple[Any, Any]:
    """(container, key) of the entry that `path` leads to; (None, None) for the whole tree."""
    parent, key, node = None, None, tree
    for step in path:
        keys = list(node) if isinstance(node, dict) else list(range(len(node))) if isinstance(node, list) else []
        if not keys:
            break
        parent, key = node, keys[step % len(keys)]
        node = node[key]
    return parent, key


def damage_json(tree: Any, case: tuple) -> Any:
    """`tree` with one entry dropped, retyped or duplicated (changed in place; the new tree is returned)."""
    kind, path = case[0], case[1]
    parent, key = _walk(tree, path)
    if parent is None:
        return case[2] if kind == "retype" else {}
    if kind == "drop":
        parent.pop(key)
    elif kind == "retype":
        parent[key] = case[2]
    elif isinstance(parent, list):
        parent.insert(key, parent[key])  # a line pasted twice
    return tree
