"""Whether two results folders hold the same R, bit for bit: the check that a change to the training code
computes nothing new (docs/design.md, "Training"). Each run found under the first folder
(<RUN>/seed-<S>/result.json) is looked up in the second; R, and each task's record (epoch losses, skipped
steps, loss scale), must be equal as read from the JSON, float for float. Exit 1 on any difference.

    python benchmarks/same_r.py BEFORE_RESULTS AFTER_RESULTS
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def differences(before: Path, after: Path) -> tuple[list[str], list[str]]:
    """(lines for the runs that agree, lines for those that do not or are missing)."""
    same, different = [], []
    for path in sorted(before.glob("*/seed-*/result.json")):
        name, other = str(path.parent.relative_to(before)), after / path.relative_to(before)
        if not other.exists():
            different.append(f"{name}: no result.json under {after}")
            continue
        a, b = json.loads(path.read_text()), json.loads(other.read_text())
        records = [[t.get(k) for k in ("epoch_loss", "skipped_steps", "loss_scale")] for t in a["tasks"]]
        if a["R"] != b["R"]:
            different.append(f"{name}: R differs: {a['R']} vs {b['R']}")
        elif records != [[t.get(k) for k in ("epoch_loss", "skipped_steps", "loss_scale")] for t in b["tasks"]]:
            different.append(f"{name}: R equal, the tasks' training records differ")
        else:
            same.append(f"{name}: R identical ({len(a['R'])} rows, last row {a['R'][-1]}), task records identical")
    if not same and not different:
        different.append(f"no <RUN>/seed-<S>/result.json under {before}")
    return same, different


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    same, different = differences(args.before, args.after)
    print("\n".join(same + different))
    return 1 if different else 0


if __name__ == "__main__":
    sys.exit(main())
