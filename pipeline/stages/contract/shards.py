"""The contract's data pass as a Slurm job array above `stages.contract.shard_rows` (issue 35).

Why: the pass reads every row (DROID: 27 M rows); one job reads them at one node's speed. Above
`shard_rows` (info.json `total_frames`, read at launch on the login node), the plan submits one array
task per `shard_rows` (whole data files, at most one task per file, the render_cache stage's array
machinery: part "task", `run_part` per task); each task scans its range of files and writes its partial
facts (`pipeline.readers.scan_shards`) under the run folder; the stage's main job merges them into the
scan one pass would have made and reconciles as always. It merges only what this launch's tasks finished
for these inputs over files unchanged since (`pipeline.readers.shard_partial`): a relaunch of the run id
finds the earlier launch's partials in the same folders. The `contract.shards` row says how many tasks
read which files (its `actual` the task count), or why the main job read the data itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from pipeline.errors import InputError
from pipeline.readers.base import DatasetContract
from pipeline.readers.lerobot_data import LeRobotData
from pipeline.readers.lerobot_dataset import prepare
from pipeline.readers.scan import ScanOptions, finish, scan_for, store
from pipeline.readers.scan_shards import crossing, merge, split, task_count, write_partial
from pipeline.readers.shard_partial import PARTIAL, changed, clear, identity, read
from pipeline.record import integrity
from pipeline.record.records import Check, Rows
from pipeline.stages import StageContext
from pipeline.stages.contract.config import ContractConfig
from pipeline.storage.files import parse_json, read_text

PART = "task"
ROWS = Rows("contract", "diagnostics")


def _lerobot(cfg: Any) -> LeRobotData | None:
    path = (cfg.get("dataset") or {}).get("path")
    if not path or not (Path(str(path)) / "meta" / "info.json").is_file():
        return None
    return LeRobotData(Path(str(path)))


def tasks(config: ContractConfig, cfg: Any) -> int:
    """Array tasks for this launch's dataset (1: no array): its metadata only, on the login node. An
    unreadable dataset gets no array: the main job reads it and records the error."""
    data = _lerobot(cfg)
    if data is None or config.shard_rows <= 0:
        return 1
    try:
        total = data.info.get("total_frames")
        files = len(data.data_files())
    except InputError:
        return 1
    return task_count(int(total), files, config.shard_rows) if isinstance(total, int) else 1


def _index(ctx: StageContext) -> int:
    return int(str(ctx.part).rsplit("-", 1)[-1])


def stamp(ctx: StageContext, count: int) -> dict[str, Any]:
    """What ties a partial to this launch: the plan's launch id (a relaunch of the run id writes a new
    one), the stage's input fingerprints and the task count (the task adds its index)."""
    plan = ctx.folder.plan_file
    launch = ctx.folder.load_plan().get("launch_id") if plan.is_file() else None
    return {"launch": launch, "fingerprints": dict(ctx.fingerprints), "tasks": count}


def run_part(cfg: DictConfig, ctx: StageContext, options: ScanOptions, count: int) -> Path:
    """One array task: the scan of its range of data files, written as a partial for the main job.
    What an earlier launch's task left here goes first, so a task that fails or is killed from here on
    leaves nothing the main job merges."""
    out = ctx.part_dir(str(ctx.part)) / PARTIAL
    clear(out)
    root = Path(str(cfg.dataset.path))
    contract, data, dims = prepare(root)
    files = data.data_files()
    lo, hi = split(data.file_rows(), count)[_index(ctx)]
    names = [str(f.relative_to(data.root.resolve())) for f in files[lo:hi]]
    seen = identity(data.root.resolve(), names)  # before the read: a change during it shows later
    scan = scan_for(contract, options)
    if scan.health is not None:
        scan.health.repeats.log = []  # its kept windows, replayed by the merge
    if dims and hi > lo:
        scan.reduce(data.blocks(dims, files[lo:hi]))
    return write_partial(scan, names, seen, out, {**stamp(ctx, count), "task": _index(ctx)}, audit_key(cfg))


def audit_key(cfg: Any) -> bytes | None:
    """The team's `audit.key_file` secret: a task signs its done marker with it, the main job merges
    only partials so signed (None: no key, and a marker proves only which bytes were written with it)."""
    return integrity.load_key((cfg.get("audit") or {}).get("key_file"))


