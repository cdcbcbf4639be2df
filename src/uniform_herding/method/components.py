"""The method's components and what each reads: one registry per choice of Config (memory, loss, head, readout).

A run is its protocol (the task loop, a fresh SGD per task, imprinting: every run's) and one component per
choice: B3 is memory=uniform_herding, loss=ce_kd, head=cosine, readout=nme. Each entry declares the method
settings (catalogue.KEYS) the component reads, some only under a condition (ce_kd reads kd_temperature only
when kd_lambda > 0), and the open choices it settles (docs/design.md). From these declarations:

- a variant that changes a setting nothing in its run reads is refused (catalogue.resolve): it would be a
  second results folder, and a sweep a second point, for the same numbers;
- result.json's manifest records the settings its run read and only its own open choices (run.manifest);
- `--set`'s values, `uh run --help` and the lists in docs/extending.md come from these registries.

A memory policy also declares whether it keeps an exemplar of every seen class (the NME readout averages
each, so variants refuses readout=nme with a policy that does not) and whether it sizes every class by the
quota rule q_c (the manifest's quota_per_task). Its code is the class `cls` names in memory.py, built with
the settings it declares and nothing else. This module stays free of torch: the CLI resolves IDs, and
finds runs done, without it. A new policy is its class in memory.py and one entry in POLICIES
(docs/extending.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from uniform_herding.method.config import OPEN_CHOICES, Config

# A condition on the rest of the config: (how it reads to people, its test).
Condition = tuple[str, Callable[[Config], bool]]
KD_ON: Condition = ("kd_lambda > 0", lambda cfg: cfg.kd_lambda > 0)
COSINE: Condition = ("head=cosine", lambda cfg: cfg.head == "cosine")
HERDING: Condition = ("selection=herding", lambda cfg: cfg.selection == "herding")
IMPRINTING: Condition = ("imprint=true", lambda cfg: cfg.imprint)


@dataclass(frozen=True, kw_only=True)
class Component:
    """One value of a choice: what it does, the settings it reads and the open choices it settles."""

    summary: str  # one line, for people
    reads: tuple[str, ...] = ()  # the method settings (catalogue.KEYS) it reads
    choices: dict[str, str] = field(default_factory=dict)  # the open choices it settles: key -> how
    only: dict[str, Condition] = field(default_factory=dict)  # a setting or choice above that holds only if ...

    def applies(self, name: str, cfg: Config) -> bool:
        return name not in self.only or self.only[name][1](cfg)

    def settings(self, cfg: Config) -> tuple[str, ...]:
        """The settings it reads in a run of `cfg`."""
        return tuple(key for key in self.reads if self.applies(key, cfg))

    def open_choices(self, cfg: Config) -> dict[str, str]:
        """The open choices it settles in a run of `cfg`."""
        return {key: how for key, how in self.choices.items() if self.applies(key, cfg)}


@dataclass(frozen=True, kw_only=True)
class Policy(Component):
    """A memory policy: its class in memory.py, built as cls(M, generator, **the settings it reads but M and b).
    A policy that stores exemplars declares b: its run replays them, b per step (train.draw_replay reads b, not the
    class)."""

    cls: str
    per_class: bool  # keeps an exemplar of every seen class whenever M >= the classes seen (NME needs one)
    quotas: bool  # keeps q_c items of every seen class c (the quota rule): result.json's quota_per_task


@dataclass(frozen=True, kw_only=True)
class Readout(Component):
    """A readout: whether it needs an exemplar of every seen class."""

    per_class: bool


REPLAY = "b items per step, uniform with replacement over all stored active items, re-augmented"
HERDING_FEATURES = "raw (unnormalised) backbone features, eval transform; ties to the lowest index"
QUOTA_REMAINDER = "M mod C extra items go to the lowest internal labels"

PROTOCOL = Component(
    summary="every run's: the task loop, a fresh SGD per task with a gradient-norm clip, imprinting new head rows",
    reads=("memory", "loss", "head", "readout", "imprint", "lr", "momentum", "weight_decay", "grad_clip"),
    choices=OPEN_CHOICES,
    only={"imprinting": IMPRINTING},
)

POLICIES: dict[str, Policy] = {
    "uniform_herding": Policy(
        cls="UniformHerding",
        summary="after every task, every seen class re-selects its q_c from its pool of at most rho*q_c (B3)",
        reads=("M", "b", "rho", "selection"),
        per_class=True,
        quotas=True,
        choices={
            "replay": REPLAY,
            "herding_features": HERDING_FEATURES,
            "candidate_pool": "selected items + uniformly random leftovers, at most rho*q_c per class at boundaries; "
            "the paper's within-task reservoir insertion is not needed since pools only change at boundaries",
            "quota_remainder": QUOTA_REMAINDER,
        },
        only={"herding_features": HERDING},
    ),
    "icarl": Policy(
        cls="ICaRL",
        summary="a new class is herded once into a ranked list; later tasks keep its prefix of length q_c (B1, r1)",
        reads=("M", "b"),
        per_class=True,
        quotas=True,
        choices={"replay": REPLAY, "herding_features": HERDING_FEATURES, "quota_remainder": QUOTA_REMAINDER},
    ),
    "static": Policy(
        cls="StaticBank",
        summary="a new class keeps a uniformly random q_c; shrunk by uniformly random removal (B2)",
        reads=("M", "b"),
        per_class=True,
        quotas=True,
        choices={
            "replay": REPLAY,
            "static_bank": "new class: uniform random subset of q_c; shrink by uniform random removal",
            "quota_remainder": QUOTA_REMAINDER,
        },
    ),
    "closest_to_mean": Policy(
        cls="ClosestToMean",
        summary="a new class keeps its q_c items nearest its mean feature, ranked once; later the prefix",
        reads=("M", "b"),
        per_class=True,
        quotas=True,
        choices={
            "replay": REPLAY,
            "closest_to_mean": "new class: its items ranked once by the distance of their raw features (eval "
            "transform, float64) to the class mean, ties to the lowest index; keep the first q_c, later the prefix",
            "quota_remainder": QUOTA_REMAINDER,
        },
    ),
    "reservoir": Policy(
        cls="Reservoir",
        summary="a uniform sample of at most M of all training items seen, whatever their class (a class may "
        "keep none)",
        reads=("M", "b"),
        per_class=False,
        quotas=False,
        choices={
            "replay": REPLAY,
            "reservoir": "Algorithm R at every task boundary, over the task's items class by class in stream "
            "order: the n-th item seen fills a free slot, else takes slot floor(u * n) if that is < M "
            "(u uniform in [0, 1), float64, from the memory's generator)",
        },
    ),
    "none": Policy(cls="Memory", summary="no exemplars, no replay (B0)", per_class=False, quotas=False),
}

LOSSES: dict[str, Component] = {
    "ce_kd": Component(
        summary="cross-entropy over the seen classes (s*m off the target logit on a cosine head), plus lambda * "
        "T_KD^2 * KL on the old classes when lambda > 0",
        reads=("kd_lambda", "kd_temperature", "cos_margin"),
        choices={
            "kd": "softmax over old-class logits / T on both sides, KL batchmean, student margin-free, teacher = "
            "frozen eval-mode snapshot before head growth, on every image of the step"
        },
        only={"kd_temperature": KD_ON, "kd": KD_ON, "cos_margin": COSINE},
    ),
    "icarl_bce": Component(
        summary="iCaRL's binary cross-entropy, old-class targets from the teacher (B1)",
        choices={
            "icarl_loss": "BCE-with-logits averaged over seen classes and batch; old-class targets = teacher sigmoid"
        },
    ),
}

HEADS: dict[str, Component] = {
    "cosine": Component(summary="cosine classifier: logits s * cos(f, w_c)", reads=("cos_scale",)),
    "linear": Component(summary="nn.Linear (a3, iCaRL)"),
}

READOUTS: dict[str, Readout] = {
    "nme": Readout(
        summary="nearest mean of exemplars: each seen class's prototype averages its active exemplars",
        per_class=True,
        choices={
            "nme": "prototype = mean raw feature of the active exemplars, recomputed after every task; "
            "prediction by nearest normalised prototype"
        },
    ),
    "head": Readout(summary="argmax of the head's logits", per_class=False),
}

# The choices of Config, each with its registry: what `--set KEY=NAME` accepts, in this order.
CHOICES: dict[str, dict[str, Component]] = {"memory": POLICIES, "loss": LOSSES, "head": HEADS, "readout": READOUTS}


def parts(cfg: Config) -> dict[str, Component]:
    """The components of a run of `cfg`, under the names people give them ("memory=static")."""
    chosen = {f"{key}={getattr(cfg, key)}": registry[getattr(cfg, key)] for key, registry in CHOICES.items()}
    return {"the protocol": PROTOCOL, **chosen}


def settings_read(cfg: Config) -> set[str]:
    """Every method setting a run of `cfg` reads."""
    return {key for part in parts(cfg).values() for key in part.settings(cfg)}


def open_choices(cfg: Config) -> dict[str, str]:
    """The open choices a run of `cfg` settles: the protocol's, then its components' (result.json's manifest)."""
    return {key: how for part in parts(cfg).values() for key, how in part.open_choices(cfg).items()}


def readers(key: str) -> list[str]:
    """The components that read `key`, with their condition: ["loss=ce_kd when kd_lambda > 0"] for kd_temperature."""
    return [
        f"{choice}={name}" + (f" when {part.only[key][0]}" if key in part.only else "")
        for choice, registry in CHOICES.items()
        for name, part in registry.items()
        if key in part.reads
    ]
