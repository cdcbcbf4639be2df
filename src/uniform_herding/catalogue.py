"""The run catalogue: every run this artifact knows by its ID, and its config under a profile (`resolve`).

A run ID (RUNS) is a named set of changes to B3's config (method/config.py's defaults): every ablation (a1-a4) and
sweep (s1-s4) changes exactly one setting of B3; B0-B2 are their own protocols. Beyond the paper: r1-r3 are the matched
experiment its Discussion asks for, which isolates refresh; each changes exactly one setting of its base run (B3 or
B1), and none has a paper value. A profile (PROFILES) changes sizes only (data, width, epochs, budgets scaled).

A variant is a run ID with some of its method settings changed (`uh run RUN --set KEY=VALUE`, `uh sweep`'s grid,
`grid_points`). Its ID is a base run ID and its changes in sorted order of the keys (Python's string order: M, b,
kd_lambda, ..., rho), joined by `+`: `B3+rho=5`, `B3+M=1000+rho=5`. IDs use only [A-Za-z0-9_.=+-], so they
are folder names on every filesystem and shell words that need no quoting (values in one form: whole
numbers without padding, floats as Python's shortest repr with `e+` shortened to `e`: lr=0.05,
weight_decay=1e-05). The ID goes wherever a run ID goes (results folder, result.json, per-seed CSV, uh
status / check / report / aggregate, the executors), and `resolve` and `run_name` take either.

One run, one name (`Variant.canonical`). A run is the settings its config reads (components.py: B2 never
reads rho), so any spelling of the same settings names one run, and its name is the run ID that needs the
fewest `--set` keys to reach them, ties to the one that reads the same settings most nearly, then RUNS
order; a spelling whose settings are a run ID's *is* that run ID (B3 with M=500 is s1). So one run has one
results folder. M and b are in the paper's units; the profile scales them.

What a run is compared with (`base_of`, the one rule uh aggregate, uh check and uh report read): a run ID's
`RunSpec.base` (B3 for the ablations and sweeps; B0-B3 are compared with nothing); a variant's base, the run ID
its name starts from, unless the researcher chose another with `--base` (uh run, uh sweep, uh report): then its
ID ends in `+vs=RUN` (`r1+memory=closest_to_mean+vs=B3`), so the choice travels with the results.

A variant is refused when it changes a setting that nothing in its run reads, when its readout needs what
its memory does not keep (NME needs an exemplar of every seen class), and, under a profile, when a value
it sets is the same run as another value (`check_levels`: M, b and rho level off).

A layer of its own, between runs/ and method/ (pyproject.toml [tool.importlinter]): it builds on method/'s config.py
and components.py, never the reverse, and runs/, verdict/, report/ and the top-level modules import it.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, get_args, get_origin, get_type_hints

from uniform_herding.method import components
from uniform_herding.method.config import Config


@dataclass(frozen=True)
class RunSpec:
    """A run ID: a named set of changes to B3's config (the defaults)."""

    run_id: str
    name: str  # the paper's configuration label (Table 'Per-seed ...'), or ours beyond the paper
    description: str
    changes: dict[str, Any] = field(default_factory=dict)
    # The run it is compared with (base_of), differing from it in exactly `changes` vs base; None for B0-B3,
    # which the paper compares side by side as whole protocols.
    base: str | None = "B3"
    beyond_paper: bool = False  # not one of the paper's runs: no paper value exists


