"""Variants: a run ID with method settings changed, its one name, what it is compared with, and `resolve`, the config
of any run or variant ID under a profile.

The ID goes wherever a run ID goes (results folder, result.json, per-seed CSV, uh status / check / report /
aggregate, the executors), and `resolve` and `run_name` take either.

One run, one name (`Variant.canonical`). A run is the settings its config reads (components.py: B2 never
reads rho), so any spelling of the same settings names one run, and its name is the run ID that needs the
fewest `--set` keys to reach them, ties to the one that reads the same settings most nearly, then RUNS
order; a spelling whose settings are a run ID's *is* that run ID (B3 with M=500 is s1). So one run has one
results folder. M and b are in the paper's units; the profile scales them.

What a run is compared with (`base_of`, the one rule uh aggregate, uh check and uh report read): a run ID's
`RunSpec.base` (B3 for the ablations and sweeps; B0-B3 are compared with nothing); a variant's base, the run ID
its name starts from, unless the researcher chose another with `--base` (uh run, uh sweep, uh report): then its
ID ends in `+vs=RUN` (`r1+memory=closest_to_mean+vs=B3`), so the choice travels with the results.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from uniform_herding.catalogue.checks import check, check_settings
from uniform_herding.catalogue.grammar import KEYS, PIN, SEP, assignments, axes, format_value, parse_value, split
from uniform_herding.catalogue.run_ids import RUNS, ConfigError, run_config
from uniform_herding.method import components
from uniform_herding.method.config import Config


def read_settings(cfg: Config) -> dict[str, Any]:
    """The settings (KEYS) a run of `cfg` reads, and their values: two configs that agree on them are one run."""
    read = components.settings_read(cfg)
    return {key: getattr(cfg, key) for key in KEYS if key in read}


def distance(run_id: str, cfg: Config) -> tuple[int, int, int]:
    """How far run ID `run_id` is from the run `cfg`: the `--set` keys it needs (settings `cfg` reads where the run ID
    has another value), then the settings only one of them reads, then its place in RUNS (the tie-break)."""
    theirs, mine = resolve(run_id), read_settings(cfg)
    keys = sum(getattr(theirs, key) != value for key, value in mine.items())
    return keys, len(mine.keys() ^ read_settings(theirs).keys()), list(RUNS).index(run_id)


@dataclass(frozen=True)
class Variant:
    """A base run ID and the changes to its config (key -> value), none equal to the base's own value; `vs`, the run
    ID it is compared with where the researcher chose one (--base), else None (then it is compared with `base`)."""

    base: str
    changes: dict[str, Any]
    vs: str | None = None

    def config(self, profile: str = "paper") -> Config:
        return dataclasses.replace(resolve(self.base, profile), **self.changes)

    @property
    def spelling(self) -> str:
        """The ID as given: its base, its changes in sorted key order, then `vs=RUN` (not necessarily canonical)."""
        changes = [f"{k}={format_value(self.changes[k])}" for k in sorted(self.changes)]
        return SEP.join([self.base, *changes, *([f"{PIN}={self.vs}"] if self.vs else [])])

    def against(self, base: str) -> Variant:
        """The same run written as changes to run ID `base`: the settings it reads where `base`'s differ."""
        mine, own = self.config(), resolve(base)
        return Variant(base, {k: v for k, v in read_settings(mine).items() if getattr(own, k) != v})

    def canonical(self) -> Variant:
        """The same run by its one name: the run ID nearest to it (`distance`) and the settings it reads where that
        run ID's differ (B3+loss=icarl_bce is a1+loss=icarl_bce: icarl_bce reads no kd_lambda); `vs` kept where it
        names another run ID than that one. A run ID is compared as RUNS says (`pin` refuses another choice)."""
        if not self.changes:
            return Variant(self.base, {})
        named = self.against(min(RUNS, key=lambda run_id: distance(run_id, self.config())))
        return dataclasses.replace(named, vs=self.vs if self.vs != named.base else None)

    @property
    def run_id(self) -> str:
        """The canonical ID (`canonical`) of a variant that can run: a change nothing reads, which would vanish into
        its base's name, is refused (check_settings)."""
        if self.changes:
            check_settings(self.spelling, self.config(), self.changes)
        return self.canonical().spelling


