"""The project's own refusals. The library raises them and never imports click; the command line (cli.py) turns
each into its one line `Error: ...` on stderr and its exit code, so that bad input is 2 wherever it is found and
never 1, the code of a failed replication (docs/reproducing.md lists the codes)."""

from __future__ import annotations


class UhError(Exception):
    """Something the user can mend: the message is the whole line `uh` prints, and says what to do."""

    exit_code = 2
