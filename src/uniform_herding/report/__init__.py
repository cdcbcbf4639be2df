"""report: `uh report`: the paper's tables and the one-page summary with the checker's verdicts (report.py), and
the figures (figures.py).

May import verdict/, runs/, method/ and data/. Imported only by the top-level cli.py (`uh report`). The layers
are checked by import-linter (pyproject.toml, [tool.importlinter]).
"""
