"""Run ID -> config: the paper's protocol as one frozen dataclass, the runs, the profiles.

The paper (Sec. 3, App. A): CIFAR-100, T=10 tasks x 10 classes, ResNet-18 (w=64), active budget
M=2000, retrieval b=64, candidate multiplier rho=3, KD lambda=1 at T_KD=2, cosine-margin head
(s=30, m=0.35), SGD lr 0.1 / momentum 0.9 / wd 5e-4, batch 128, clip 1.0, 70 epochs, seeds
1993/2023/42. Every ablation (a1-a4) and sweep (s1-s4) changes exactly one setting of B3;
B0-B2 are their own protocols. A profile changes sizes only (data, width, epochs, budgets scaled).

Beyond the paper: r1-r3 are the matched experiment its Discussion asks for, which
isolates refresh. Each changes exactly one setting of its base run (B3 or B1); none has a paper value.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

SEEDS: tuple[int, ...] = (1993, 2023, 42)
CONFIG_VERSION = 1  # bump when a change makes old results incomparable


@dataclass(frozen=True)
class Config:
    """The resolved protocol of one run. Units and paper sections in the comments."""

    # --- method (Sec. 3.2-3.4) -------------------------------------------------------------
    memory: str = "uniform_herding"  # the memory policy: a name in components.POLICIES
    selection: Literal["herding", "random"] = "herding"  # how Uniform Herding fills q_c (a4: random)
    loss: Literal["ce_kd", "icarl_bce"] = "ce_kd"  # CE (+KD when kd_lambda > 0) or iCaRL's BCE
    kd_lambda: float = 1.0  # lambda, distillation weight (a1: 0)
    kd_temperature: float = 2.0  # T_KD
    head: Literal["cosine", "linear"] = "cosine"  # cosine-margin (s, m) or nn.Linear (a3, iCaRL)
    cos_scale: float = 30.0  # s
    cos_margin: float = 0.35  # m, subtracted as s*m from the target logit in training only
    imprint: bool = True  # new head rows from normalised class means, from task 1 on
    readout: Literal["nme", "head"] = "nme"  # nearest-mean-of-exemplars or head-logit argmax
    M: int = 2000  # active exemplar budget (items), before the profile's scale
    b: int = 64  # retrieval: replayed exemplars per step, before the profile's scale
    rho: int = 3  # candidate multiplier: pool holds at most rho*q_c items per class

    # --- optimisation (Sec. 3.1, App. A) -----------------------------------------------------
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 5e-4
    batch_size: int = 128  # current-task images per step
    grad_clip: float = 1.0  # gradient-norm clip
    epochs: int = 70  # per task

    # --- sizes: set by the profile ------------------------------------------------------------
    dataset: Literal["cifar100", "cifar10", "synthetic"] = "cifar100"
    n_tasks: int = 10  # T
    classes_per_task: int = 10  # C_new
    width: int = 64  # ResNet-18 base width w (feature dim 8w)
    split_seed: int = 13  # class order and probe/validation hold-out
    probe_per_class: int = 30
    val_per_class: int = 20
    train_per_class: int | None = None  # None: all remaining (450 on CIFAR-100, 4950 on CIFAR-10)
    test_per_class: int | None = None  # None: all (100 on CIFAR-100, 1000 on CIFAR-10)
    memory_scale: float = 1.0  # M_eff = round(M * memory_scale)
    retrieval_scale: float = 1.0  # b_eff = round(b * retrieval_scale)
    eval_batch_size: int = 1024

    @property
    def budget(self) -> int:
        """Active budget M in items after the profile's scale (0 for no replay)."""
        return 0 if self.memory == "none" else max(1, round(self.M * self.memory_scale))

    @property
    def retrieval(self) -> int:
        """Replayed items per step b after the profile's scale (0 for no replay)."""
        return 0 if self.memory == "none" else max(1, round(self.b * self.retrieval_scale))

    @property
    def n_classes(self) -> int:
        return self.n_tasks * self.classes_per_task

    def to_dict(self) -> dict[str, Any]:
        """Every field plus the derived sizes, as recorded in result.json."""
        return {**dataclasses.asdict(self), "budget": self.budget, "retrieval": self.retrieval}


