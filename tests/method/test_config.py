"""The paper's protocol as one frozen dataclass: B3's values as the defaults, the derived sizes, and no import of the
package (the run catalogue builds on it, never the reverse)."""

from __future__ import annotations

import ast
from pathlib import Path

from uniform_herding.method.config import Config


def test_the_paper_protocol_sizes():
    cfg = Config()
    sizes = (cfg.budget, cfg.retrieval, cfg.rho, cfg.n_tasks, cfg.classes_per_task, cfg.width)
    assert sizes == (2000, 64, 3, 10, 10, 64)
    assert Config(memory="none").budget == Config(memory="none").retrieval == 0
    assert Config(M=500, memory_scale=0.025).budget == 12 and Config(b=32, retrieval_scale=0.25).retrieval == 8


def test_config_imports_nothing_of_the_package():
    """One-way: catalogue/ (and components.py) build on config.py, never the reverse."""
    tree = ast.parse((Path(__file__).parents[2] / "src" / "uniform_herding" / "method" / "config.py").read_text())
    modules = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    modules |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in modules if m.startswith("uniform_herding")}, modules
