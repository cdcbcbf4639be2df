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

from collections.abc import Callable

import torch
from torch import Tensor

from uniform_herding.method.components import POLICIES
from uniform_herding.method.config import Config

Embed = Callable[[Tensor], Tensor]  # items [n] -> raw features [n, d], eval transform


def quotas(M: int, C: int) -> list[int]:
    """q_i for internal labels i = 0..C-1: the remainder goes to the lowest labels."""
    return [M // C + (1 if i < M % C else 0) for i in range(C)]


def herd(features: Tensor, k: int) -> Tensor:
    """Greedy herding order of the first min(k, n) rows (Sec. 3.2, raw features).

    x_k = argmin_{x not yet chosen} ||f(x) - (k * mu - S_{k-1})||^2, ties to the lowest index.
    Runs in float64 so the order does not depend on the device's summation order. The chosen index
    stays a device tensor (index_fill_, index_select): indexing with a 0-d tensor would read it on the
    host, a GPU synchronisation per step.
    """
    f = features.double()  # [n, d]
    mu = f.mean(dim=0)  # [d]
    S = torch.zeros_like(mu)
    taken = torch.zeros(len(f), dtype=torch.bool, device=f.device)
    order = []
    for j in range(1, min(k, len(f)) + 1):
        dist = ((f - (j * mu - S)) ** 2).sum(dim=1).masked_fill(taken, float("inf"))  # [n]
        i = dist.argmin().view(1)  # first minimum: ties go to the lowest index
        taken.index_fill_(0, i, True)
        S += f.index_select(0, i).squeeze(0)
        order.append(i)
    return torch.cat(order) if order else torch.zeros(0, dtype=torch.long, device=f.device)


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
        feats = self._embed_all(candidates, embed) if self.selection == "herding" else None
        for c, items in candidates.items():
            if feats is not None:
                chosen = herd(feats[c], q[c]).to(items.device)
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
        for c, f in self._embed_all(new, embed).items():
            self.active[c] = new[c][herd(f, q[c]).to(new[c].device)]  # ranked list of length q_c
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
