"""data: the CIFAR archives (archive.py): download, md5 verification, pickle parsing, synthetic archives in the
official format.

The lowest layer: imports nothing of the package. Imported by method/ (stream.py), runs/, and the top-level
launch.py and doctor.py. The layers are checked by import-linter (pyproject.toml, [tool.importlinter]).
"""
