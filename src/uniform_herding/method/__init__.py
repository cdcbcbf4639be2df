"""method: the paper's method and nothing else: the run IDs and their configuration (config.py), the components'
registries (components.py), one task in the order of the paper's Section 3 (task.py), the network (model.py), the
task stream (stream.py), training (train.py) and the engine it runs on (engine.py), the memory (memory.py), the
readouts (evaluate.py) and the metrics over R (metrics.py).

May import only data/ (stream.py reads the archives). Imported by catalogue/, runs/, verdict/, report/ and the
top-level cli.py, commands/, sweep.py, launch.py and doctor/. The layers are checked by import-linter (pyproject.toml,
[tool.importlinter]).
"""
