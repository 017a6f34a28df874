"""The search's user-facing error: a mistake in what the user gave (an argument, a file, a store), said in one line.

`python -m search` prints a UserError as one line on stderr and exits with status 2; every other exception is a bug
of the search and is reported as one line with exit status 1 (the traceback with `--debug` or CUDAL2_DEBUG=1).
"""
from __future__ import annotations


class UserError(ValueError):
    """A bad input (argument, file, store, environment variable); the message names it and says what is supported."""


def run_command(main) -> None:
    """Runs a command's `main()` (-> exit status) as a script: a UserError is one line on stderr and exit status 2."""
    import sys  # noqa: PLC0415
    try:
        raise SystemExit(main())
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
