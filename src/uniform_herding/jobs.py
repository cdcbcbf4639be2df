"""Several (run ID, seed) pairs at once, one `uh run` process each (`uh run --jobs N`).

Why processes: a run's result must not depend on what runs beside it. Each child is the same
`uh run RUN --seed S` a user would type, with its own random state, lock and checkpoint, and on
the CPU its own fixed thread count, so N at once give the same result.json files as one at a time.
On one GPU, N seeds share the device when a single run leaves it under-used (not measured yet).

The parent only schedules: it starts at most N children, passes their output through line by
line, starts nothing new after a failure, and forwards SIGTERM/SIGINT so that every child keeps its
checkpoint; it then exits with 128 + the signal number like a single run.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import IO

POLL_S = 0.2


def child_command(run_id: str, seed: int, options: list[str]) -> list[str]:
    """The `uh run` command line of one pair; `options` are the parent's --profile, --data-dir, ..."""
    return [sys.executable, "-m", "uniform_herding", "run", run_id, "--seed", str(seed), *options]


def _pump(stream: IO[str], echo: Callable[[str], None]) -> None:
    for line in stream:
        echo(line.rstrip("\n"))


def _status(returncode: int) -> int:
    """A child's exit status as a shell reports it (killed by signal s: 128 + s)."""
    return 128 - returncode if returncode < 0 else returncode


def run_all(commands: list[list[str]], jobs: int, echo: Callable[[str], None]) -> int:
    """Run `commands` with at most `jobs` at once; 0, the first failure's status, or 128 + a signal."""
    pending, running = list(commands), {}
    failed, stopped = 0, 0

    def forward(signum: int, frame: object) -> None:
        nonlocal stopped
        stopped = signum
        for child in list(running):
            child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        while running or (pending and not failed and not stopped):
            while pending and len(running) < jobs and not failed and not stopped:
                child = subprocess.Popen(
                    pending.pop(0), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
                )  # own session: a terminal's Ctrl-C reaches the children once, through `forward`
                running[child] = threading.Thread(target=_pump, args=(child.stdout, echo))
                running[child].start()
            time.sleep(POLL_S)
            for child in [c for c in running if c.poll() is not None]:
                running.pop(child).join()
                failed = failed or (0 if stopped else _status(child.returncode))
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 128 + stopped if stopped else failed