RUNS: dict[str, RunSpec] = {
    spec.run_id: spec
    for spec in [
        RunSpec(
            "B0",
            "No replay",
            "fine-tuning, CE only, head-logit readout",
            {"memory": "none", "kd_lambda": 0.0, "readout": "head"},
            base=None,
        ),
        RunSpec(
            "B1",
            "iCaRL",
            "arrival-time herding + prefix truncation, BCE, linear head, NME",
            {"memory": "icarl", "loss": "icarl_bce", "head": "linear", "imprint": False},
            base=None,
        ),
        RunSpec(
            "B2",
            "Static bank",
            "random bank, random removal, CE only, head-logit readout",
            {"memory": "static", "kd_lambda": 0.0, "readout": "head"},
            base=None,
        ),
        RunSpec("B3", "Uniform Herding", "refresh every class from rho*q pools by herding; CE+KD; NME", {}, base=None),
        RunSpec("a1", "No KD", "B3 without distillation", {"kd_lambda": 0.0}),
        RunSpec("a2", "Head-logit", "B3 with head-logit readout instead of NME", {"readout": "head"}),
        RunSpec("a3", "Linear head", "B3 with a linear head instead of cosine-margin", {"head": "linear"}),
        RunSpec(
            "a4", "Random selection", "B3 selecting exemplars at random instead of herding", {"selection": "random"}
        ),
        RunSpec("s1", "Active budget 500", "B3 with M=500", {"M": 500}),
        RunSpec("s2", "Active budget 4000", "B3 with M=4000", {"M": 4000}),
        RunSpec("s3", "Retrieval 32", "B3 with b=32", {"b": 32}),
        RunSpec("s4", "Retrieval 128", "B3 with b=128", {"b": 128}),
        # Beyond the paper: the matched experiment of its Discussion (refresh isolated).
        RunSpec(
            "r1",
            "Uniform Herding without refresh",
            "B3 with iCaRL's memory schedule: herd once on arrival, later keep the prefix, no pool",
            {"memory": "icarl"},
            beyond_paper=True,
        ),
        RunSpec(
            "r2",
            "Uniform Herding, storage-matched (rho = 1)",
            "B3 with rho=1: every class re-herded among its own exemplars; stores M, as r1",
            {"rho": 1},
            beyond_paper=True,
        ),
        RunSpec(
            "r3",
            "iCaRL with refresh",
            "B1 with Uniform Herding's memory (refresh from rho*q pools)",
            {"loss": "icarl_bce", "head": "linear", "imprint": False},
            base="B1",
            beyond_paper=True,
        ),
    ]
}

PAPER_RUNS: tuple[str, ...] = tuple(r for r, spec in RUNS.items() if not spec.beyond_paper)  # the twelve
BEYOND_PAPER: tuple[str, ...] = tuple(r for r, spec in RUNS.items() if spec.beyond_paper)  # r1-r3

# Names `uh run` and reproduce.sh accept for several run IDs. `all` is the paper's reproduction (its
# twelve run IDs, 36 runs); `refresh` is the refresh-isolation study beyond the paper: r1-r3 and the
# base runs their pairs need (B1, B3).
RUN_GROUPS: dict[str, tuple[str, ...]] = {"all": PAPER_RUNS, "refresh": ("B1", "B3", *BEYOND_PAPER)}

PROFILES: dict[str, dict[str, Any]] = {
    # The paper's protocol, unchanged.
    "paper": {},
    # Same code paths, tiny: 5 tasks x 2 classes of the synthetic archive (learnable: each class a
    # noisy pattern), 100 train / 20 test images per class, width 8, 6 epochs of batch 32 (24 steps
    # per task). M scaled by 1/40 and b by 1/4 (B3: M=50, b=16; s1 12, s2 100, s3 8, s4 32), so the
    # final quota is 5 items per class, 5% of the class as in the paper (20 of 450 is 4.4%).
    "smoke": {
        "dataset": "synthetic",
        "n_tasks": 5,
        "classes_per_task": 2,
        "width": 8,
        "epochs": 6,
        "batch_size": 32,
        "train_per_class": 100,
        "test_per_class": 20,
        "memory_scale": 0.025,
        "retrieval_scale": 0.25,
        "eval_batch_size": 256,
    },
    # The paper's protocol on CIFAR-10 (a second dataset; the paper reports CIFAR-100 only): 5 tasks
    # x 2 classes, every other setting as the paper. M is scaled by 1/10 so that each class keeps the
    # paper's final quota M/C = 20 items (B3: M=200; s1: 50, s2: 400); b stays 64 per batch of 128
    # (s3: 32, s4: 128), the same replayed share of every step. 4950 training, 1000 test images per class.
    "cifar10": {
        "dataset": "cifar10",
        "n_tasks": 5,
        "classes_per_task": 2,
        "memory_scale": 0.1,
    },
    # The CPU validation study on real CIFAR-10 (docs/validation.md): the cifar10 profile shrunk to
    # ~10-20 s per run on two CPU cores. Width 8, 4 epochs, batch 32; 250 training images per class
    # (of 4950), 200 test images per class (of 1000); M scaled by 1/10 as above, b by 1/4 so that
    # replay keeps half a batch (B3: M=200, b=16; s1 50, s2 400, s3 8, s4 32).
    "cifar10-cpu": {
        "dataset": "cifar10",
        "n_tasks": 5,
        "classes_per_task": 2,
        "width": 8,
        "epochs": 4,
        "batch_size": 32,
        "train_per_class": 250,
        "test_per_class": 200,
        "memory_scale": 0.1,
        "retrieval_scale": 0.25,
        "eval_batch_size": 500,
    },
}

