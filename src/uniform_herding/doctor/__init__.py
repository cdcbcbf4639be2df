"""What a reviewer asks of a machine before the runs: `uh doctor`, the preflight (preflight.py: the environment, a
self-test of the GPU path, and timing.py's timings and estimates), and `uh price`, what `./reproduce.sh all` will cost
(price.py). A top-level package: it drives the layers (runs/, verdict/, report/) and no layer imports it; the
commands (commands/doctor.py, commands/price.py) import it."""
