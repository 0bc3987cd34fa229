"""The project's errors: one base and the few kinds a user can meet.

Modelled on submitit's short hierarchy. Every error the user can cause is a `PreflightError`: the
entry points (`launch`, `status`, `python -m pipeline.demo`) catch the base, print its one line and
exit 2; a stage that raises an `InputError` still reaches a verdict (an `error` row, then the gate).
Everything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import errno
import re
import shutil
from pathlib import Path


class PreflightError(Exception):
    """A message that names the file or key at fault and what was expected."""

    def __init__(self, message: str, *, path: str | Path | None = None, field: str | None = None):
        super().__init__(message)
        self.path = None if path is None else str(path)
        self.field = field


class InputError(PreflightError):
    """Bad user input (a file, a field in it, a value): names the file, the field and what was expected."""


class FrameTimeError(InputError):
    """A row's timestamp with no video frame within the loader's tolerance: a fault of the data (the
    frame rows record it as a mismatch), not a file the check could not read."""


class ConfigError(PreflightError):
    """A config value that would fail on the cluster; raised at launch, before anything is submitted."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}", field=key)
        self.key = key


class SubmissionError(PreflightError):
    """The scheduler refused a job; what was already queued has been cancelled or is named."""


class RecordError(PreflightError, ValueError):
    """A record read from disk does not have the documented shape."""


FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def disk_full(path: str | Path, exc: OSError, *, needed: int | None, kept: str) -> InputError:
    """A write that ran out of space or quota, said whole: where, how much was needed and is free, and
    what was kept (a bare "No space left on device" leaves the user to guess all three)."""
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:  # the partial file or folder is gone by now
        probe = probe.parent
    try:
        free = f"{shutil.disk_usage(probe).free:,} bytes free"
    except OSError:
        free = "free space unknown"
    need = f"about {needed:,} bytes needed" if needed else "needed size unknown"
    reason = "over quota" if exc.errno == errno.EDQUOT else "filesystem full"
    return InputError(f"{path}: {reason} ({need}, {free}); {kept}", path=path, field="disk space")


def one_line(error: BaseException | str) -> str:
    """An error as the one line an entry point prints: a multi-line message (sbatch's stderr, a plugin's
    exception) is joined with ` | ` so it stays one line in logs and CI output."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return " | ".join(lines) or type(error).__name__


ANSI = re.compile(r"\x1b\[[0-9;]*m")
UNSUPPORTED_GLOBAL = re.compile(r"Unsupported global: GLOBAL ([\w.]+)")
BRIEF_CHARS = 300  # a library's message kept in a row: enough for the cause, never its whole manual


def brief(error: BaseException) -> str:
    """A library's exception as one short line for a row: torch's weights-only refusal (several
    paragraphs of advice) becomes what it refused and what to do; anything else its lines joined and
    cut at BRIEF_CHARS."""
    text = ANSI.sub("", str(error))
    if "Weights only load failed" in text:
        found = UNSUPPORTED_GLOBAL.search(text)
        holds = f"it holds {found.group(1)}, which only unpickling can build" if found else "it needs pickle"
        return (
            f"refused to unpickle: {holds}, and torch.load(weights_only=True) runs no code from a file; "
            "save the weights as safetensors (or a state_dict of plain tensors)"
        )
    line = one_line(text) if text.strip() else type(error).__name__
    return line if len(line) <= BRIEF_CHARS else line[: BRIEF_CHARS - 1] + "…"
