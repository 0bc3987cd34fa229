"""How much a folder can still take: free space (statvfs) and the user's quota (`lfs quota`, `quota`).

Free space alone lies on a shared cluster: a Lustre project with petabytes free still refuses the write
once the user's quota is spent (EDQUOT), which is how a multi-day run died in reference 004. So a
preflight asks both. The quota tools print a human table, parsed here; the parsers are tested against
outputs recorded on real clusters (tests/storage/fixtures/quota). A node without either tool, or a tool
that fails, is recorded in `Room.notes` and never stops a save: free space still decides.
"""

from __future__ import annotations

import getpass
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

Runner = Callable[[Sequence[str]], str]
UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50, "E": 2**60}
_HEADER = re.compile(r"^\s*Disk quotas for (usr|user|grp|group|prj|project) (\S+) \((\w+) ([^)]*)\):")
MAX_DIGITS = 30
FAILED = "<quota tool failed>"  # a marker among quota_for's notes (kept out of Room.notes)
_NUMBER = re.compile(r"^\[?(\d+(?:\.\d+)?)([kKMGTPE]?)\]?(\*?)$")


@dataclass(frozen=True)
class QuotaRow:
    """One filesystem line of a quota table, in bytes; a limit of 0 means none is set."""

    kind: str  # usr | user | grp | group | prj | project
    owner: str
    filesystem: str
    used: int
    soft: int
    hard: int
    over_soft: bool = False

    @property
    def limit(self) -> int | None:
        """The tighter of the set limits (soft becomes hard once its grace runs out); None: no limit."""
        set_limits = [v for v in (self.soft, self.hard) if v > 0]
        return min(set_limits) if set_limits else None

    @property
    def available(self) -> int | None:
        return None if self.limit is None else max(self.limit - self.used, 0)


@dataclass
class Room:
    """What one folder can take: statvfs space, and the quota headroom where a tool told us."""

    folder: str
    free: int
    total: int
    fstype: str | None = None
    mountpoint: str | None = None
    quota_tool: str | None = None
    quota: QuotaRow | None = None
    notes: list[str] = field(default_factory=list)
    quota_failed: bool = False  # the tool ran and failed (timed out, garbage): not the same as no quota

    @property
    def available(self) -> int:
        """Bytes a write can use: the smaller of free space and quota headroom."""
        quota = self.quota.available if self.quota is not None else None
        return self.free if quota is None else min(self.free, quota)

    def as_dict(self) -> dict[str, object]:
        return {
            "folder": self.folder,
            "free": self.free,
            "total": self.total,
            "fstype": self.fstype,
            "mountpoint": self.mountpoint,
            "quota_tool": self.quota_tool,
            "quota": None if self.quota is None else self.quota.__dict__ | {"limit": self.quota.limit},
            "available": self.available,
            "notes": list(self.notes),
        }


def to_bytes(token: str, unit: int = 1024) -> tuple[int, bool] | None:
    """A quota table cell in bytes, and whether it carries the over-quota star.

    Plain numbers are 1 KiB blocks in both tools; `-h`/`-s` cells carry a binary suffix (lfs writes a
    lower-case k). lfs brackets a value it could not read from every target ([1041408]).
    """
    match = _NUMBER.match(token.strip())
    if not match:
        return None
    number, suffix, star = match.groups()
    if len(number) > MAX_DIGITS:  # no filesystem holds 10^30 blocks: garbage, not a number to trust
        return None
    scale = UNITS[suffix.upper()] if suffix else unit
    return int(float(number) * scale), bool(star)


def parse_quota_table(text: str) -> list[QuotaRow]:
    """Rows of `lfs quota` or `quota` output (either tool, plain or human units, wrapped or not).

    A long filesystem name is printed on its own line with the numbers on the next; `lfs quota -v`
    adds per-target lines (`*_UUID`), skipped: only the totals count.
    """
    rows: list[QuotaRow] = []
    kind, owner, pending = "", "", None
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            kind, owner, pending = header.group(1), header.group(2), None
            continue
        words = line.split()
        if words[:1] == ["Filesystem"]:
            kind, owner = kind or "user", owner or "?"  # a pasted table may lack its title line
            continue
        if not kind or not words:
            continue
        if len(words) == 1 and to_bytes(words[0]) is None:
            pending = words[0]
            continue
        name, cells = (pending, words) if pending and to_bytes(words[0]) else (words[0], words[1:])
        pending = None
        if name.endswith("_UUID") or len(cells) < 3:
            continue
        parsed = [to_bytes(c) for c in cells[:3]]
        if any(p is None for p in parsed):
            continue
        (used, star), (soft, _), (hard, _) = parsed  # type: ignore[misc]
        rows.append(QuotaRow(kind, owner, name, used, soft, hard, star))
    return rows


