"""The paper's protocol as one frozen dataclass (`Config`): every setting of a run, with B3's values as the defaults.

The paper (Sec. 3, App. A): CIFAR-100, T=10 tasks x 10 classes, ResNet-18 (w=64), active budget
M=2000, retrieval b=64, candidate multiplier rho=3, KD lambda=1 at T_KD=2, cosine-margin head
(s=30, m=0.35), SGD lr 0.1 / momentum 0.9 / wd 5e-4, batch 128, clip 1.0, 70 epochs, seeds
1993/2023/42. Which runs change which settings, and the profiles' sizes, are the run catalogue's
(uniform_herding/catalogue/): method/ reads a Config and never a run ID.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
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


DEVICES = ("auto", "cuda", "cpu")  # --device (devices.py); here, so that the CLI names them without torch
# The variables every command that trains reads besides its options (`uh run`, `uh sweep`, `uh doctor` --help).
TRAINING_ENVIRONMENT = (
    "UH_CPU_THREADS, the CPU thread count (default 1: a CPU result depends on it); UH_COMPILE, "
    "torch.compile the backbone (0, 1, reduce-overhead, max-autotune; default 0)."
)

# What a run on each device uses unless told otherwise, of the settings besides its config that change its numbers
# (runs/run.py's numeric_settings): engine.precision and devices.cpu_threads take theirs from here, and uh check names
# results that leave them (runs/provenance.py).
NUMERIC_DEFAULTS: dict[str, dict[str, Any]] = {
    "cuda": {"precision": "16-mixed", "compile": "off", "deterministic": False},
    "cpu": {"precision": "32-true", "compile": "off", "deterministic": False, "cpu_threads": 1},
}


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
