"""runs: one run and many: the task loop of one run ID and seed (run.py), what lets it survive kills and full
disks (durability.py), the result files (results.py), the device (devices.py), many runs as jobs (executor.py),
their status (status.py), the fp16 self-test (selftest.py), and what a command shows its reader while it works and
when it prints (terminal.py).

May import catalogue/, method/ and data/. Imported by verdict/, report/ and the top-level sweep.py, launch.py,
doctor.py, progress.py and chain.py. The layers are checked by import-linter (pyproject.toml, [tool.importlinter]).
"""
