"""The search's user-facing error: a mistake in what the user gave (an argument, a file, a store), said in one line.

`python -m search` prints a UserError as one line on stderr and exits with status 2; every other exception is a bug
of the search and is reported as one line with exit status 1 (the traceback with `--debug` or CUDAL2_DEBUG=1).
"""
from __future__ import annotations


class UserError(ValueError):
    """A bad input (argument, file, store, environment variable); the message names it and says what is supported."""
