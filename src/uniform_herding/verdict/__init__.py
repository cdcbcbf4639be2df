"""verdict: from results to `uh check`'s verdict: the mean and std over seeds (aggregate.py), the decision rules
on plain numbers (decide.py), the comparison with the expected set, the claims and the one verdict (check.py),
and the verdict's error rates (oc.py).

May import runs/, method/ and data/. Imported by report/ and the top-level cli.py and doctor.py. The layers are
checked by import-linter (pyproject.toml, [tool.importlinter]).
"""
