"""JSON Schemas (draft 2020-12) of the JSON files uh reads back: result.json, profile.json, the job records of
`uh run --executor` (submitit/submissions/*.json) and a bundle's crate metadata (ro-crate-metadata.json).
results.read_json checks a file against one, after its size, nesting and numbers are bounded (results.parse_json),
so that every reader gets values of the types it uses or one line naming the file and the field.

Each schema types the keys the code reads and leaves the rest open: uh may add keys to a result (its environment
and provenance above all) without making earlier files invalid. What a type cannot say (R's shape, the metrics R
gives, the config a run ID has) is results.validate_result's.
"""

from __future__ import annotations

from typing import Any

from uniform_herding.catalogue import PROFILES

MAX_SEED = 2**32 - 1  # numpy's seeds; the per-seed CSV's range too

STRING_OR_NULL: dict[str, Any] = {"type": ["string", "null"]}

PROVENANCE: dict[str, Any] = {  # runs/provenance.provenance
    "type": "object",
    "required": ["code_sha256", "tree_modified"],
    "properties": {
        "code_sha256": {"type": "string"},
        "tree_modified": {"type": ["boolean", "null"]},
        "code_files": {"type": "integer", "minimum": 0},
        "git_revision": STRING_OR_NULL,
        "git_revision_verified": {"type": "boolean"},
        "diff_sha256": STRING_OR_NULL,
    },
}

ENVIRONMENT: dict[str, Any] = {  # runs/run.environment: the keys stack labels, reports and recompute read
    "type": "object",
    "properties": {
        k: {"type": "string"} for k in ("python", "torch", "device", "precision", "compile", "data_md5", "data_source")
    },
}

TASK: dict[str, Any] = {  # runs/run.task_record
    "type": "object",
    "properties": {
        "task": {"type": "integer", "minimum": 0},
        "device": {"type": "string"},
        "code_sha256": {"type": "string"},
        "wall_s": {"type": "number"},
        "epoch_loss": {"type": "array", "items": {"type": ["number", "null"]}},  # null: no finite loss
    },
}

RESULT: dict[str, Any] = {  # runs/run.assemble; R and the metrics' values are results.validate_result's
    "type": "object",
    "required": ["run_id", "seed", "profile", "config_version", "config", "metrics", "R"],
    "properties": {
        "run_id": {"type": "string"},
        "seed": {"type": "integer", "minimum": 0, "maximum": MAX_SEED},
        "profile": {"type": "string", "enum": list(PROFILES)},
        "config_version": {"type": "integer"},
        "config": {"type": "object"},
        "metrics": {"type": "object"},
        "provenance": PROVENANCE,
        "environment": ENVIRONMENT,
        "tasks": {"type": "array", "items": TASK},
        "wall_s": {"type": "number", "minimum": 0},
        "started": STRING_OR_NULL,
        "finished": STRING_OR_NULL,
        "command": STRING_OR_NULL,
    },
}

PROFILE: dict[str, Any] = {  # results.claim_dir
    "type": "object",
    "required": ["profile"],
    "properties": {"profile": {"type": "string", "enum": list(PROFILES)}},
}

SUBMISSION: dict[str, Any] = {  # executor.record_submission; what runs/status.py reads of it
    "type": "object",
    "required": ["pairs"],
    "properties": {
        "written": {"type": "number"},
        "pairs": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["run_id", "seed", "executor"],
                "properties": {
                    "run_id": {"type": "string"},
                    "seed": {"type": "integer", "minimum": 0, "maximum": MAX_SEED},
                    "executor": {"type": "string", "enum": ["local", "slurm"]},
                    "job_id": STRING_OR_NULL,
                    "folder": {"type": "string"},
                    "uh_pid": {"type": "integer"},
                    "host": {"type": "string"},
                },
            },
        },
    },
}

_REFERENCE: dict[str, Any] = {
    "anyOf": [{"type": "string"}, {"type": "object", "required": ["@id"], "properties": {"@id": {"type": "string"}}}]
}
_REFERENCES: dict[str, Any] = {
    "anyOf": [_REFERENCE, {"type": "array", "items": _REFERENCE}],
    "description": "an @id or a list of them",
}

CRATE: dict[str, Any] = {  # evidence/bundle.crate_of; what evidence/verify.verify_crate reads of it
    "type": "object",
    "required": ["@context", "@graph"],
    "properties": {
        "@graph": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["@id"],
                "properties": {
                    "@id": {"type": "string"},
                    "@type": {
                        "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
                        "description": "a type or a list of them",
                    },
                    "conformsTo": _REFERENCES,
                    "result": _REFERENCES,
                    "sha256": {"type": "string"},
                },
            },
        },
    },
}
