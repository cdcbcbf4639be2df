"""Quota rule, herding against a brute-force reference, the memory policies' invariants, and the contract every
registered policy keeps (components.POLICIES: a new policy is tested by these without a line of its own)."""

import dataclasses
import inspect
import io
import itertools

import numpy as np
import pytest
import scipy.stats
import torch
from click.testing import CliRunner

from uniform_herding.catalogue import level, resolve
from uniform_herding.cli import main
from uniform_herding.method import config
from uniform_herding.method import memory as memory_module
from uniform_herding.method.components import POLICIES
from uniform_herding.method.memory import (
    ClosestToMean,
    ICaRL,
    Memory,
    Reservoir,
    StaticBank,
    UniformHerding,
    herd,
    herd_classes,
    make_memory,
    quotas,
)

# The paper's appendix table 'Per-class active exemplar quota after each task' (tab:app-quotas).
PAPER_QUOTAS = {
    500: "50 25 16-17 12-13 10 8-9 7-8 6-7 5-6 5",
    2000: "200 100 66-67 50 40 33-34 28-29 25 22-23 20",
    4000: "400 200 133-134 100 80 66-67 57-58 50 44-45 40",
}


@pytest.mark.parametrize("M", PAPER_QUOTAS)
def test_quota_table_matches_paper(M):
    out = CliRunner().invoke(main, ["quotas", "--budget", str(M)])
    assert out.exit_code == 0, out.output
    assert out.output.splitlines()[1].split()[1:] == PAPER_QUOTAS[M].split()


@pytest.mark.parametrize("M,C", [(2000, 30), (500, 70), (7, 3), (2, 5)])
def test_quotas_sum_to_budget_remainder_to_lowest_labels(M, C):
    q = quotas(M, C)
    assert sum(q) == M and len(q) == C
    assert q == sorted(q, reverse=True) and max(q) - min(q) <= 1


def brute_force_herding(f: np.ndarray, k: int) -> list[int]:
    """The paper's equation written out literally, in plain Python."""
    mu = f.mean(axis=0)
    S = np.zeros_like(mu)
    chosen: list[int] = []
    for j in range(1, k + 1):
        best, best_d = None, None
        for i in range(len(f)):
            if i in chosen:
                continue
            d = float(((f[i] - (j * mu - S)) ** 2).sum())
            if best_d is None or d < best_d:
                best, best_d = i, d
        chosen.append(best)
        S = S + f[best]
    return chosen


@pytest.mark.parametrize("seed", range(5))
def test_herding_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    f = rng.normal(size=(23, 6)) * rng.uniform(0.5, 3, size=6)
    assert herd(torch.tensor(f, dtype=torch.float32), 15).tolist() == brute_force_herding(
        f.astype(np.float32).astype(np.float64), 15
    )


def test_herding_hand_computed_1d():
    # mu = 2. k=1: target 2 -> ties between 1 and 3 go to 1; k=2: target 2 -> 3;
    # k=3: target 2 -> 0 and 2 tie at distance 4 -> 0; k=4: 2 is left.
    f = torch.tensor([[0.0], [2.0], [4.0], [2.0]])
    assert herd(f, 4).tolist() == [1, 3, 0, 2]


def test_herding_takes_all_when_fewer_candidates_than_quota():
    f = torch.randn(4, 3)
    assert sorted(herd(f, 10).tolist()) == [0, 1, 2, 3]


def herd_one_class(features: torch.Tensor, k: int) -> torch.Tensor:
    """The loop of one class at a time that herd_classes replaced (the release's herd until it batched classes)."""
    f = features.double()
    mu, taken, order = f.mean(dim=0), torch.zeros(len(f), dtype=torch.bool), []
    S = torch.zeros_like(mu)
    for j in range(1, min(k, len(f)) + 1):
        dist = ((f - (j * mu - S)) ** 2).sum(dim=1).masked_fill(taken, float("inf"))
        i = dist.argmin().view(1)
        taken.index_fill_(0, i, True)
        S += f.index_select(0, i).squeeze(0)
        order.append(i)
    return torch.cat(order) if order else torch.zeros(0, dtype=torch.long)


