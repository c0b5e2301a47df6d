"""Leaving a process that used the Temporal SDK without a crash at interpreter exit.

The SDK core runs on Tokio threads that can outlive Python's event loop; when
one of them touches the interpreter while it is finalizing, CPython aborts
with "Fatal Python error: PyGILState_Release: thread state ... must be
current when releasing" (temporalio/sdk-python#300, still open). Seen here
about one time in four when ``remediate worker`` stopped on SIGINT after a
clean drain: exit status -6 instead of 0. The commands therefore end with
:func:`exit_now`, which flushes what Python would flush and skips the
finalization those threads trip over.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import NoReturn


def exit_now(code: int) -> NoReturn:
    """Flush logs and standard streams, then end the process with ``code``.

    Everything a command owns (servers, child processes, temporary
    directories) must already be closed by its own ``with`` blocks: atexit
    handlers do not run.

    Args:
        code: The process exit status.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        # Closed, or a broken pipe: nothing more can be written anyway.
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def exit_status(code: object) -> int:
    """The exit status ``sys.exit(code)`` would give (printing a message code)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1
