"""data: the CIFAR archives (archive.py): download, md5 verification, pickle parsing, synthetic archives in the
official format.

The lowest layer of the data flow: imports only errors.py (DataError is a refusal the user can mend). Imported by
method/ (stream.py), runs/, and the top-level launch.py, doctor/ and `uh data` (commands/data.py). The layers are
checked by import-linter (pyproject.toml, [tool.importlinter]).
"""