@pytest.mark.parametrize("seed", range(3))
def test_herding_classes_at_once_picks_bitwise_what_each_class_picks_alone(seed):
    """A refresh at the paper's shapes: 100 classes, 512-d features, pools of rho * q = 60 beside 10 new classes'
    500-image streams, q of 20, and pools of 15 (M = 500); and near-ties (duplicated rows, rows a rounding apart)
    that a different summation order would break otherwise."""
    g = torch.Generator().manual_seed(seed)
    groups = [torch.randn(60, 512, generator=g) for _ in range(90)] + [torch.randn(500, 512, generator=g)] * 10
    groups[3] = torch.cat([groups[3][:30], groups[3][:30]])  # every row twice: ties all along
    groups[4] = groups[4] + torch.tensor([0.0, 1e-7]).repeat(30)[:, None]  # rows a rounding apart
    groups += [torch.randn(15, 512, generator=g) for _ in range(4)]  # the M = 500 sweep's small pools: alone
    ks = [*quotas(2000, 100), 5, 5, 5, 5]
    ks[5] = 70  # more than its 60 candidates: all of them
    reference = [herd_one_class(f, k).tolist() for f, k in zip(groups, ks, strict=True)]
    assert [o.tolist() for o in herd_classes(groups, ks, together=True)] == reference  # as a GPU herds them
    assert [o.tolist() for o in herd_classes(groups, ks, together=False)] == reference  # as a CPU herds them


def embed_fn(table: torch.Tensor):
    return lambda items: table[items]


def run_policy(memory: Memory, n_tasks: int = 4, per_task: int = 3, per_class: int = 40, d: int = 5):
    """Drive a policy through a tiny stream; yield its state after every task."""
    gen = torch.Generator().manual_seed(0)
    feats = torch.randn(n_tasks * per_task * per_class, d, generator=gen)
    items = torch.arange(len(feats)).split(per_class)
    for t in range(n_tasks):
        new = {c: items[c] for c in range(t * per_task, (t + 1) * per_task)}
        memory.refresh(new, embed_fn(feats))
        yield t, (t + 1) * per_task, items


@pytest.mark.parametrize("selection", ["herding", "random"])
def test_uniform_herding_invariants(selection):
    rho, M = 3, 60
    memory = UniformHerding(M, torch.Generator().manual_seed(1), rho, selection)
    for _, C, items in run_policy(memory):
        q = quotas(M, C)
        assert sorted(memory.active) == list(range(C))
        for c in range(C):
            active, pool = memory.active[c].tolist(), memory.pool[c].tolist()
            assert len(active) == q[c] and len(set(active)) == len(active)
            assert set(active) <= set(pool) and len(pool) <= rho * q[c] and len(set(pool)) == len(pool)
            assert set(pool) <= set(items[c].tolist())  # never another class's item
        assert memory.replay_items().numel() == M


def test_uniform_herding_reselects_old_classes():
    memory = UniformHerding(30, torch.Generator().manual_seed(1), 3, "herding")
    states = [{c: a.clone() for c, a in memory.active.items()} for _ in run_policy(memory)]
    # class 0's active set after task 1 is not just a prefix of its task-0 set: it was re-herded.
    first, second = states[0][0].tolist(), states[1][0].tolist()
    assert len(second) < len(first) and second != first[: len(second)]


def test_icarl_keeps_prefixes_of_arrival_ranking():
    M = 60
    memory = ICaRL(M, torch.Generator().manual_seed(1))
    ranking = {}
    for _, C, _ in run_policy(memory):
        q = quotas(M, C)
        for c in range(C):
            ranking.setdefault(c, memory.active[c].tolist())
            assert memory.active[c].tolist() == ranking[c][: q[c]]
        assert memory.pool_size() == 0 and memory.replay_items().numel() == M


def test_static_bank_shrinks_by_removal_only():
    M = 60
    memory = StaticBank(M, torch.Generator().manual_seed(1))
    previous: dict[int, set] = {}
    for _, C, _ in run_policy(memory):
        q = quotas(M, C)
        for c in range(C):
            now = set(memory.active[c].tolist())
            assert len(now) == q[c] and len(memory.active[c]) == q[c]
            assert c not in previous or now <= previous[c]
            previous[c] = now


def test_no_replay_memory_is_empty():
    memory = Memory(0, torch.Generator())
    for _ in run_policy(memory):
        assert memory.replay_items() is None and memory.pool_size() == 0


def test_no_item_shared_between_classes_in_any_policy():
    for memory in [
        ICaRL(60, torch.Generator()),
        StaticBank(60, torch.Generator()),
        UniformHerding(60, torch.Generator(), 3, "herding"),
    ]:
        for _ in run_policy(memory):  # after every task, not only the last
            for a, b in itertools.combinations(memory.active, 2):
                assert not set(memory.active[a].tolist()) & set(memory.active[b].tolist())


# --- the runs beyond the paper (issue 17), each built from its config as a run builds it -------------


