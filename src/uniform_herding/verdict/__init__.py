"""verdict: from results to `uh check`'s verdict: the mean and std over seeds (aggregate.py), the decision rules
on plain numbers (decide.py), the expected set and its verification (expected.py), the claims' registered boundaries
(boundaries.py), the paper's claims as data (claims.py) and their procedure replayed look by look (procedure.py),
each metric's verdict (metric_verdicts.py), each claim's, finding's and variant's (claim_verdicts.py), the one verdict
and its exit code, also on a results dir as it stands for uh status and the Slurm chain (judge.py), the printed words
(words.py) and `uh check` decided once and said (check.py). The procedure's design (uh oc, uh stacks) is
design/'s; a bundle, evidence/'s.

May import evidence/, runs/, catalogue/, method/ and data/. Imported by report/, design/ and the top-level
doctor.py, progress.py and chain.py. The layers are checked by import-linter (pyproject.toml, [tool.importlinter]).
"""
