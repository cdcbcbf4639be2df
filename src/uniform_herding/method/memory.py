"""Refresh memory: the quota rule, greedy herding and the memory policies (Sec. 3.2, 3.4).

Glossary (paper's symbols):
  M      active budget: replayable exemplars in total after every task
  C_t    number of classes seen after task t
  q_c    quota of class c: floor(M / C_t) + 1{c < M mod C_t}
  rho    candidate multiplier: Uniform Herding's pool keeps at most rho * q_c candidates per class
  Q_c    candidate set at the boundary: the persistent pool (old class) or the task's images (new)
  mu_c   mean feature of Q_c; S_k running sum of the k herded features
  E_c    active set of class c: what replay draws from and what NME prototypes average

A policy maps (the classes just introduced, a feature function) to new active sets. Items are
positions in the task stream's one training tensor, which holds the run's classes class by class in
internal-label order (class c: positions c*n to (c+1)*n - 1, n training images per class); the stream
holds no probe or validation image. Each policy here has one entry in components.POLICIES: its name,
the settings it reads, whether it keeps every seen class (NME needs that) and whether it follows the
quota rule. The worked example of adding one is Reservoir (docs/extending.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from uniform_herding.method.components import POLICIES
from uniform_herding.method.config import Config

Embed = Callable[[Tensor], Tensor]  # items [n] -> raw features [n, d], eval transform


def quotas(M: int, C: int) -> list[int]:
    """q_i for internal labels i = 0..C-1: the remainder goes to the lowest labels."""
    return [M // C + (1 if i < M % C else 0) for i in range(C)]


def herd(features: Tensor, k: int) -> Tensor:
    """Greedy herding order of the first min(k, n) rows (Sec. 3.2, raw features): herd_classes of one class."""
    return herd_classes([features], [k])[0]


# CUDA sums a [rows, d] tensor's rows with one thread layout from 16 rows on (ReduceConfig.set_block_dimension: a
# block 32 threads wide and 16 high), and with another below; a class with fewer candidates (the M = 500 sweep keeps
# 15 per old class) is herded alone, as it always was, so that no distance can differ in its last bit.
SMALLEST_BATCH = 16


def herd_groups(sizes: Sequence[int], together: bool) -> list[list[int]]:
    """Which classes herd_classes herds at once, by their numbers of candidates: where `together` (on a GPU, which
    pays per kernel launch) those with as many, at least SMALLEST_BATCH; else each alone (a CPU pays per byte: a
    batch's [C, n, d] float64 temporaries leave its cache, benchmarks/herding.py)."""
    groups: dict[int, list[int]] = {}
    for c, n in enumerate(sizes):
        groups.setdefault(n if together and n >= SMALLEST_BATCH else -1 - c, []).append(c)
    return list(groups.values())


def herd_classes(features: Sequence[Tensor], ks: Sequence[int], together: bool | None = None) -> list[Tensor]:
    """Greedy herding order of the first min(k_c, n_c) rows of each class c (Sec. 3.2, raw features).

    x_k = argmin_{x not yet chosen} ||f(x) - (k * mu - S_{k-1})||^2, ties to the lowest index.
    On a GPU, the classes with as many candidates are herded at once (herd_groups), as one [C, n, d] batch in one
    loop of max k_c steps: a refresh of Uniform Herding re-selects every seen class (up to 100, a few sizes of
    pool), so it launches tens of steps where a loop per class launched M = 2000. Each class's mean and distances
    are the same float64 operations as alone, so its order is bitwise the one it gets alone
    (tests/method/test_memory.py). Runs in float64 so the order does not depend on the device's summation order.
    `together` None: as the device's kind wants it (a GPU: at once); True or False: either way on any device.
    """
    if together is None:
        together = bool(features) and features[0].is_cuda
    chosen: dict[int, Tensor] = {}
    for members in herd_groups([len(group) for group in features], together):
        orders = herd_batch([features[c] for c in members], max(ks[c] for c in members))
        chosen.update({c: orders[row, : ks[c]] for row, c in enumerate(members)})
    return [chosen[c] for c in range(len(features))]


def herd_batch(features: Sequence[Tensor], k: int) -> Tensor:
    """The herding order of the first min(k, n) rows of each of C classes of n candidates each: [C, steps].

    The chosen indices stay on the device (index_put_, gathers): reading one on the host would be a GPU
    synchronisation per step.
    """
    f = torch.stack([group.double() for group in features])  # [C, n, d]
    mu = torch.stack([group.mean(dim=0) for group in f])  # [C, d]: each class's mean, reduced as alone
    S = torch.zeros_like(mu)
    taken = torch.zeros(f.shape[:2], dtype=torch.bool, device=f.device)  # [C, n]
    classes = torch.arange(len(f), device=f.device)
    order = [torch.zeros(len(f), 0, dtype=torch.long, device=f.device)]
    for j in range(1, min(k, f.shape[1]) + 1):
        dist = ((f - (j * mu - S)[:, None, :]) ** 2).sum(dim=2).masked_fill(taken, float("inf"))  # [C, n]
        i = dist.argmin(dim=1)  # first minimum: ties go to the lowest index
        taken.index_put_((classes, i), torch.ones_like(i, dtype=torch.bool))
        S += f[classes, i]
        order.append(i[:, None])
    return torch.cat(order, dim=1)


class Memory:
    """Active sets E_c per seen class; the base class is the no-replay policy (B0)."""

    def __init__(self, M: int, generator: torch.Generator) -> None:
        self.M, self.generator = M, generator
        self.active: dict[int, Tensor] = {}

    def refresh(self, new: dict[int, Tensor], embed: Embed) -> None:
        """Called after every task with the new classes' training items."""

    def replay_items(self) -> Tensor | None:
        """All stored active items; replay samples uniformly over items, not classes."""
        return torch.cat(list(self.active.values())) if self.active else None

    def pool_size(self) -> int:
        """Items kept beyond the active sets for later refresh (Uniform Herding's candidates)."""
        return 0

    def _shuffle(self, items: Tensor) -> Tensor:
        perm = torch.randperm(len(items), generator=self.generator)
        return items[perm.to(items.device)]

    def _embed_all(self, groups: dict[int, Tensor], embed: Embed) -> dict[int, Tensor]:
        """Features of every group in one pass (large batches), split back per class."""
        feats = embed(torch.cat(list(groups.values())))
        return dict(zip(groups, feats.split([len(g) for g in groups.values()]), strict=True))

    def state(self) -> dict:
        return {"active": dict(self.active)}

    def load_state(self, state: dict) -> None:
        self.active = dict(state["active"])


class UniformHerding(Memory):
    """Re-select every seen class after every task from its bounded candidate pool (B3, a4)."""

    def __init__(self, M: int, generator: torch.Generator, rho: int, selection: str) -> None:
        super().__init__(M, generator)
        self.rho, self.selection = rho, selection
        self.pool: dict[int, Tensor] = {}

    def refresh(self, new: dict[int, Tensor], embed: Embed) -> None:
        candidates = {**self.pool, **new}  # Q_c: persistent pool or the new class's stream
        q = quotas(self.M, len(candidates))
        if self.selection == "herding":
            feats = self._embed_all(candidates, embed)
            herded = dict(zip(candidates, herd_classes(list(feats.values()), [q[c] for c in feats]), strict=True))
        for c, items in candidates.items():
            if self.selection == "herding":
                chosen = herded[c].to(items.device)
            else:  # a4: uniformly random selection
                chosen = torch.randperm(len(items), generator=self.generator)[: q[c]].to(items.device)
            left = torch.ones(len(items), dtype=torch.bool, device=items.device)
            left[chosen] = False
            extra = self._shuffle(items[left])[: (self.rho - 1) * q[c]]
            self.active[c] = items[chosen]
            self.pool[c] = torch.cat([self.active[c], extra])  # |pool| <= rho * q_c

    def pool_size(self) -> int:
        return sum(len(p) for p in self.pool.values())

    def state(self) -> dict:
        return {**super().state(), "pool": dict(self.pool)}

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        self.pool = dict(state["pool"])


class ICaRL(Memory):
    """Herd a new class once on arrival into a ranked list; later keep its prefix of length q_c (B1)."""

    def refresh(self, new: dict[int, Tensor], embed: Embed) -> None:
        q = quotas(self.M, len(self.active) + len(new))
        feats = self._embed_all(new, embed)
        for c, chosen in zip(feats, herd_classes(list(feats.values()), [q[c] for c in feats]), strict=True):
            self.active[c] = new[c][chosen.to(new[c].device)]  # ranked list of length q_c
        for c in self.active:
            self.active[c] = self.active[c][: q[c]]  # prefix truncation; the rest is dropped


class StaticBank(Memory):
    """Keep a uniformly random subset per new class; shrink by uniformly random removal (B2)."""

    def refresh(self, new: dict[int, Tensor], embed: Embed) -> None:
        q = quotas(self.M, len(self.active) + len(new))
        for c, items in {**self.active, **new}.items():
            self.active[c] = self._shuffle(items)[: q[c]]


class ClosestToMean(Memory):
    """Keep each class's q_c items closest to its mean feature mu_c, ranked once on arrival; shrink by
    keeping the ranked prefix (iCaRL's schedule, ranked by distance instead of herding). Beyond the
    paper: `--set memory=closest_to_mean`."""

    def refresh(self, new: dict[int, Tensor], embed: Embed) -> None:
        q = quotas(self.M, len(self.active) + len(new))
        for c, f in self._embed_all(new, embed).items():
            f = f.double()  # as herd(): the order does not depend on the device's summation order
            distance = (f - f.mean(dim=0)).norm(dim=1)
            ranked = distance.argsort(stable=True)  # ties to the lowest index
            self.active[c] = new[c][ranked[: q[c]].to(new[c].device)]
        for c in self.active:
            self.active[c] = self.active[c][: q[c]]  # prefix truncation; the rest is dropped


class Reservoir(Memory):
    """A uniform sample of at most M of every training item seen so far, whatever its class (Vitter's
    Algorithm R, fed at every task boundary). Class-agnostic: a class may keep no exemplar, so NME cannot
    read it out (readout=head). Beyond the paper: the worked example of docs/extending.md,
    `--set memory=reservoir`."""

    def __init__(self, M: int, generator: torch.Generator) -> None:
        super().__init__(M, generator)
        self.slots: list[tuple[int, int]] = []  # (class, item) per slot, at most M
        self.seen = 0  # n: items offered so far

    def refresh(self, new: dict[int, Tensor], embed: Embed) -> None:
        offered = [(c, item) for c, items in new.items() for item in items.tolist()]
        draws = torch.rand(len(offered), dtype=torch.float64, generator=self.generator).tolist()
        for (c, item), u in zip(offered, draws, strict=True):
            self.seen += 1
            if len(self.slots) < self.M:
                self.slots.append((c, item))
            elif (j := int(u * self.seen)) < self.M:  # item n stays with probability M / n
                self.slots[j] = (c, item)
        kept: dict[int, list[int]] = {}
        for c, item in self.slots:
            kept.setdefault(c, []).append(item)
        device = next(iter(new.values())).device
        self.active = {c: torch.tensor(kept[c], dtype=torch.long, device=device) for c in sorted(kept)}

    def state(self) -> dict:
        return {**super().state(), "slots": torch.tensor(self.slots, dtype=torch.long), "seen": self.seen}

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        self.slots = [(c, item) for c, item in state["slots"].tolist()]
        self.seen = state["seen"]


def make_memory(cfg: Config, generator: torch.Generator) -> Memory:
    """The run's memory policy (components.POLICIES[cfg.memory]), drawing its random choices from `generator`.

    Built with the settings its entry declares and nothing else: M (the profile's budget) and its own. A policy
    that stores exemplars also declares b, which its run reads where the replay draws from what it stores
    (train.draw_replay, b per step), not in its class.
    """
    policy = POLICIES[cfg.memory]
    own = {key: getattr(cfg, key) for key in policy.reads if key not in ("M", "b")}
    return globals()[policy.cls](cfg.budget, generator, **own)