def drifting_tasks(n_tasks: int = 4, per_task: int = 3, per_class: int = 40, d: int = 5):
    """A tiny stream whose representation changes after every task (new random features), as a trained backbone's
    does: (each class's items, [(the task's new classes, the features at its boundary)] per task)."""
    gen = torch.Generator().manual_seed(0)
    items = torch.arange(n_tasks * per_task * per_class).split(per_class)
    tasks = [
        (
            {c: items[c] for c in range(t * per_task, (t + 1) * per_task)},
            torch.randn(n_tasks * per_task * per_class, d, generator=gen),
        )
        for t in range(n_tasks)
    ]
    return items, tasks


def drifting_stream(memory: Memory, **sizes: int):
    """Feed `memory` the drifting tasks; yields (t, C, items, the features used at this boundary) after each."""
    items, tasks = drifting_tasks(**sizes)
    for t, (new, feats) in enumerate(tasks):
        memory.refresh(new, embed_fn(feats))
        yield t, sum(len(n) for n, _ in tasks[: t + 1]), items, feats


def assert_prefixes_of_arrival_ranking(run_id: str, kind: type, rank) -> Memory:
    """`run_id`'s policy keeps of every class a prefix of `rank(features, q_c)`, ranked once on the class's arrival
    in that task's representation over its whole stream; it stores exactly M and no pool. Returns it at the end."""
    cfg = resolve(run_id, "smoke")
    memory = make_memory(cfg, torch.Generator().manual_seed(1))
    assert isinstance(memory, kind)
    arrival: dict[int, list[int]] = {}
    for _, C, items, feats in drifting_stream(memory):
        q = quotas(cfg.budget, C)
        for c in range(C):
            if c not in arrival:  # ranked once, on arrival, over the class's whole stream
                arrival[c] = items[c][rank(feats[items[c]], q[c])].tolist()
            assert memory.active[c].tolist() == arrival[c][: q[c]]  # later: only the prefix
        assert memory.pool_size() == 0 and memory.replay_items().numel() == cfg.budget
    return memory


def test_r1_keeps_prefixes_of_the_ranking_herded_once_from_the_full_stream_on_arrival():
    assert_prefixes_of_arrival_ranking("r1", ICaRL, herd)


def test_r2_stores_exactly_the_quotas_and_re_herds_each_class_among_its_own_exemplars():
    cfg = resolve("r2", "smoke")
    memory = make_memory(cfg, torch.Generator().manual_seed(1))
    assert isinstance(memory, UniformHerding) and memory.rho == 1
    previous: dict[int, torch.Tensor] = {}
    for _, C, _, feats in drifting_stream(memory):
        q = quotas(cfg.budget, C)
        for c in range(C):
            assert torch.equal(memory.pool[c], memory.active[c]) and len(memory.active[c]) == q[c]  # no extra pool
            if c in previous:  # re-herded in the current representation among the exemplars it kept
                assert memory.active[c].tolist() == previous[c][herd(feats[previous[c]], q[c])].tolist()
        assert memory.pool_size() == memory.replay_items().numel() == cfg.budget  # stores M, as r1
        previous = {c: a.clone() for c, a in memory.active.items()}
    # re-herding is not prefix truncation: some class's set differs from its r1 prefix
    r1 = make_memory(resolve("r1", "smoke"), torch.Generator().manual_seed(1))
    for _ in drifting_stream(r1):
        pass
    assert any(set(r1.active[c].tolist()) != set(memory.active[c].tolist()) for c in memory.active)


def test_r3_refreshes_from_pools_of_at_most_rho_q():
    cfg = resolve("r3", "smoke")
    memory = make_memory(cfg, torch.Generator().manual_seed(1))
    assert isinstance(memory, UniformHerding) and (memory.rho, memory.selection) == (3, "herding")
    largest = 0
    for _, C, items, _ in drifting_stream(memory):
        q = quotas(cfg.budget, C)
        for c in range(C):
            pool = memory.pool[c].tolist()
            assert len(pool) <= cfg.rho * q[c] and set(memory.active[c].tolist()) <= set(pool) <= set(items[c].tolist())
            largest = max(largest, len(pool) - q[c])
        assert memory.replay_items().numel() == cfg.budget
    assert largest > 0  # r3 does keep candidates beyond its active sets (unlike r1 and r2)


# --- the worked example of a new policy (docs/extending.md) ------------------------------------------


def closest_to_mean_by_hand(f: np.ndarray, k: int) -> list[int]:
    """The k rows nearest the rows' mean, nearest first, ties to the lowest index: written out literally."""
    mu = f.mean(axis=0)
    distance = [float(np.sqrt(((row - mu) ** 2).sum())) for row in f]
    return sorted(range(len(f)), key=lambda i: (distance[i], i))[:k]