def mount_of(path: Path, mounts_file: str = "/proc/self/mounts") -> tuple[str, str, str] | None:
    """(mountpoint, fstype, source) of the filesystem holding `path`: the longest matching mountpoint."""
    target = str(Path(path).resolve())
    best: tuple[str, str, str] | None = None
    try:
        lines = Path(mounts_file).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        source, mountpoint, fstype = parts[0], _unescape(parts[1]), parts[2]
        inside = target == mountpoint or target.startswith(mountpoint.rstrip("/") + "/")
        if inside and (best is None or len(mountpoint) >= len(best[0])):
            best = (mountpoint, fstype, source)
    return best


def _unescape(field_: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field_)


def _run(argv: Sequence[str], timeout_s: float = 30) -> str:
    """The tool's output as text; output that is not UTF-8 (or a time-out) is an OSError naming it."""
    try:
        done = subprocess.run(list(argv), capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise OSError(f"{argv[0]} timed out after {timeout_s:g} s") from None
    try:
        out, err = done.stdout.decode("utf-8"), done.stderr.decode("utf-8", "replace")
    except UnicodeDecodeError:
        raise OSError(f"{argv[0]} printed output that is not UTF-8 text") from None
    if done.returncode != 0 and not out.strip():
        raise OSError(f"{argv[0]} exited {done.returncode}: {err.strip()[:200]}")
    return out


def quota_for(
    path: Path, *, runner: Runner = _run, which: Callable[[str], str | None] = shutil.which
) -> tuple[str | None, QuotaRow | None, list[str]]:
    """The user's quota row for the filesystem holding `path`: (tool, row, notes). Never raises."""
    mount = mount_of(path)
    mountpoint, fstype, source = mount if mount else (str(path), "", "")
    user = _user()
    if fstype == "lustre" and which("lfs"):
        argv = ["lfs", "quota", "-u", user, mountpoint]
        wanted = {mountpoint, str(path)}
    elif which("quota"):
        argv = ["quota", "-w", "-u", user]
        wanted = {mountpoint, source}
    else:
        missing = "lfs" if fstype == "lustre" else "quota"
        return None, None, [f"no quota tool on this node ({missing} not on PATH): quota not checked"]
    try:
        text = runner(argv)
        rows = parse_quota_table(text)
    except (OSError, subprocess.SubprocessError) as exc:
        return argv[0], None, [f"{' '.join(argv)} failed ({exc}): quota not checked", FAILED]
    if not rows and _garbage(text):
        said = f"{' '.join(argv)} printed no quota table this reader takes ({text.strip()[:60]!r})"
        return argv[0], None, [f"{said}: quota not checked", FAILED]
    mine = [r for r in rows if r.kind in ("usr", "user") and r.filesystem in wanted]
    if not mine:
        return argv[0], None, [f"{' '.join(argv)} reports no user quota for {mountpoint}"]
    return argv[0], mine[0], []


def _garbage(text: str) -> bool:
    """Output that is neither a quota table nor a tool saying there is none: no title line, or a number
    no filesystem has (more than MAX_DIGITS digits)."""
    lines = text.splitlines()
    titled = any(_HEADER.match(line) for line in lines)
    return bool(text.strip()) and (not titled or re.search(rf"\d{{{MAX_DIGITS + 1},}}", text) is not None)


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def room(folder: Path, *, check_quota: bool = True, runner: Runner = _run) -> Room:
    """Free space and quota headroom of `folder` (which must exist), as this process sees them."""
    stat = os.statvfs(folder)
    mount = mount_of(folder)
    out = Room(
        folder=str(folder),
        free=stat.f_bavail * stat.f_frsize,
        total=stat.f_blocks * stat.f_frsize,
        fstype=mount[1] if mount else None,
        mountpoint=mount[0] if mount else None,
    )
    if check_quota:
        out.quota_tool, out.quota, notes = quota_for(Path(folder), runner=runner)
        out.quota_failed = FAILED in notes
        out.notes.extend(n for n in notes if n != FAILED)
    return out


def preflight(folder: Path, size: int, margin: float, reserve: int, check_quota: bool) -> tuple[str, Room]:
    """'' when `folder` can take `size` bytes (+margin, +reserve for sidecar/manifest), else why not."""
    stat = os.statvfs(folder)
    space = room(folder, check_quota=check_quota)
    if stat.f_flag & os.ST_RDONLY:
        return f"{folder} is on a read-only filesystem", space
    if not os.access(folder, os.W_OK):
        return f"{folder} is not writable by uid {os.getuid()}", space
    need = int(size * (1 + margin)) + reserve
    if space.available < need:
        what = "quota headroom" if space.available < space.free else "free space"
        return (
            f"preflight: needs {need} bytes ({size} + {margin:.0%} margin + {reserve} reserve), "
            f"{what} is {space.available} bytes",
            space,
        )
    return "", space