@dataclass(frozen=True)
class RunSpec:
    """A run ID: a named set of changes to B3's config (the defaults)."""

    run_id: str
    name: str  # the paper's configuration label (Table 'Per-seed ...'), or ours beyond the paper
    description: str
    changes: dict[str, Any] = field(default_factory=dict)
    # The run it is compared with (variants.base_of), differing from it in exactly `changes` vs base; None for B0-B3,
    # which the paper compares side by side as whole protocols.
    base: str | None = "B3"
    beyond_paper: bool = False  # not one of the paper's runs: no paper value exists


RUNS: dict[str, RunSpec] = {
    spec.run_id: spec
    for spec in [
        RunSpec("B0", "No replay", "fine-tuning, CE only, head-logit readout",
                {"memory": "none", "kd_lambda": 0.0, "readout": "head"}, base=None),
        RunSpec("B1", "iCaRL", "arrival-time herding + prefix truncation, BCE, linear head, NME",
                {"memory": "icarl", "loss": "icarl_bce", "head": "linear", "imprint": False}, base=None),
        RunSpec("B2", "Static bank", "random bank, random removal, CE only, head-logit readout",
                {"memory": "static", "kd_lambda": 0.0, "readout": "head"}, base=None),
        RunSpec("B3", "Uniform Herding", "refresh every class from rho*q pools by herding; CE+KD; NME", {},
                base=None),
        RunSpec("a1", "No KD", "B3 without distillation", {"kd_lambda": 0.0}),
        RunSpec("a2", "Head-logit", "B3 with head-logit readout instead of NME", {"readout": "head"}),
        RunSpec("a3", "Linear head", "B3 with a linear head instead of cosine-margin", {"head": "linear"}),
        RunSpec("a4", "Random selection", "B3 selecting exemplars at random instead of herding",
                {"selection": "random"}),
        RunSpec("s1", "Active budget 500", "B3 with M=500", {"M": 500}),
        RunSpec("s2", "Active budget 4000", "B3 with M=4000", {"M": 4000}),
        RunSpec("s3", "Retrieval 32", "B3 with b=32", {"b": 32}),
        RunSpec("s4", "Retrieval 128", "B3 with b=128", {"b": 128}),
        # Beyond the paper: the matched experiment of its Discussion (refresh isolated).
        RunSpec("r1", "Uniform Herding without refresh",
                "B3 with iCaRL's memory schedule: herd once on arrival, later keep the prefix, no pool",
                {"memory": "icarl"}, beyond_paper=True),
        RunSpec("r2", "Uniform Herding, storage-matched (rho = 1)",
                "B3 with rho=1: every class re-herded among its own exemplars; stores M, as r1",
                {"rho": 1}, beyond_paper=True),
        RunSpec("r3", "iCaRL with refresh", "B1 with Uniform Herding's memory (refresh from rho*q pools)",
                {"loss": "icarl_bce", "head": "linear", "imprint": False}, base="B1", beyond_paper=True),
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

DEVICES = ("auto", "cuda", "cpu")  # --device (devices.py); here, so that the CLI names them without torch
# The variables every command that trains reads besides its options (`uh run`, `uh sweep`, `uh doctor` --help).
TRAINING_ENVIRONMENT = ("UH_CPU_THREADS, the CPU thread count (default 1: a CPU result depends on it); UH_COMPILE, "
                        "torch.compile the backbone (0, 1, reduce-overhead, max-autotune; default 0).")  # fmt: skip

# Where each profile is meant to run (`--device auto`): the paper's sizes on a GPU; the small profiles on
# the CPU, where their expected results were made (a GPU computes other numbers: fp16, other kernels).
PROFILE_DEVICE: dict[str, Literal["cuda", "cpu"]] = {
    "paper": "cuda", "smoke": "cpu", "cifar10": "cuda", "cifar10-cpu": "cpu", "cifar10-cpu-long": "cpu"
}  # fmt: skip

# Profile fields that may change; anything else would change the method.
SIZE_FIELDS = frozenset(
    {"dataset", "n_tasks", "classes_per_task", "width", "epochs", "batch_size", "train_per_class",
     "test_per_class", "memory_scale", "retrieval_scale", "eval_batch_size"}
)


VARIANT_SEP = "+"  # joins a variant ID's base and its changes: B3+rho=5 (uniform_herding/variants.py)


class ConfigError(ValueError):
    """A run ID, profile or setting the artifact does not know."""


def resolve(run_id: str, profile: str = "paper") -> Config:
    """Config of run ID `run_id` under `profile`: B3's defaults, then the run's changes, then sizes.

    Run IDs only: a variant ID (`B3+rho=5`) is resolved, and checked, by variants.resolve, which builds on
    this module."""
    if run_id not in RUNS:
        hint = f" ({run_id!r} is a variant ID: variants.resolve resolves it)" if VARIANT_SEP in run_id else ""
        raise ConfigError(f"unknown run ID {run_id!r}; known: {', '.join(RUNS)} (see `uh list`){hint}")
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


def run_name(run_id: str, profile: str = "paper") -> str:
    """The run's label with the sizes `profile` really uses: "Active budget 500" in the paper's
    protocol, "Active budget 12" in the smoke profile (the sweeps' names state their size). Run IDs only:
    variants.run_name names a variant too."""
    spec, cfg = RUNS[run_id], resolve(run_id, profile)
    if "M" in spec.changes:
        return f"Active budget {cfg.budget}"
    if "b" in spec.changes:
        return f"Retrieval {cfg.retrieval}"
    return spec.name


# Every point the paper leaves open that every run settles alike, and how this artifact settles it
# (docs/design.md). A component's own choices (the candidate pool, KD, NME, ...) are declared with it in
# components.py; a result's manifest records these and its components' (components.open_choices).
OPEN_CHOICES: dict[str, str] = {
    "class_order": "numpy RandomState(split_seed=13).permutation(K), K=100 (CIFAR-10: 10); "
    "internal label i = original order[i]",
    "hold_out": "same rng, per internal class: permutation of its ascending train indices; "
    "first 30 probe, next 20 validation, rest (450; CIFAR-10: 4950) training",
    "normalisation": "CIFAR-100 mean (0.5071, 0.4865, 0.4409), std (0.2673, 0.2564, 0.2762); "
    "CIFAR-10 mean (0.4914, 0.4822, 0.4465), std (0.2470, 0.2435, 0.2616)",
    "augmentation": "crop 32 from zero-padded 40 + horizontal flip p=0.5 per image, current and replayed alike",
    "backbone": "CIFAR ResNet-18: 3x3 stride-1 stem, no max-pool, BasicBlocks [2,2,2,2], global average pool",
    "head_growth": "10 new rows per task, old rows kept; new rows initialised as nn.Linear",
    "imprinting": "from task 1, every head but iCaRL's: row = normalised mean of normalised features of "
    "the class's training images (eval transform, current backbone); bias 0",
    "optimizer": "fresh SGD per task, weight decay on all parameters, no schedule, last partial batch kept",
    "precision": "16-mixed on GPU (as the paper): fp16 autocast, dynamic loss scale from 2^16 with a fresh "
    "scaler per task, overflowing steps skipped; fp32 outside autocast without TF32, as on the paper's T4; "
    "fp32 on CPU",
    "epochs": "70 configured epochs per task (the paper's metadata records 71: a counter artefact)",
}
