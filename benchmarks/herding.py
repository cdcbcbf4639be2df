"""Herding's selection loop at the paper's shapes: every class alone against the classes batched by size.

For each task of a paper-size B3 seed (estimate.herd_batches: M = 2,000, rho = 3, 450 training images per class,
512-d features), one refresh's herding on random features, timed both ways on one device (memory.herd_classes,
together=False: the loop per class a CPU runs; together=True: the classes with as many candidates at once, as a GPU
runs them). Prints the loop's steps and seconds per task and in all, and whether both chose the same exemplars
(exit 1 where they did not).

    python benchmarks/herding.py                 # the GPU if there is one, else the CPU
    python benchmarks/herding.py --device cpu --tasks 0 9
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from uniform_herding.catalogue import images_per_class, resolve
from uniform_herding.estimate import herd_batches, old_pools
from uniform_herding.method.memory import herd_classes, quotas

D = 512  # ResNet-18's feature width
HEADER = ("task", "classes", "steps alone", "steps batched", "seconds alone", "seconds batched", "same")
HEADER_SUMS = ("steps_alone", "steps_batched", "seconds_alone", "seconds_batched")
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


def refresh_row(t: int, device: torch.device, gen: torch.Generator) -> dict:
    """One refresh of task t herded both ways: its steps, seconds and whether the orders are the same."""
    sizes, q = refresh_shapes(t)
    feats = [torch.randn(n, D, device=device, generator=gen) for n in sizes]
    herd_classes(feats[:2], q[:2])  # warm-up
    alone, alone_s = timed(feats, q, together=False)
    batched, batched_s = timed(feats, q, together=True)
    return {
        "task": t,
        "classes": len(sizes),
        "steps_alone": sum(s for s, _ in herd_batches(B3, t, False)),
        "steps_batched": sum(s for s, _ in herd_batches(B3, t, True)),
        "seconds_alone": round(alone_s, 4),
        "seconds_batched": round(batched_s, 4),
        "same": all(torch.equal(a, b) for a, b in zip(alone, batched, strict=True)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tasks", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--json", type=Path, help="also write the rows here (benchmarks/gpu-acceptance reads them)")
    args = parser.parse_args()
    device = torch.device(args.device)
    gen = torch.Generator(device).manual_seed(0)
    print(f"device {device}: B3 at paper size, one refresh per task, {D}-d features")
    print("task  classes  steps alone  steps batched  seconds alone  seconds batched  same")
    rows = []
    for t in args.tasks:
        rows.append(row := refresh_row(t, device, gen))
        print("  ".join(f"{row[k]!s:>{len(h)}}" for k, h in zip(row, HEADER, strict=True)))
    totals = {k: round(sum(row[k] for row in rows), 4) for k in HEADER_SUMS}
    print(
        f"all   {'':>7}  " + "  ".join(f"{totals[k]:>{len(h)}}" for k, h in zip(HEADER_SUMS, HEADER[2:6], strict=True))
    )
    if args.json:
        args.json.write_text(json.dumps({"device": str(device), "rows": rows, "totals": totals}, indent=1))
    sys.exit(0 if all(row["same"] for row in rows) else 1)


if __name__ == "__main__":
    main()