# cifar10-cpu trained three times as long (12 epochs per task instead of 4, every other size the same):
# the larger CPU size of the refresh-isolation study (docs/validation.md, r1 vs r2).
PROFILES["cifar10-cpu-long"] = {**PROFILES["cifar10-cpu"], "epochs": 12}

# Where each profile is meant to run (`--device auto`): the paper's sizes on a GPU; the small profiles on
# the CPU, where their expected results were made (a GPU computes other numbers: fp16, other kernels).
PROFILE_DEVICE: dict[str, Literal["cuda", "cpu"]] = {
    "paper": "cuda",
    "smoke": "cpu",
    "cifar10": "cuda",
    "cifar10-cpu": "cpu",
    "cifar10-cpu-long": "cpu",
}

# Profile fields that may change; anything else would change the method.
SIZE_FIELDS = frozenset(
    {
        "dataset",
        "n_tasks",
        "classes_per_task",
        "width",
        "epochs",
        "batch_size",
        "train_per_class",
        "test_per_class",
        "memory_scale",
        "retrieval_scale",
        "eval_batch_size",
    }
)


class ConfigError(ValueError):
    """A run ID, profile or setting the artifact does not know."""


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


def split(name: str) -> tuple[str, list[str], str | None]:
    """A run or variant ID's base, its KEY=VALUE texts and the run ID its `vs=RUN` part names (None without one)."""
    base, *parts = name.split(SEP)
    if base not in RUNS:
        raise ConfigError(f"unknown run ID {base!r}; known: {', '.join(RUNS)} (see `uh list`)")
    vs = parts.pop().partition("=")[2] if parts and parts[-1].startswith(f"{PIN}=") else None
    if vs is not None and vs not in RUNS:
        raise ConfigError(f"{name}: {PIN}={vs} names no run ID; a variant is compared with one of {', '.join(RUNS)}")
    return base, parts, vs


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
    if SEP in run_id:
        variant = parse(run_id)
        cfg = variant.config(profile)
        check(run_id, variant.base, cfg, variant.changes, profile)
        return cfg
    if run_id not in RUNS:
        raise ConfigError(f"unknown run ID {run_id!r}; known: {', '.join(RUNS)} (see `uh list`)")
    if profile not in PROFILES:
        raise ConfigError(f"unknown profile {profile!r}; known: {', '.join(PROFILES)}")
    sizes = PROFILES[profile]
    assert SIZE_FIELDS.issuperset(sizes), "a profile may only change sizes"
    return dataclasses.replace(Config(), **RUNS[run_id].changes, **sizes)


def differences(run_id: str, other: str, profile: str = "paper") -> dict[str, Any]:
    """The settings in which `run_id` differs from `other`, with `run_id`'s values (e.g. r3 vs B1:
    memory=uniform_herding); what `uh list` prints for a run beyond the paper against its base."""
    a, b = resolve(run_id, profile).to_dict(), resolve(other, profile).to_dict()
    return {k: v for k, v in a.items() if v != b[k]}


def expand_run_ids(names: tuple[str, ...] | list[str]) -> list[str]:
    """Run IDs and group names (RUN_GROUPS) -> run IDs in the order given, each once."""
    ids = [r for name in names for r in RUN_GROUPS.get(name, (name,))]
    return list(dict.fromkeys(ids))


def images_per_class(cfg: Config) -> tuple[int, int]:
    """Training and test images per class of a run: the profile's, else all (CIFAR-100's 450 and 100 after the
    probe and validation hold-out, CIFAR-10's 4950 and 1000; the synthetic archive has CIFAR-100's shape)."""
    cifar10 = cfg.dataset == "cifar10"
    return cfg.train_per_class or (4950 if cifar10 else 450), cfg.test_per_class or (1000 if cifar10 else 100)


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
        own = getattr(resolve(base), key)
        named = [own, *(getattr(resolve(r), key) for r in RUNS), max(1, round(want / scale[key]))]
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
