"""report: `uh report`: the runs it reads (load.py), the paper's tables (tables.py), the paper's figures
(figures.py), the sweeps' and variants' figures (sweep_figures.py), and the one-page summary with the checker's
verdicts (summary.py).

May import verdict/, runs/, catalogue.py, method/ and data/. Imported by the top-level doctor.py and progress.py;
cli.py loads `uh report`. The layers are checked by import-linter (pyproject.toml, [tool.importlinter]).
"""
