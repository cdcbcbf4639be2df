"""evidence: a re-run as evidence that travels: written as one zip with every file's SHA-256 (`uh bundle`:
bundle.py), and on the receiver's side refused when hostile, verified and extracted, then checked (`uh check --bundle`:
verify.py); each run's last row of R evaluated again from its final state (`uh check --bundle --recompute`:
recompute.py).

May import runs/, catalogue/, method/ and data/; nothing of verdict/. Imported by verdict/ (`uh check --bundle`) and
design/ (`uh stacks` reads a bundle as a stack); commands/ holds `uh bundle`. The layers are checked by import-linter
(pyproject.toml, [tool.importlinter]).
"""
