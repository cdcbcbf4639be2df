"""report: what `uh report` writes (its command: commands/report.py): the runs it reads (load.py), the paper's tables
(tables.py), the paper's figures (figures.py) in one style (style.py), each a FigureSpec (figure_spec.py), the
sweeps' and variants' figures (sweep_figures.py), and the one-page summary with the checker's verdicts (summary.py).

May import verdict/, runs/, catalogue/, method/ and data/. Imported by the top-level doctor/ and progress.py;
cli.py loads `uh report`. The layers are checked by import-linter (pyproject.toml, [tool.importlinter]).
"""
