"""The `uh` command itself: what it costs to start."""

import subprocess
import sys


def test_the_cli_starts_without_torch():
    """`uh list`, `uh check` and `uh aggregate` need no model: importing torch (and torchvision) would
    add seconds to every command. Only `uh run` and `uh data` import it, when they run."""
    code = "import sys, uniform_herding.cli; print(sorted({'torch', 'torchvision', 'lightning'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
