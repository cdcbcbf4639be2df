"""catalogue: the one place a run ID means something; every run this artifact knows by its ID, and its config under a
profile (`resolve`).

- run_ids.py, the run data: the run IDs (RUNS, the paper's twelve and r1-r3 beyond it), their groups (RUN_GROUPS),
  the profiles (PROFILES: sizes only) and where each runs (PROFILE_DEVICE);
- grammar.py, the `--set` grammar: the method settings a variant may change (KEYS), their values as text, and how a
  variant ID is spelled (`B3+rho=5`, `+vs=RUN`);
- checks.py, the checks: what makes a variant refused (a setting nothing reads, a readout its memory cannot feed, a
  value its profile makes another value's run);
- variants.py: a variant's one name, what each run is compared with (`base_of`), and `resolve`, the config of any
  run or variant ID.

Importers take the names below from `uniform_herding.catalogue`. A layer of its own, between runs/ and method/
(pyproject.toml [tool.importlinter]): it builds on method/'s config.py and components.py, never the reverse, and
runs/, verdict/, report/ and the top-level modules import it.
"""

from uniform_herding.catalogue.checks import check, level
from uniform_herding.catalogue.grammar import KEYS, PIN, SEP, SPLIT_FIELDS, choices, format_value, parse_value
from uniform_herding.catalogue.run_ids import (
    BEYOND_PAPER,
    PAPER_RUNS,
    PROFILE_DEVICE,
    PROFILES,
    RUN_GROUPS,
    RUNS,
    SIZE_FIELDS,
    ConfigError,
    RunSpec,
    expand_run_ids,
    images_per_class,
    sort_key,
)
from uniform_herding.catalogue.variants import (
    Variant,
    base_of,
    check_id,
    describe,
    differences,
    grid_points,
    is_variant,
    name_runs,
    parse,
    pin,
    record,
    resolve,
    run_name,
)

__all__ = [
    "BEYOND_PAPER",
    "KEYS",
    "PAPER_RUNS",
    "PIN",
    "PROFILES",
    "PROFILE_DEVICE",
    "RUNS",
    "RUN_GROUPS",
    "SEP",
    "SIZE_FIELDS",
    "SPLIT_FIELDS",
    "ConfigError",
    "RunSpec",
    "Variant",
    "base_of",
    "check",
    "check_id",
    "choices",
    "describe",
    "differences",
    "expand_run_ids",
    "format_value",
    "grid_points",
    "images_per_class",
    "is_variant",
    "level",
    "name_runs",
    "parse",
    "parse_value",
    "pin",
    "record",
    "resolve",
    "run_name",
    "sort_key",
]
