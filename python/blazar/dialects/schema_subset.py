"""A bounded check of a JSON value against the structural subset of a client's JSON Schema, for the sentinel.

It owns one question: does ``value`` break the parts of ``schema`` that describe shape, and how. Checked:
``type``, ``enum``, ``const``, ``required``, ``properties``, ``additionalProperties`` (false or a schema, when
the schema has no ``patternProperties``), ``items`` (one schema), ``minItems``/``maxItems``,
``minLength``/``maxLength``, ``minimum``/``maximum``/``exclusiveMinimum``/``exclusiveMaximum``. Everything else
(``$ref``, ``allOf``/``anyOf``/``oneOf``/``not``, ``if``, ``pattern``, ``format``, ...) is not checked.

Why a subset and not a full validator: the schema comes from the client and the check runs on the gateway's
event loop. A full one follows ``$ref``s (jsonschema would fetch URLs and files), runs the client's regexes
(``re`` holds the GIL while it backtracks) and can be made exponential with nested ``allOf``/``$ref``; none of
that can be bounded in process. This walk visits each schema node against each value node at most once, stops
after ``BUDGET`` visits or ``MAX_DEPTH`` levels, and never compiles anything.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

BUDGET = 20_000
"""Schema-by-value node visits one check may make; past it the check stops and reports nothing."""
MAX_DEPTH = 64

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and math.isfinite(v) and v.is_integer())
    ),
}


class _OutOfBudget(Exception):
    pass


def violation(schema: Any, value: Any) -> str | None:
    """How ``value`` breaks the checked subset of ``schema`` (one message, with where), or None: also when the
    schema is not an object, or the check ran out of budget."""
    if not isinstance(schema, dict):
        return None
    budget = [BUDGET]
    try:
        found = _check(schema, value, (), budget)
    except (_OutOfBudget, RecursionError):
        return None
    if found is None:
        return None
    message, path = found
    where = "/".join(map(str, path))
    return f"{message} (at {where})" if where else message


def _check(
    schema: dict[str, Any], value: Any, path: tuple[Any, ...], budget: list[int]
) -> tuple[str, tuple[Any, ...]] | None:
    budget[0] -= 1
    if budget[0] < 0 or len(path) > MAX_DEPTH:
        raise _OutOfBudget
    kind = schema.get("type")
    kinds = [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else None
    if kinds is not None:
        known = [k for k in kinds if isinstance(k, str) and k in _TYPES]
        if known and not any(_TYPES[k](value) for k in known):
            return f"{_show(value)} is not of type {', '.join(repr(k) for k in known)}", path
    enum = schema.get("enum")
    if isinstance(enum, list) and not any(_same(value, e) for e in enum):
        return f"{_show(value)} is not one of {_show(enum)}", path
    if "const" in schema and not _same(value, schema["const"]):
        return f"{_show(schema['const'])} was expected", path
    if isinstance(value, dict):
        return _check_object(schema, value, path, budget)
    if isinstance(value, list):
        return _check_array(schema, value, path, budget)
    if isinstance(value, str):
        return _bounds(schema, len(value), "minLength", "maxLength", _show(value), "long", path)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _check_number(schema, value, path)
    return None


def _check_object(
    schema: dict[str, Any], value: dict[str, Any], path: tuple[Any, ...], budget: list[int]
) -> tuple[str, tuple[Any, ...]] | None:
    required = schema.get("required")
    if isinstance(required, list):
        for name in required:
            if isinstance(name, str) and name not in value:
                return f"{name!r} is a required property", path
    props = schema.get("properties")
    props = props if isinstance(props, dict) else {}
    for name, sub in props.items():
        if name in value and isinstance(sub, dict):
            found = _check(sub, value[name], (*path, name), budget)
            if found:
                return found
    extra = schema.get("additionalProperties")
    if "patternProperties" in schema or extra is None or extra is True:
        return None
    others = [k for k in value if k not in props]
    if extra is False and others:
        return f"additional properties are not allowed ({', '.join(map(repr, others[:5]))})", path
    if isinstance(extra, dict):
        for name in others:
            found = _check(extra, value[name], (*path, name), budget)
            if found:
                return found
    return None


def _check_array(
    schema: dict[str, Any], value: list[Any], path: tuple[Any, ...], budget: list[int]
) -> tuple[str, tuple[Any, ...]] | None:
    found = _bounds(schema, len(value), "minItems", "maxItems", "the array", "long", path)
    if found:
        return found
    items = schema.get("items")
    if isinstance(items, dict):
        for i, item in enumerate(value):
            found = _check(items, item, (*path, i), budget)
            if found:
                return found
    return None


_NUMBER_BOUNDS: tuple[tuple[str, Callable[[float, float], bool], str], ...] = (
    ("minimum", lambda v, b: v < b, "less than the minimum of"),
    ("maximum", lambda v, b: v > b, "greater than the maximum of"),
    ("exclusiveMinimum", lambda v, b: v <= b, "less than or equal to the minimum of"),
    ("exclusiveMaximum", lambda v, b: v >= b, "greater than or equal to the maximum of"),
)


def _check_number(
    schema: dict[str, Any], value: float, path: tuple[Any, ...]
) -> tuple[str, tuple[Any, ...]] | None:
    for key, broken, words in _NUMBER_BOUNDS:
        bound = schema.get(key)
        if isinstance(bound, int | float) and not isinstance(bound, bool) and broken(value, bound):
            return f"{_show(value)} is {words} {_show(bound)}", path
    return None


def _bounds(
    schema: dict[str, Any], n: int, low: str, high: str, what: str, unit: str, path: tuple[Any, ...]
) -> tuple[str, tuple[Any, ...]] | None:
    lo, hi = schema.get(low), schema.get(high)
    if isinstance(lo, int) and not isinstance(lo, bool) and n < lo:
        return f"{what} is too short ({n}, {low} {lo})", path
    if isinstance(hi, int) and not isinstance(hi, bool) and n > hi:
        return f"{what} is too {unit} ({n}, {high} {hi})", path
    return None


_PAIRS = (
    ("minLength", "maxLength"),
    ("minItems", "maxItems"),
    ("minProperties", "maxProperties"),
    ("minContains", "maxContains"),
)


def contradiction(schema: Any) -> str | None:
    """The first pair of bounds in ``schema`` (any sub-schema) that no value can meet, as ``minLength 5 is above
    maxLength 2 at properties.name``; None when there is none (or the walk reached ``BUDGET`` nodes). llama.cpp
    turns such a schema into a grammar it builds without end, holding more memory each second."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(schema, ())]
    seen = 0
    while stack and seen < BUDGET:
        node, path = stack.pop()
        seen += 1
        if isinstance(node, dict):
            for low, high in _PAIRS:
                lo, hi = node.get(low), node.get(high)
                if isinstance(lo, int) and isinstance(hi, int) and _count(lo) and _count(hi) and lo > hi:
                    where = f" at {'.'.join(map(str, path))}" if path else ""
                    return f"{low} {lo} is above {high} {hi}{where}"
            stack.extend((v, (*path, k)) for k, v in node.items() if isinstance(v, dict | list))
        elif isinstance(node, list):
            stack.extend((v, (*path, i)) for i, v in enumerate(node) if isinstance(v, dict | list))
    return None


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _same(a: Any, b: Any) -> bool:
    """JSON equality: true is not 1, 1.0 is 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(type(a) is type(b) or (isinstance(a, int | float) and isinstance(b, int | float))) and a == b


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
