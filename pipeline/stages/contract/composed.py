"""B composed from the training command after `--`: by lerobot where the job has it, and said so either way.

The launch composes B once (`training.composed_by`): with lerobot's own parser where lerobot was
importable there, else with our reader from the base's config and the flags (a login node). A job that
runs in the training image usually has lerobot: there B is composed again by lerobot from the same
argv, written over the run folder's `train_config.json`, and that is what the contract judges. Where
the job has no lerobot either, one soft row says that lerobot did not compose B, never a silent guess,
and what is judged is the launch's own composition as it wrote it: the shared file read only where its
sha256 is still the digest the launch kept (`training.composed_sha256`), else an InputError (the job's
`error` row) naming the file, never a composition swapped in since.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from pipeline.readers import lerobot_command
from pipeline.record.records import Check, Rows
from pipeline.record.runfolder import RunFolder, composed_text
from pipeline.record.text import quoted_argv
from pipeline.storage import atomic_write_text

ROWS = Rows("contract", "layout")
ROW = "training.composed"


def training_config(cfg: DictConfig) -> tuple[str | None, list[Check]]:
    """The training config to judge, and the row saying who composed it (none for a given file)."""
    training = cfg.get("training") or {}
    path = training.get("path")
    by = training.get("composed_by")
    if not by or not path:
        return (str(path) if path else None), []
    argv = lerobot_command.training_argv(cfg)
    command = lerobot_command.parse(argv)
    if by == "lerobot" or command is None:
        judged = _as_written(cfg)
        return judged, [_row(by, judged, argv)]
    dataset = (cfg.get("dataset") or {}).get("path")
    composed = lerobot_command.compose_with_lerobot(command, Path(str(dataset))) if dataset else None
    if composed is None:  # our own composition, judged only as the launch wrote it (its digest)
        judged = _as_written(cfg)
        return judged, [_row(by, judged, argv)]
    target = RunFolder(Path(str(cfg.run_dir))).train_config_file if cfg.get("run_dir") else Path(str(path))
    atomic_write_text(target, json.dumps(composed, indent=2, sort_keys=True, default=str) + "\n")
    return str(target), [_row("lerobot (in the job)", str(target), argv)]


def _as_written(cfg: DictConfig) -> str:
    """The run folder's copy of B, rewritten from the launch's composition once its digest is checked:
    what is judged is exactly what the launch composed, whatever the shared folder holds by now."""
    text = composed_text(cfg)
    if not cfg.get("run_dir"):
        return str(cfg.training.path)
    return str(atomic_write_text(RunFolder(Path(str(cfg.run_dir))).train_config_file, text))


def _row(by: str, path: Any, argv: list[str]) -> Check:
    evidence = {"composed_by": by, "train_config": str(path), "command": quoted_argv(argv)}
    if by.startswith("lerobot"):
        message = f"training config composed by {by}'s own parser from the training command ({path})"
        return ROWS(ROW, "training", "match", message, expected="lerobot", actual=by, evidence=evidence)
    message = (
        f"lerobot did not compose the training config: neither the launch nor this job can import it, so "
        f"{path} is our reader's composition (the base's config.json, the --policy.* flags, the dataset's "
        "action features, lerobot 0.4.4's window defaults for a --policy.type). A flag lerobot would "
        "refuse, or a default another lerobot version sets, is not seen here: run the jobs where lerobot "
        "is installed (the training image) to judge lerobot's own composition"
    )
    return ROWS(
        ROW, "training", "mismatch", message, severity="soft", expected="lerobot", actual=by,
        evidence=evidence,
    )  # fmt: skip
