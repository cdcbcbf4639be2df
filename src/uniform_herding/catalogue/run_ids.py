"""The run data: the run IDs (RUNS: the paper's twelve and r1-r3 beyond it), their groups and the profiles.

A run ID (RUNS) is a named set of changes to B3's config (method/config.py's defaults): every ablation (a1-a4) and
sweep (s1-s4) changes exactly one setting of B3; B0-B2 are their own protocols. Beyond the paper: r1-r3 are the matched
experiment its Discussion asks for, which isolates refresh; each changes exactly one setting of its base run (B3 or
B1), and none has a paper value. A profile (PROFILES) changes sizes only (data, width, epochs, budgets scaled).
`run_config` is a run ID's config under a profile; variants.resolve takes a variant ID too.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from uniform_herding.errors import UhError
from uniform_herding.method.config import Config


class ConfigError(UhError, ValueError):
    """A run ID, profile or setting the artifact does not know, or a variant that cannot run: one line, exit 2."""


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


def expand_run_ids(names: tuple[str, ...] | list[str]) -> list[str]:
    """Run IDs and group names (RUN_GROUPS) -> run IDs in the order given, each once."""
    ids = [r for name in names for r in RUN_GROUPS.get(name, (name,))]
    return list(dict.fromkeys(ids))


def images_per_class(cfg: Config) -> tuple[int, int]:
    """Training and test images per class of a run: the profile's, else all (CIFAR-100's 450 and 100 after the
    probe and validation hold-out, CIFAR-10's 4950 and 1000; the synthetic archive has CIFAR-100's shape)."""
    cifar10 = cfg.dataset == "cifar10"
    return cfg.train_per_class or (4950 if cifar10 else 450), cfg.test_per_class or (1000 if cifar10 else 100)


def sort_key(run_id: str) -> tuple[int, str]:
    """Run IDs in RUNS order, then variants by ID."""
    return (list(RUNS).index(run_id), "") if run_id in RUNS else (len(RUNS), run_id)


def run_config(run_id: str, profile: str = "paper") -> Config:
    """The config of run ID `run_id` under `profile`: B3's defaults, then the run ID's changes, then the profile's
    sizes."""
    if run_id not in RUNS:
        raise ConfigError(f"unknown run ID {run_id!r}; known: {', '.join(RUNS)} (see `uh list`)")
    if profile not in PROFILES:
        raise ConfigError(f"unknown profile {profile!r}; known: {', '.join(PROFILES)}")
    sizes = PROFILES[profile]
    assert SIZE_FIELDS.issuperset(sizes), "a profile may only change sizes"
    return dataclasses.replace(Config(), **RUNS[run_id].changes, **sizes)
