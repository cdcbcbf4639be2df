"""jsonfiles.py: every JSON file uh reads back is bounded before it is parsed, then checked against its schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from uniform_herding.runs import jsonfiles, schemas
from uniform_herding.runs.jsonfiles import MAX_DEPTH, MAX_NUMBER_CHARS, ResultError, UnreadableJSON, parse_json

ROOT = Path(__file__).resolve().parents[2]


def parsed(tmp_path: Path, text: str) -> object:
    path = tmp_path / "f.json"
    path.write_text(text)
    return parse_json(path, "restore it")


@pytest.mark.parametrize("schema", [schemas.RESULT, schemas.PROFILE, schemas.CRATE])
def test_each_schema_is_a_valid_draft_2020_12_schema(schema: dict) -> None:
    Draft202012Validator.check_schema(schema)


def test_the_results_the_project_wrote_are_valid() -> None:
    """docs/validation/results (written before provenance was recorded) validate; the readers' own tests load the
    smoke runs they make."""
    paths = sorted((ROOT / "docs" / "validation" / "results").glob("*/seed-*/result.json"))
    assert len(paths) == 36
    for path in paths:
        jsonfiles.read_json(path, schemas.RESULT, "restore it")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("[" * MAX_DEPTH + "]" * MAX_DEPTH, None),  # as deep as allowed
        ('{"a": "' + "[" * 1000 + '\\"{"}', {"a": "[" * 1000 + '"{'}),  # brackets in a string are no nesting
        ('{"seed": ' + "9" * MAX_NUMBER_CHARS + "}", {"seed": int("9" * MAX_NUMBER_CHARS)}),
        ('{"x": 1e-400, "y": -0.0}', {"x": 0.0, "y": -0.0}),
    ],
)
def test_what_uh_could_have_written_is_read(tmp_path: Path, text: str, value: object) -> None:
    assert parsed(tmp_path, text) == (json.loads(text) if value is None else value)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), f"nested {MAX_DEPTH + 1} levels deep, more than {MAX_DEPTH}"),
        ('{"a": [' + "[" * 100_000, "nested 100002 levels deep"),  # unclosed: still counted, never parsed
        ('{"a": {"b": [1, ' + "7" * 5000 + "]}}", "$.a.b[1] is 777777777777...7777 (5000 characters): uh writes"),
        ('{"wall_s": NaN}', "$.wall_s is NaN (3 characters): uh writes finite numbers of at most 40 characters"),
        ('{"x": [-Infinity]}', "$.x[0] is -Infinity (9 characters)"),
        ('{"@graph": 1e999}', "$['@graph'] is 1e999 (5 characters)"),
        ('{"a": 1', "Expecting ',' delimiter: line 1 column 8 (char 7)"),
    ],
)
def test_what_no_uh_command_writes_is_one_line_naming_the_field(tmp_path: Path, text: str, why: str) -> None:
    """Issue 59.4: nesting past the parser's recursion limit (RecursionError) and numbers past Python's int-str limit
    (ValueError) ended in tracebacks; both are refused before parsing, the number by its JSON path."""
    with pytest.raises(UnreadableJSON) as e:
        parsed(tmp_path, text)
    assert why in str(e.value) and str(e.value).startswith(f"{tmp_path / 'f.json'}: cannot read JSON (")
    assert str(e.value).endswith("; restore it") and "\n" not in str(e.value)


def test_a_file_over_the_size_limit_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonfiles, "MAX_JSON_BYTES", 10)
    with pytest.raises(UnreadableJSON, match=r"cannot read JSON \(11 bytes, more than 10\)"):
        parsed(tmp_path, '{"a": 1234}')


def test_a_schema_error_names_the_shallowest_field_a_missing_key_first(tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    for text, message in [
        ('{"profile": "huge"}', "$.profile is 'huge', not one of paper, smoke, "),
        ('{"profile": true}', "$.profile is True, not a string"),
        ("[]", "$ is [], not an object"),
        ("{}", "$ lacks key(s) profile"),
    ]:
        path.write_text(text)
        with pytest.raises(ResultError) as e:
            jsonfiles.read_json(path, schemas.PROFILE, "restore it")
        assert str(e.value).startswith(f"{path}: {message}") and str(e.value).endswith("; restore it"), str(e.value)