def gather(
    ctx: StageContext, count: int, root: Path, key: bytes | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    """Every task's partial of this launch, or why one cannot stand for its files (naming the task):
    it stopped on a bad input, left no finished partial for this launch and these inputs (signed with
    `key` where one is set), or a file it read has changed since."""
    parts, want = [], stamp(ctx, count)
    for i in range(count):
        task = f"{PART}-{i:04d}"
        failed = ctx.folder.part_input_error_file(ctx.stage, task)
        if failed.exists():
            return [], f"{task} stopped on a bad input: {_failure(failed)}"
        try:
            part = read(ctx.part_dir(task) / PARTIAL, {**want, "task": i}, key)
        except InputError as exc:
            return [], f"{task}: {exc}"
        moved = changed(part, root)
        if moved is not None:
            return [], f"{task}: {moved}"
        parts.append(part)
    return parts, None


def _failure(path: Path) -> str:
    """The one line a part job left in `input_error.json` (or why it cannot be read)."""
    try:
        found = parse_json(read_text(path, "a part's input error"), path, "a part's input error")
    except InputError as exc:
        return f"{path.name} left, unreadable ({exc})"
    error = found.get("input_error") if isinstance(found, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return str(message) if message else f"{path.name} left ({str(found)[:200]})"


def read_sharded(
    root: Path, options: ScanOptions, ctx: StageContext, count: int, shard_rows: int, key: bytes | None = None
) -> tuple[DatasetContract, Check]:
    """The dataset contract from the tasks' partials, and the `contract.shards` row; where the partials
    cannot stand for one pass (a failed or stale task, unreadable, other files, an episode across two
    tasks), the data read here in one pass and the row says why."""
    contract, data, dims = prepare(root)
    names = [str(f.relative_to(data.root.resolve())) for f in data.data_files()]
    evidence: dict[str, Any] = {"tasks": count, "files": len(names), "shard_rows": shard_rows}
    parts, why = gather(ctx, count, data.root.resolve(), key)
    if why is not None:
        return _single(contract, data, dims, options, why, evidence)
    taken = [f for p in parts for f in p["files"]]
    if taken != names:
        why = f"the tasks read {len(taken)} files, the dataset holds {len(names)} (changed since launch?)"
        return _single(contract, data, dims, options, why, evidence)
    across = crossing(parts)
    if across is not None:
        why = f"episode {across} lies in two tasks' files (rows of one episode split across data files)"
        return _single(contract, data, dims, options, why, evidence)
    try:
        scan = merge(scan_for(contract, options), parts)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:  # a partial's inner facts
        why = f"the tasks' partials do not merge ({type(exc).__name__}: {exc})"
        return _single(contract, data, dims, options, why, evidence)
    contract.recomputed = scan.stats(lambda: data.blocks(dims)) if dims else {}
    evidence["ranges"] = [
        [p["files"][0], p["files"][-1], int(p["rows"])] if p["files"] else [] for p in parts
    ]
    message = f"data pass as {count} array tasks over {len(names)} data files, merged into one scan"
    row = ROWS("shards", "data pass", "match", message, severity="soft", expected=count, actual=count,
               evidence=evidence)  # fmt: skip
    return store(contract, scan), row


def _single(
    contract: DatasetContract, data: LeRobotData, dims: dict[str, int], options: ScanOptions, why: str,
    evidence: dict[str, Any],
) -> tuple[DatasetContract, Check]:  # fmt: skip
    """One pass over the data here; a bad input it meets is raised naming why the partials were not
    merged too (a task that stopped on the same file says so)."""
    try:
        finish(contract, lambda: data.blocks(dims), options)
    except InputError as exc:
        reason = why.replace(str(exc), "the same one") if str(exc) in why else why
        message = f"{exc} (the main job read the data in one pass: array partials not merged, {reason})"
        raise InputError(message, path=exc.path, field=exc.field) from exc
    message = f"array partials not merged ({why}); the main job read the data in one pass"
    row = ROWS("shards", "data pass", "unverifiable", message, severity="soft", expected=evidence["tasks"],
               actual=1, evidence={**evidence, "why": why})  # fmt: skip
    return contract, row