def test_closest_to_mean_keeps_prefixes_of_the_nearest_to_the_mean_ranked_on_arrival():
    """`--set memory=closest_to_mean`: on arrival the q_c items nearest mu_c in that task's representation,
    later the prefix of that ranking; the checkpoint's state() restores it."""
    memory = assert_prefixes_of_arrival_ranking(
        "B3+memory=closest_to_mean", ClosestToMean, lambda f, q: closest_to_mean_by_hand(f.double().numpy(), q)
    )
    restored = make_memory(resolve("B3+memory=closest_to_mean", "smoke"), torch.Generator())
    restored.load_state(memory.state())
    assert all(torch.equal(restored.active[c], memory.active[c]) for c in memory.active)


# --- the contract of every registered policy ----------------------------------------------------------------


def policy_config(name: str) -> config.Config:
    """B3's smoke config with memory=`name` (M = 50, or 0 for none), built by hand: every policy, whatever it reads."""
    return dataclasses.replace(resolve("B3", "smoke"), memory=name)


@pytest.mark.parametrize("name", list(POLICIES))
def test_every_policy_is_its_class_built_from_the_settings_it_declares(name):
    """The entry names a Memory subclass in memory.py that takes M, the generator and the settings the entry declares
    beyond M and b (so it can read no other); a policy stores exemplars (M > 0) exactly when it declares M and b."""
    policy, cls = POLICIES[name], getattr(memory_module, POLICIES[name].cls)
    assert issubclass(cls, Memory)
    own = [key for key in policy.reads if key not in ("M", "b")]
    assert list(inspect.signature(cls).parameters) == ["M", "generator", *own]
    assert ("M" in policy.reads) == ("b" in policy.reads) == (policy_config(name).budget > 0)
    assert type(make_memory(policy_config(name), torch.Generator())) is cls


def test_every_policy_class_is_registered():
    classes = {c for c in vars(memory_module).values() if inspect.isclass(c) and issubclass(c, Memory)}
    assert classes == {getattr(memory_module, policy.cls) for policy in POLICIES.values()}


@pytest.mark.parametrize("name", list(POLICIES))
def test_every_policy_keeps_the_memory_contract(name):
    """After every task: exemplars of seen classes only, each item of its own class's stream, no item twice, at most
    M in all, and replay draws from exactly them; a policy that declares per_class keeps every seen class (M >= C
    here), one that declares quotas keeps q_c of each."""
    cfg, policy = policy_config(name), POLICIES[name]
    memory = make_memory(cfg, torch.Generator().manual_seed(1))
    for _, C, items, _ in drifting_stream(memory):
        held = {c: a.tolist() for c, a in memory.active.items()}
        assert set(held) <= set(range(C)) and all(set(held[c]) <= set(items[c].tolist()) for c in held)
        kept = [item for c in held for item in held[c]]
        assert len(kept) == len(set(kept)) <= cfg.budget
        replay = memory.replay_items()
        assert sorted(replay.tolist() if replay is not None else []) == sorted(kept)
        if policy.per_class:
            assert cfg.budget >= C and all(held.get(c) for c in range(C))
        if policy.quotas:
            assert [len(held.get(c, [])) for c in range(C)] == quotas(cfg.budget, C)


@pytest.mark.parametrize("name", list(POLICIES))
def test_every_policy_resumes_from_its_checkpointed_state(name):
    """state() through torch.save and a weights_only load (as durability.Checkpoint stores it), with the generator's
    state, then the remaining tasks: the same memory as a policy that never stopped."""
    cfg = policy_config(name)
    whole = make_memory(cfg, torch.Generator().manual_seed(1))
    _, tasks = drifting_tasks()
    for new, feats in tasks:
        whole.refresh(new, embed_fn(feats))
    gen = torch.Generator().manual_seed(1)
    first = make_memory(cfg, gen)
    for new, feats in tasks[:2]:
        first.refresh(new, embed_fn(feats))
    buffer = io.BytesIO()
    torch.save({"memory": first.state(), "generator": gen.get_state()}, buffer)
    saved = torch.load(io.BytesIO(buffer.getvalue()), weights_only=True)
    resumed = make_memory(cfg, torch.Generator())
    resumed.generator.set_state(saved["generator"])
    resumed.load_state(saved["memory"])
    for new, feats in tasks[2:]:
        resumed.refresh(new, embed_fn(feats))
    assert sorted(resumed.active) == sorted(whole.active)
    assert all(torch.equal(resumed.active[c], whole.active[c]) for c in whole.active)
    assert resumed.pool_size() == whole.pool_size()