def parse(name: str, sets: Iterable[str] = ()) -> Variant:
    """A run ID or variant ID, plus KEY=VALUE changes, as a Variant (the IDs' changes and `sets` together)."""
    base, parts, vs = split(name)
    given = assignments([*parts, *sets])
    own = resolve(base)
    changes = {k: v for k, v in ((k, parse_value(k, text)) for k, text in given.items()) if getattr(own, k) != v}
    return Variant(base, changes, vs)


def is_variant(run_id: str) -> bool:
    return SEP in run_id


def resolve(run_id: str, profile: str = "paper") -> Config:
    """The config of a run ID or a variant ID under `profile`: B3's defaults, then the run ID's changes, then the
    profile's sizes, then a variant's changes; a variant is refused (check) when it cannot run as asked there."""
    if is_variant(run_id):
        variant = parse(run_id)
        cfg = variant.config(profile)
        check(run_id, variant.base, cfg, variant.changes, profile)
        return cfg
    return run_config(run_id, profile)


def differences(run_id: str, other: str, profile: str = "paper") -> dict[str, Any]:
    """The settings in which `run_id` differs from `other`, with `run_id`'s values (e.g. r3 vs B1:
    memory=uniform_herding); what `uh list` prints for a run beyond the paper against its base."""
    a, b = resolve(run_id, profile).to_dict(), resolve(other, profile).to_dict()
    return {k: v for k, v in a.items() if v != b[k]}


def check_id(run_id: str) -> None:
    """Refuse anything but a run ID or a canonical variant ID that can run (what a results folder or a CSV row
    may name)."""
    if run_id in RUNS:
        return
    canonical = parse(run_id).run_id  # refuses a variant that cannot run
    if canonical != run_id:
        raise ConfigError(f"{run_id!r} is not a canonical ID: the same run is {canonical!r}")


def record(run_id: str) -> dict[str, Any]:
    """What result.json records of a variant beside its config: {"variant": {base, changes[, vs]}}; {} for a run
    ID."""
    if not is_variant(run_id):
        return {}
    v = parse(run_id)
    return {"variant": {"base": v.base, "changes": dict(sorted(v.changes.items())), **({PIN: v.vs} if v.vs else {})}}


def pin(run_id: str, base: str) -> str:
    """The ID of run `run_id` compared with run ID `base` (--base): a variant's canonical ID, ending in `+vs=BASE`
    where its name starts from another run ID. A run ID is compared as RUNS says: `base` may only be that, or itself."""
    if base not in RUNS:
        raise ConfigError(f"--base {base}: not a run ID; known: {', '.join(RUNS)} (see `uh list`)")
    if is_variant(run_id):
        return dataclasses.replace(parse(run_id), vs=base).run_id
    if base not in (run_id, RUNS[run_id].base):
        compared = f"compared with {RUNS[run_id].base}" if RUNS[run_id].base else "compared with no run"
        raise ConfigError(
            f"--base {base}: {run_id} is a run ID, {compared} (uh list); --base chooses what a variant "
            "(--set) is compared with"
        )
    return run_id


