"""design: the offline design of `uh check`'s procedure, run by hand, never by a check: how often the verdict errs
under stated models (`uh oc`: the simulation in simulation.py, the targets it is held to in targets.py, the run and
its printed report in oc.py; the models in worlds.py), the claims' boundaries derived anew from their registered
design (boundaries.py) and the stack offset tau measured from re-runs on several stacks (`uh stacks`: stacks.py).

May import verdict/, evidence/, runs/, catalogue/, method/ and data/. Imported by no layer; the top-level doctor/
reads the paper's T4 seconds of simulation.py (uh price), and commands/ holds `uh oc` and `uh stacks`. The layers are
checked by import-linter (pyproject.toml, [tool.importlinter]).
"""
