"""Herding's selection loop at the paper's shapes: every class alone against the classes batched by size.

For each task of a paper-size B3 seed (estimate.herd_batches: M = 2,000, rho = 3, 450 training images per class,
512-d features), one refresh's herding on random features, timed both ways on one device (memory.herd_classes,
together=False: the loop per class a CPU runs; together=True: the classes with as many candidates at once, as a GPU
runs them). Prints the loop's steps and seconds per task and in all, and whether both chose the same exemplars.

    python benchmarks/herding.py                 # the GPU if there is one, else the CPU
    python benchmarks/herding.py --device cpu --tasks 0 9
"""

from __future__ import annotations

import argparse
import time

import torch

from uniform_herding.catalogue import images_per_class, resolve
from uniform_herding.estimate import herd_batches, old_pools
from uniform_herding.method.memory import herd_classes, quotas

D = 512  # ResNet-18's feature width
B3 = resolve("B3", "paper")


def refresh_shapes(t: int) -> tuple[list[int], list[int]]:
    """(candidates, q) per class of B3's refresh after task t, old classes first (memory.UniformHerding)."""
    sizes = [*old_pools(B3, t), *[images_per_class(B3)[0]] * B3.classes_per_task]
    return sizes, quotas(B3.budget, len(sizes))


def timed(feats: list[torch.Tensor], q: list[int], together: bool) -> tuple[list[torch.Tensor], float]:
    """The orders and their seconds, the device finished (a host copy of the orders)."""
    tic = time.perf_counter()
    orders = [o.cpu() for o in herd_classes(feats, q, together)]
    return orders, time.perf_counter() - tic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tasks", type=int, nargs="+", default=list(range(10)))
    args = parser.parse_args()
    device = torch.device(args.device)
    gen = torch.Generator(device).manual_seed(0)
    print(f"device {device}: B3 at paper size, one refresh per task, {D}-d features")
    print("task  classes  steps alone  steps batched  seconds alone  seconds batched  same")
    totals = [0, 0, 0.0, 0.0]
    for t in args.tasks:
        sizes, q = refresh_shapes(t)
        feats = [torch.randn(n, D, device=device, generator=gen) for n in sizes]
        herd_classes(feats[:2], q[:2])  # warm-up
        alone, alone_s = timed(feats, q, together=False)
        batched, batched_s = timed(feats, q, together=True)
        same = all(torch.equal(a, b) for a, b in zip(alone, batched, strict=True))
        steps = [sum(s for s, _ in herd_batches(B3, t, together)) for together in (False, True)]
        print(f"{t:>4}  {len(sizes):>7}  {steps[0]:>11}  {steps[1]:>13}  {alone_s:>13.3f}  {batched_s:>15.3f}  {same}")
        totals = [totals[0] + steps[0], totals[1] + steps[1], totals[2] + alone_s, totals[3] + batched_s]
    print(f"all   {'':>7}  {totals[0]:>11}  {totals[1]:>13}  {totals[2]:>13.3f}  {totals[3]:>15.3f}")


if __name__ == "__main__":
    main()