# --- the worked example of a class-agnostic policy (docs/extending.md) ---------------------------------------


def test_reservoir_keeps_a_uniform_sample_of_every_item_seen():
    """After n items, each of them is kept with probability min(M, n) / n, whatever its class or task. Decision rule:
    over 2000 seeds, the number of seeds that kept each item is tested against equal counts by scipy's chi-square
    test, passing at p >= 0.001 after every task (the counts of a sample without replacement spread less than the
    test assumes, so it errs towards passing a fair sample; a reservoir that favours recent items fails by far)."""
    M, (_, tasks) = 12, drifting_tasks(n_tasks=4, per_task=3, per_class=10)
    counts = np.zeros((len(tasks), 120), dtype=int)
    for seed in range(2000):
        reservoir = Reservoir(M, torch.Generator().manual_seed(seed))
        for t, (new, feats) in enumerate(tasks):
            reservoir.refresh(new, embed_fn(feats))
            kept = reservoir.replay_items()
            assert len(kept) == min(M, 30 * (t + 1)) and len(set(kept.tolist())) == len(kept)
            counts[t, kept] += 1
    for t in range(len(tasks)):
        seen = counts[t, : 30 * (t + 1)]
        assert scipy.stats.chisquare(seen).pvalue >= 0.001, (t, seen)
        assert not counts[t, 30 * (t + 1) :].any()  # nothing not yet seen


def test_reservoir_may_leave_a_seen_class_without_an_exemplar():
    """Why it declares per_class=False, so that readout=nme is refused with it: in the smoke profile (M = 50 of
    1000 items, 10 classes), some seeds end with a class that has no exemplar at all."""
    cfg = resolve("B2+memory=reservoir", "smoke")
    empty = 0
    for seed in range(200):
        reservoir = make_memory(cfg, torch.Generator().manual_seed(seed))
        for t in range(cfg.n_tasks):
            new = {c: torch.arange(c * 100, (c + 1) * 100) for c in range(2 * t, 2 * t + 2)}
            reservoir.refresh(new, embed_fn(torch.zeros(1000, 1)))
        empty += len(reservoir.active) < cfg.n_classes
    assert 0 < empty < 40, empty  # each class is empty with probability C(900, 50) / C(1000, 50) = 0.45%


# --- where a setting levels off (variants.level: a value beyond it is refused as the same run) ---------------


def memory_after_every_task(cfg: config.Config) -> list:
    """What `cfg`'s memory holds after every task of the drifting stream: active sets and candidate pool size."""
    memory = make_memory(cfg, torch.Generator().manual_seed(1))
    return [
        ({c: a.tolist() for c, a in memory.active.items()}, memory.pool_size()) for (*_,) in drifting_stream(memory)
    ]


def stream_config(name: str, **changes) -> config.Config:
    """A config of the drifting stream's sizes (4 tasks x 3 classes of 40 items), M unscaled, memory=`name`."""
    return dataclasses.replace(
        resolve("B3", "smoke"),
        memory=name,
        n_tasks=4,
        classes_per_task=3,
        train_per_class=40,
        memory_scale=1.0,
        **changes,
    )


@pytest.mark.parametrize("name", [name for name, policy in POLICIES.items() if "M" in policy.reads])
def test_every_policy_keeps_the_same_memory_beyond_the_budget_level_says(name):
    """A budget of every training item of the stream (level: 12 x 40 = 480) keeps them all, whatever the policy, so
    M = 480 and M = 505 are one run; one item less is another."""
    ceiling = level("M", stream_config(name, M=10**6))
    assert ceiling == 480
    at, beyond, below = (
        memory_after_every_task(stream_config(name, M=m)) for m in (ceiling, ceiling + 25, ceiling - 1)
    )
    assert at == beyond and at != below


def test_uniform_herding_keeps_the_same_memory_beyond_the_rho_level_says():
    """With M = 60 of 12 classes, q_c >= 5 at every task: pools of 8 * 5 hold all 40 items of a class, so rho = 8 and
    rho = 11 are one run (the same pools, the same exemplars); rho = 7 is another."""
    ceiling = level("rho", stream_config("uniform_herding", M=60, rho=10**6))
    assert ceiling == 8
    at, beyond, below = (
        memory_after_every_task(stream_config("uniform_herding", M=60, rho=r))
        for r in (ceiling, ceiling + 3, ceiling - 1)
    )
    assert at == beyond and at != below
