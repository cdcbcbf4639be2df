"""The checks: a variant is refused when it changes a setting that nothing in its run reads, when its readout needs
what its memory does not keep (NME needs an exemplar of every seen class), and, under a profile, when its quotas
leave a class without an exemplar or a value it sets is the same run as another value (`check_levels`: M, b and rho
level off)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from uniform_herding.catalogue.grammar import format_value
from uniform_herding.catalogue.run_ids import RUNS, ConfigError, images_per_class, run_config
from uniform_herding.method import components
from uniform_herding.method.config import Config


def check(run_id: str, base: str, cfg: Config, changes: dict[str, Any], profile: str) -> None:
    """Refuse a run that cannot run as asked under `profile` (check_settings), or whose quotas leave its
    readout a class without an exemplar there."""
    check_settings(run_id, cfg, changes)
    policy = components.POLICIES[cfg.memory]
    if components.READOUTS[cfg.readout].per_class and policy.quotas and cfg.budget < cfg.n_classes:
        least = next(m for m in range(1, 10**7) if dataclasses.replace(cfg, M=m).budget >= cfg.n_classes)
        raise ConfigError(
            f"{run_id}: M={cfg.M} is {cfg.budget} exemplars in profile {profile}, fewer than its {cfg.n_classes} "
            f"classes, and readout={cfg.readout} needs one per class; give M >= {least} or readout=head"
        )
    check_levels(run_id, base, cfg, changes, profile)


def level(key: str, cfg: Config) -> int:
    """What a run of `cfg` does with setting `key` of LEVELS: the value that reaches the memory and the replay.

    M: its budget in items, at most every training item of the stream (a budget of all keeps all, whatever the
    policy). b: the items replayed per step (drawn with replacement, so no ceiling). rho: at most the multiplier
    whose pools rho * q_c hold every training item of a class at every task (q_c is least at the last task)."""
    items = images_per_class(cfg)[0]
    if key == "M":
        return min(cfg.budget, items * cfg.n_classes)
    if key == "b":
        return cfg.retrieval
    return min(cfg.rho, math.ceil(items / max(1, cfg.budget // cfg.n_classes)))


# The whole-number settings a profile maps many values of to one run: scaled (M, b) or levelling off (M, rho).
LEVELS = ("M", "b", "rho")


def why_level(key: str, cfg: Config) -> str:
    """Why values of `key` that share `level(key, cfg)` are one run, for the refusal."""
    items, want = images_per_class(cfg)[0], level(key, cfg)
    if key == "b":
        return f"b gives {want} item{'s' * (want != 1)} replayed per step"
    if key == "M":
        every = want == items * cfg.n_classes
        return f"M keeps all {want} training items of the stream" if every else f"M gives {want} exemplars"
    least = max(1, cfg.budget // cfg.n_classes)
    return f"q_c >= {least} at every task, so pools of {want} * q_c hold all {items} training items of a class"


def check_levels(run_id: str, base: str, cfg: Config, changes: dict[str, Any], profile: str) -> None:
    """Refuse a value of M, b or rho that is, under `profile`, the same run as another value (`level`). Of the values
    at one level the run's name takes the base's own (drop it), else a run ID's, else the level in the paper's units
    (level / the profile's scale: smoke's M=1000 is 25 exemplars, and so are M=981 to 1019)."""
    scale = {"M": cfg.memory_scale, "b": cfg.retrieval_scale, "rho": 1.0}
    for key in sorted(set(LEVELS) & changes.keys()):
        value, want = changes[key], level(key, cfg)
        own = getattr(run_config(base), key)
        named = [own, *(getattr(run_config(r), key) for r in RUNS), max(1, round(want / scale[key]))]
        same = next((v for v in named if level(key, dataclasses.replace(cfg, **{key: v})) == want), value)
        if same != value:
            fix = "drop it" if same == own else f"give {key}={same}"
            mark = f", {base}'s own" if same == own else ""
            raise ConfigError(
                f"{run_id}: in profile {profile}, {key}={value} is the same run as {key}={same}{mark} "
                f"({why_level(key, cfg)}); {fix}"
            )


def check_settings(run_id: str, cfg: Config, changes: dict[str, Any]) -> None:
    """Refuse, under any profile, a run whose `changes` (to its base) include a setting nothing in it reads,
    or whose readout needs an exemplar of every seen class where its memory may leave one without
    (components.py declares both)."""
    unread = sorted(changes.keys() - components.settings_read(cfg))
    if unread:
        key = unread[0]
        raise ConfigError(
            f"{run_id}: nothing in this run reads {key} (only {' or '.join(components.readers(key))} reads it), so "
            f"{key}={format_value(changes[key])} would change nothing; drop it"
        )
    if components.READOUTS[cfg.readout].per_class and not components.POLICIES[cfg.memory].per_class:
        raise ConfigError(
            f"{run_id}: readout={cfg.readout} needs an exemplar of every seen class, and memory={cfg.memory} may "
            "leave a class without one; also set readout=head"
        )
