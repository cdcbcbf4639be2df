"""Quota rule, herding against a brute-force reference, and the memory policies' invariants."""

import itertools
import typing

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from uniform_herding.cli import main
from uniform_herding.config import Config, resolve
from uniform_herding.memory import (
    POLICIES,
    ClosestToMean,
    ICaRL,
    Memory,
    StaticBank,
    UniformHerding,
    herd,
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
    for memory in [ICaRL(60, torch.Generator()), StaticBank(60, torch.Generator()),
                   UniformHerding(60, torch.Generator(), 3, "herding")]:
        for _ in run_policy(memory):  # after every task, not only the last
            for a, b in itertools.combinations(memory.active, 2):
                assert not set(memory.active[a].tolist()) & set(memory.active[b].tolist())


# --- the runs beyond the paper (issue 17), each built from its config as a run builds it -------------


def drifting_stream(memory: Memory, n_tasks: int = 4, per_task: int = 3, per_class: int = 40, d: int = 5):
    """Like run_policy, but the representation changes after every task (new random features), as a
    trained backbone's does; yields (t, C, items, the features used at this boundary)."""
    gen = torch.Generator().manual_seed(0)
    items = torch.arange(n_tasks * per_task * per_class).split(per_class)
    for t in range(n_tasks):
        feats = torch.randn(n_tasks * per_task * per_class, d, generator=gen)
        memory.refresh({c: items[c] for c in range(t * per_task, (t + 1) * per_task)}, embed_fn(feats))
        yield t, (t + 1) * per_task, items, feats


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


def test_every_memory_name_has_a_policy():
    assert list(POLICIES) == list(typing.get_args(typing.get_type_hints(Config)["memory"]))
