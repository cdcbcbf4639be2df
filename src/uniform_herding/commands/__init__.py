"""The `uh` commands, one module each: each parses its options, calls one function of the library and renders
what it returns. click is imported here and in cli.py only; the library raises errors.UhError, which cli.py turns
into one line and an exit code."""
