"""The `--set` grammar: which method settings a variant may change (KEYS), each value's text and its checks, and
how a variant ID is spelled.

A variant is a run ID with some of its method settings changed (`uh run RUN --set KEY=VALUE`, `uh sweep`'s grid,
`grid_points`). Its ID is a base run ID and its changes in sorted order of the keys (Python's string order: M, b,
kd_lambda, ..., rho), joined by `+`: `B3+rho=5`, `B3+M=1000+rho=5`. IDs use only [A-Za-z0-9_.=+-], so they
are folder names on every filesystem and shell words that need no quoting (values in one form: whole
numbers without padding, floats as Python's shortest repr with `e+` shortened to `e`: lr=0.05,
weight_decay=1e-05). A last part `vs=RUN` names the run ID it is compared with, where chosen (--base).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from typing import Any, Literal, get_args, get_origin, get_type_hints

from uniform_herding.catalogue.run_ids import RUNS, SIZE_FIELDS, ConfigError
from uniform_herding.method import components
from uniform_herding.method.config import Config

SEP = "+"  # joins a variant ID's base and its changes: B3+rho=5
PIN = "vs"  # a variant ID's last part `vs=RUN`: the run ID it is compared with, where chosen (--base)
# The method settings --set may change; sizes belong to a profile, and the split is every run's.
KEYS: tuple[str, ...] = (
    "memory",
    "selection",
    "loss",
    "kd_lambda",
    "kd_temperature",
    "head",
    "cos_scale",
    "cos_margin",
    "imprint",
    "readout",
    "M",
    "b",
    "rho",
    "lr",
    "momentum",
    "weight_decay",
    "grad_clip",
)
SPLIT_FIELDS = frozenset({"split_seed", "probe_per_class", "val_per_class"})
TYPES: dict[str, Any] = get_type_hints(Config)
# The valid range of each real-valued key: a test and the words the refusal prints.
RATES: dict[str, tuple[Callable[[float], bool], str]] = {
    "kd_lambda": (lambda x: x >= 0, ">= 0"),
    "kd_temperature": (lambda x: x > 0, "> 0 (T_KD divides the logits)"),
    "cos_scale": (lambda x: x > 0, "> 0 (s scales the cosines)"),
    "cos_margin": (lambda x: x >= 0, ">= 0"),
    "lr": (lambda x: x > 0, "> 0"),
    "momentum": (lambda x: 0 <= x < 1, "in [0, 1)"),
    "weight_decay": (lambda x: x >= 0, ">= 0"),
    "grad_clip": (lambda x: x > 0, "> 0 (a clip of 0 zeroes every gradient)"),
}


def parse_value(key: str, text: str) -> Any:
    """`text` as a value of Config field `key`, checked: a Literal's choices, a count >= 1, a finite rate in range."""
    kind = TYPES[key]
    names = choices(key)
    if names:
        if text not in names:
            raise ConfigError(f"{key}={text}: {key} is one of {', '.join(names)}")
        return text
    if kind is bool:
        if text not in ("true", "false"):
            raise ConfigError(f"{key}={text}: {key} is true or false")
        return text == "true"
    if kind is int:
        if not re.fullmatch(r"[0-9]+", text) or int(text) < 1:
            raise ConfigError(f"{key}={text}: {key} is a whole number >= 1")
        return int(text)
    test, valid = RATES[key]
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not test(value):
        raise ConfigError(f"{key}={text}: {key} is a finite number {valid}")
    return value


def choices(key: str) -> tuple[str, ...]:
    """The values of a choice: a component registry's names (memory, loss, head, readout) or a Literal's; () else."""
    if key in components.CHOICES:
        return tuple(components.CHOICES[key])
    return get_args(TYPES[key]) if get_origin(TYPES[key]) is Literal else ()


def format_value(value: Any) -> str:
    """A value as the ID writes it: parse_value(key, format_value(v)) == v, and no character a shell expands."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value).replace("e+", "e")
    return str(value)


def check_key(key: str) -> None:
    if key in KEYS:
        return
    if key in SIZE_FIELDS:
        raise ConfigError(
            f"{key} is a size, set by the profile (--profile), not by --set; --set changes "
            f"the method: {', '.join(KEYS)}"
        )
    if key in SPLIT_FIELDS:
        raise ConfigError(
            f"{key} fixes the data split that every run shares, not a method setting; --set changes: {', '.join(KEYS)}"
        )
    raise ConfigError(f"unknown key {key!r}; --set changes: {', '.join(KEYS)}")


def assignments(texts: Iterable[str]) -> dict[str, str]:
    """KEY=VALUE texts -> {key: value text}; a text without '=', an unknown key or a key given twice is refused."""
    out: dict[str, str] = {}
    for text in texts:
        key, eq, value = text.partition("=")
        if not eq or not key or not value:
            raise ConfigError(f"{text!r} is not KEY=VALUE (e.g. rho=5)")
        check_key(key)
        if key in out:
            raise ConfigError(f"{key} is given twice ({key}={out[key]}, {key}={value}); give each key once")
        out[key] = value
    return out


def split(name: str) -> tuple[str, list[str], str | None]:
    """A run or variant ID's base, its KEY=VALUE texts and the run ID its `vs=RUN` part names (None without one)."""
    base, *parts = name.split(SEP)
    if base not in RUNS:
        raise ConfigError(f"unknown run ID {base!r}; known: {', '.join(RUNS)} (see `uh list`)")
    vs = parts.pop().partition("=")[2] if parts and parts[-1].startswith(f"{PIN}=") else None
    if vs is not None and vs not in RUNS:
        raise ConfigError(f"{name}: {PIN}={vs} names no run ID; a variant is compared with one of {', '.join(RUNS)}")
    return base, parts, vs


def axes(grid: tuple[str, ...]) -> dict[str, list[str]]:
    """KEY=V1,V2,... texts -> {key: [value texts]}; a key twice, a value twice (as parsed) or no value is refused."""
    out: dict[str, list[str]] = {}
    for key, values in assignments(grid).items():
        texts = values.split(",")
        parsed = [format_value(parse_value(key, text)) if text else "" for text in texts]
        if "" in parsed:
            raise ConfigError(f"{key}={values}: an empty value; give KEY=V1,V2,... without spaces")
        twice = sorted({p for p in parsed if parsed.count(p) > 1})
        if twice:
            raise ConfigError(f"{key}={values}: {key}={twice[0]} is listed twice; list each value once")
        out[key] = texts
    return out
