"""method: the paper's method, one task at a time: the run IDs and their configuration (config.py), the
components' registries (components.py), variants (variants.py), the network (model.py), the task stream
(stream.py), training (train.py), the memory (memory.py), the readouts (evaluate.py) and the metrics over R
(metrics.py).

May import only data/ (stream.py reads the archives). Imported by runs/, verdict/, report/ and the top-level
cli.py, sweep.py and doctor.py. The layers are checked by import-linter (pyproject.toml, [tool.importlinter]).
"""
