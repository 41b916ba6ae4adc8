"""The structural subset of JSON Schema the sentinel checks, alone."""

from __future__ import annotations

from typing import Any

import pytest

from blazar.dialects.schema_subset import violation

OBJ = {
    "type": "object",
    "properties": {
        "kind": {"enum": ["a", "b"]},
        "flag": {"const": True},
        "n": {"type": "integer", "exclusiveMinimum": 0, "maximum": 10},
        "tags": {"type": "array", "items": {"type": "string", "minLength": 2}, "maxItems": 2},
        "x": {"type": ["number", "null"]},
    },
    "required": ["kind"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"kind": "a"}, None),
        ({"kind": "a", "n": 3.0, "x": None, "flag": True, "tags": ["ab"]}, None),
        ({}, "'kind' is a required property"),
        ({"kind": "c"}, "'c' is not one of ['a', 'b'] (at kind)"),
        ({"kind": "a", "flag": 1}, "True was expected (at flag)"),
        ({"kind": "a", "n": True}, "True is not of type 'integer' (at n)"),
        ({"kind": "a", "n": 0}, "0 is less than or equal to the minimum of 0 (at n)"),
        ({"kind": "a", "n": 11}, "11 is greater than the maximum of 10 (at n)"),
        ({"kind": "a", "tags": ["ab", "c"]}, "'c' is too short (1, minLength 2) (at tags/1)"),
        ({"kind": "a", "tags": ["ab"] * 3}, "the array is too long (3, maxItems 2) (at tags)"),
        ({"kind": "a", "x": "1"}, "'1' is not of type 'number', 'null' (at x)"),
        ({"kind": "a", "other": 1}, "additional properties are not allowed ('other')"),
        ([], "[] is not of type 'object'"),
    ],
)
def test_the_subset(value: Any, expected: str | None) -> None:
    assert violation(OBJ, value) == expected


def test_what_is_not_checked() -> None:
    assert violation({"anyOf": [{"type": "string"}], "not": {}, "format": "email"}, 5) is None
    assert (
        violation({"additionalProperties": {"type": "string"}}, {"a": 1})
        == "1 is not of type 'string' (at a)"
    )
    assert violation({"additionalProperties": False, "patternProperties": {"^x": {}}}, {"y": 1}) is None
    assert violation("not a schema", 1) is None
    deep: dict[str, Any] = {"type": "array"}
    for _ in range(100):
        deep = {"type": "array", "items": deep}
    value: Any = [1]
    for _ in range(100):
        value = [value]
    assert violation(deep, value) is None  # past MAX_DEPTH: nothing is reported


def test_bounds_no_value_can_meet_are_found_anywhere_in_the_schema() -> None:
    # llama.cpp builds a grammar for such a schema without end (found by fuzzing: memory grew until the OOM kill)
    from blazar.dialects.schema_subset import contradiction

    assert (
        contradiction({"type": "string", "minLength": 5, "maxLength": 2})
        == "minLength 5 is above maxLength 2"
    )
    nested = {"type": "object", "properties": {"a": {"type": "array", "minItems": 5, "maxItems": 2}}}
    assert contradiction(nested) == "minItems 5 is above maxItems 2 at properties.a"
    assert contradiction({"anyOf": [{}, {"minProperties": 3, "maxProperties": 1}]}) == (
        "minProperties 3 is above maxProperties 1 at anyOf.1"
    )
    assert contradiction({"type": "string", "minLength": 2, "maxLength": 2}) is None
    assert contradiction({"minLength": True, "maxLength": 0}) is None  # not counts: the engine's own 400
