"""The one reader of every JSON file uh reads back (result.json, profile.json, a bundle's crate metadata): such a
file may come from anyone (a bundle is untrusted input), so its size, nesting and numbers are bounded before it is
parsed (parse_json), then it is checked against its JSON Schema (runs/schemas.py, check_schema). Whatever is wrong
is one line naming the file and the field (its JSON path), never a traceback: every command that reads these files
exits 2 on it.
"""

from __future__ import annotations

import functools
import json
import math
import re
import reprlib
from pathlib import Path
from typing import Any

import numpy as np


def one_line(text: str) -> str:
    """`text` with its control characters escaped (a newline in a folder's name as \\n): an error stays one line."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


class ResultError(ValueError):
    """A result file or per-seed table that cannot be used; the message names the file, on one line."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


MAX_JSON_BYTES = 16 << 20  # a paper run's result.json is tens of kB, a bundle's crate metadata a few MB
MAX_DEPTH = 32  # levels of nesting; result.json has 4 (tasks, a task, its epoch_loss), the crate metadata 5
MAX_NUMBER_CHARS = 40  # a float's shortest repr has at most 24 characters; no count uh writes has more
_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"', re.DOTALL)  # a JSON string: what it holds is no structure
OPENING, CLOSING = np.frombuffer(b"[{", np.uint8), np.frombuffer(b"]}", np.uint8)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class UnreadableJSON(ResultError):
    """A file that is not JSON uh could have written: unreadable, not UTF-8, malformed, over MAX_JSON_BYTES, nested
    deeper than MAX_DEPTH, or holding a number longer than MAX_NUMBER_CHARS or not finite; `why` says which."""

    def __init__(self, path: Path, why: str, remedy: str) -> None:
        super().__init__(f"{path}: cannot read JSON ({why}); {remedy}")
        self.why = why


class _Number(str):
    """A number literal longer than MAX_NUMBER_CHARS or not finite (NaN, Infinity, 1e999), kept as its text while
    parsing, so that parse_json can name its field; it never leaves parse_json."""


def _int(text: str) -> int | _Number:
    return _Number(text) if len(text) > MAX_NUMBER_CHARS else int(text)  # never near Python's int-str limit


def _float(text: str) -> float | _Number:
    value = float(text)
    return value if len(text) <= MAX_NUMBER_CHARS and math.isfinite(value) else _Number(text)


def _depth(text: str) -> int:
    """The deepest nesting of arrays and objects in `text`, counted without parsing (its strings blanked): bounded
    before the parser recurses into it."""
    structure = np.frombuffer(_STRING.sub('""', text).encode("utf-8"), np.uint8)
    steps = np.isin(structure, OPENING).astype(np.int32) - np.isin(structure, CLOSING)
    return int(np.cumsum(steps).max(initial=0))


def json_path(parent: str, key: str | int) -> str:
    """`key` of `parent` as a JSON path names it, as jsonschema does: $.tasks[0].code_sha256, $['@graph']."""
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if _IDENTIFIER.fullmatch(key) else f"{parent}[{key!r}]"


def _odd_number(value: Any, where: str = "$") -> tuple[str, str] | None:
    """The first number _int or _float kept as text, with its JSON path; None if there is none."""
    if isinstance(value, _Number):
        return where, value
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    return next(filter(None, (_odd_number(item, json_path(where, key)) for key, item in items)), None)


def parse_json(path: Path, remedy: str) -> Any:
    """The JSON value in `path`, once its size, nesting and numbers are within what uh writes (MAX_JSON_BYTES,
    MAX_DEPTH, MAX_NUMBER_CHARS, finite): no hostile file reaches the parser's recursion or Python's int-str limit.
    UnreadableJSON (one line: the file, why, `remedy`) otherwise."""
    try:
        if (size := path.stat().st_size) > MAX_JSON_BYTES:
            raise UnreadableJSON(path, f"{size} bytes, more than {MAX_JSON_BYTES}", remedy)
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UnreadableJSON(path, one_line(str(e)), remedy) from None
    if (depth := _depth(text)) > MAX_DEPTH:
        raise UnreadableJSON(path, f"nested {depth} levels deep, more than {MAX_DEPTH}", remedy)
    try:
        value = json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_Number)
    except ValueError as e:  # JSONDecodeError; no RecursionError: _depth bounded the nesting
        raise UnreadableJSON(path, one_line(str(e)), remedy) from None
    if odd := _odd_number(value):
        where, number = odd
        shown = number if len(number) <= MAX_NUMBER_CHARS else f"{number[:12]}...{number[-4:]}"
        limit = f"uh writes finite numbers of at most {MAX_NUMBER_CHARS} characters"
        raise UnreadableJSON(path, f"{where} is {shown} ({len(number)} characters): {limit}", remedy)
    return value


@functools.cache
def _validator_class() -> Any:
    """Draft 2020-12 with JSON's integers only: 1.0 and true are no seed."""
    from jsonschema import Draft202012Validator, validators  # where a file is read: uh run starts without it

    checker = Draft202012Validator.TYPE_CHECKER.redefine("integer", lambda _, x: type(x) is int)
    return validators.extend(Draft202012Validator, type_checker=checker)


TYPE_NAMES = {
    "object": "an object",
    "array": "an array",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}


def _shown(value: Any) -> str:
    """`value` as an error line shows it: its repr, two levels deep, each string and number cut at 40 characters."""
    short = reprlib.Repr()
    short.maxlevel, short.maxstring, short.maxother = 2, 40, 40
    return short.repr(value)


def _explain(error: Any) -> str:
    """What is wrong at the error's field, in words, with the value shortened (_shown)."""
    value, wanted = _shown(error.instance), error.validator_value
    if error.validator == "required":
        return f"lacks key(s) {', '.join(k for k in wanted if k not in error.instance)}"
    if error.validator == "type":
        types = [wanted] if isinstance(wanted, str) else wanted
        return f"is {value}, not {' or '.join(TYPE_NAMES[t] for t in types)}"
    if error.validator == "enum":
        return f"is {value}, not one of {', '.join(map(str, wanted))}"
    if error.validator in ("minimum", "maximum"):
        return f"is {value}, {'less' if error.validator == 'minimum' else 'more'} than {wanted}"
    return f"is {value}, not {error.schema.get('description', 'what uh writes')}"


def check_schema(value: Any, schema: dict[str, Any], path: Path, remedy: str) -> None:
    """Refuse `value` (parse_json's) where it breaks `schema`, in one line naming the file and the field: the
    shallowest error, a missing key or a wrong type first."""
    errors = list(_validator_class()(schema).iter_errors(value))
    if errors:
        first = min(errors, key=lambda e: (len(e.absolute_path), e.validator not in ("required", "type")))
        raise ResultError(f"{path}: {first.json_path} {_explain(first)}; {remedy}")


def read_json(path: Path, schema: dict[str, Any], remedy: str) -> Any:
    """`path`'s JSON value, bounded (parse_json) and checked against `schema` (schemas.py): what every reader of a
    JSON file uh wrote reads it with."""
    value = parse_json(path, remedy)
    check_schema(value, schema, path, remedy)
    return value
