"""A Slurm job's process: submitit's own entry point, then an exit that skips the interpreter's teardown.

When the job's callable has returned, submitit has written its result and the stage its record; what is
left is Python tearing down every module it imported, which took 0.5-1 s for the gate's imports and
2.5-5 s once torch was imported (measured on the loaded 2-core test machine), and every dependant job
waits for that exit. So this runs submitit's `submitit_main`, then the exit handlers (`atexit`) and the
joins of non-daemon threads a normal exit runs, flushes, and leaves with `os._exit` and the exit code a
normal exit would give: 0, the code of a `SystemExit` (the gate's 3, submitit's requeue exit), or 1
after the traceback of any other exception.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import traceback


def main() -> None:
    from submitit.core.submission import submitit_main

    code = 0
    try:
        submitit_main()
    except SystemExit as exc:
        code = exit_code(exc.code)
    except BaseException:  # noqa: BLE001 - printed as the interpreter would, then exit 1
        traceback.print_exc()
        code = 1
    os._exit(finish(code))


def exit_code(code: object) -> int:
    """What the interpreter makes of `SystemExit(code)`: None is 0, an int is itself, else 1 (printed)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def finish(code: int) -> int:
    """A normal exit's work that matters to the job's outputs: threads joined, atexit run, logs flushed."""
    main_thread = threading.main_thread()
    for thread in threading.enumerate():
        if thread is not main_thread and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    return code & 0xFF


if __name__ == "__main__":
    main()