def name_runs(
    names: Iterable[str], sets: Iterable[str], echo: Callable[[str], None], base: str | None = None
) -> list[str]:
    """Run IDs or variant IDs, each with `sets` applied and compared with `base` where given (--base), as canonical
    IDs in order, each once.

    Says what it canonicalised, one line each: a change equal to the base's own value, a variant that is a run
    ID, a spelling of a run whose name is another (Variant.canonical), a variant named for its --base (pin).
    """
    sets = list(sets)
    out = []
    for name in names:
        variant = parse(name, sets)
        if base and variant.vs not in (None, base):
            raise ConfigError(f"{name} is compared with {variant.vs}, and --base asks for {base}: give one of them")
        asked = assignments([*split(name)[1], *sets])
        for key in sorted(asked.keys() - variant.changes.keys()):
            echo(f"{key}={asked[key]} is {variant.base}'s own value: dropped")
        run_id = variant.run_id
        if run_id in RUNS and variant.changes:
            echo(
                f"{variant.base} with {' '.join(f'{k}={asked[k]}' for k in sorted(variant.changes))} is run ID "
                f"{run_id} (the same config): running it as {run_id}"
            )
        elif run_id != variant.spelling:
            echo(
                f"{variant.spelling} is {run_id} (the same run, named from the run ID it needs the fewest --set keys "
                f"from): running it as {run_id}"
            )
        if base and (pinned := pin(run_id, base)) != run_id:
            echo(f"{run_id} is compared with {base} (--base): running it as {pinned}")
            run_id = pinned
        out.append(run_id)
    return list(dict.fromkeys(out))


def grid_points(run_id: str, grid: tuple[str, ...], base: str | None = None) -> list[tuple[str, str]]:
    """(the point's KEY=VALUE list, its canonical ID) for every point of the product (uh sweep's grid), in the order
    given; each compared with run ID `base` where given (--base: pin)."""
    values = axes(grid)
    taken = set(parse(run_id).changes) & set(values)
    if taken:
        raise ConfigError(f"{run_id} already sets {', '.join(sorted(taken))}; sweep its base or other keys")
    points = []
    for combo in itertools.product(*values.values()):
        sets = [f"{k}={v}" for k, v in zip(values, combo, strict=True)]
        point = parse(run_id, sets).run_id
        points.append((" ".join(sets), pin(point, base) if base else point))
    return points


def run_name(run_id: str, profile: str = "paper") -> str:
    """The label of a run ID with the sizes `profile` really uses ("Active budget 500" in the paper's protocol, "Active
    budget 12" in the smoke profile: the sweeps' names state their size), or of a variant: the label of the run it is
    compared with and its changes to it ("Uniform Herding, rho=5")."""
    if is_variant(run_id):
        return f"{run_name(base_of(run_id), profile)}, {describe(run_id, profile)}"
    spec, cfg = RUNS[run_id], resolve(run_id, profile)
    if "M" in spec.changes:
        return f"Active budget {cfg.budget}"
    if "b" in spec.changes:
        return f"Retrieval {cfg.retrieval}"
    return spec.name


def describe(run_id: str, profile: str = "paper") -> str:
    """A variant's changes to the run it is compared with (base_of), for people: `rho=5`, and the sizes M and b give
    under `profile` (`M=1000 (25 items)`)."""
    v, cfg = parse(run_id).against(base_of(run_id)), resolve(run_id, profile)
    parts = []
    for key in sorted(v.changes):
        text = f"{key}={format_value(v.changes[key])}"
        size = {"M": cfg.budget, "b": cfg.retrieval}.get(key)
        parts.append(text if size in (None, v.changes[key]) else f"{text} ({size} items)")
    return ", ".join(parts)


def sort_key(run_id: str) -> tuple[int, str]:
    """Run IDs in RUNS order, then variants by ID."""
    return (list(RUNS).index(run_id), "") if run_id in RUNS else (len(RUNS), run_id)


def base_of(run_id: str) -> str | None:
    """What a run is compared with, the one rule uh aggregate, uh check and uh report read: a run ID's RunSpec.base
    (B3 for a1-a4 and s1-s4, r1-r3 their own, None for B0-B3); a variant's choice (`vs=`, --base), else the run ID
    its name starts from, the one it differs from in the fewest settings (Variant.canonical)."""
    if not is_variant(run_id):
        return RUNS[run_id].base
    v = parse(run_id).canonical()
    return v.vs or v.base
