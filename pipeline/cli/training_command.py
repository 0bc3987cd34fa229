"""The inputs a `lerobot-train` command names, filled in before the launch checks anything.

`preflight-launch stage=full -- lerobot-train --policy.path=<id> --dataset.repo_id=<id> ...` names A, B
and C without a single key: A is the base (a folder, or a Hub id in the local cache), C the dataset
folder, and B the training config lerobot-train would compose from the same argv, written once under
`<output_root>/composed/<digest>/train_config.json` (content-addressed, so an unchanged command is the
same file and reuse holds) and copied into the run folder by the launch. Explicit `model.path`,
`dataset.path` and `training.path` win. Where lerobot is importable here, B is lerobot's own composition;
elsewhere (a login node) our reader composes it from the base's config and the flags, and the record
says so (`training.composed_by`): never a silent guess.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, open_dict

from pipeline.errors import InputError
from pipeline.readers import lerobot_checks, lerobot_command
from pipeline.readers.lerobot_command import LeRobotCommand
from pipeline.storage import atomic_write_text
from pipeline.storage.files import MAX_METADATA_BYTES, regular_file

REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")  # the Hub's <org>/<name>
COMPOSED_DIR = "composed"
TRAIN_CONFIG = "train_config.json"


def fill(cfg: DictConfig) -> str | None:
    """A, B and C from `training.command` where the user did not set them; one line to say, or None."""
    argv = lerobot_command.training_argv(cfg)
    command = lerobot_command.parse(argv) if argv else None
    if command is None:
        return None
    base = lerobot_command.resolve_base(command.policy_path) if command.policy_path else None
    with open_dict(cfg):
        if not cfg.model.get("path") and base is not None:
            cfg.model.path = str(base)
        if not cfg.dataset.get("path"):
            cfg.dataset.path = str(lerobot_command.resolve_dataset(command))
        if cfg.training.get("path"):
            return None
        composed, by = compose(command, base, Path(cfg.dataset.path))
        path, digest = write_composed(Path(cfg.output_root), composed)
        cfg.training.path, cfg.training.composed_sha256 = str(path), digest
        cfg.training.composed_by = by
        if not cfg.training.get("name"):
            cfg.training.name = command.policy_type or Path(str(command.policy_path)).name
    where = f"base {base}, " if base else f"no base (--policy.type={command.policy_type}), "
    said = f"lerobot-train: {where}dataset {cfg.dataset.path}, training config composed by {by}"
    if by != "lerobot":
        said += " (lerobot is not importable here: the contract job composes it with lerobot where it can)"
    return said


def compose(command: LeRobotCommand, base: Path | None, dataset: Path) -> tuple[dict[str, Any], str]:
    """B and who composed it: lerobot's own parser where lerobot is importable, else our reader. What
    lerobot would accept and then train wrongly on (an unknown policy type, episodes the dataset lacks,
    a count of 0) is named first, in one line; and the base's config.json is checked to be a regular
    file: lerobot opens it as it is, and a FIFO there blocks it forever. A resumed checkpoint must hold
    its weights (`model.safetensors`)."""
    if base is not None:
        regular_file(base / "config.json", "a LeRobot policy config.json", MAX_METADATA_BYTES)
    if base is not None and command.resumes:  # lerobot resumes the weights saved beside the config
        try:
            regular_file(base / "model.safetensors", "the checkpoint's weights")
        except InputError as exc:
            raise InputError(
                f"{lerobot_command.FIELD}: --resume=true: {exc} (lerobot resumes the weights saved beside "
                "the checkpoint's train_config.json, and this checkpoint has none)",
                path=base,
                field=lerobot_command.FIELD,
            ) from None
    lerobot_checks.check_policy_type(command.policy_type)  # before lerobot's parser prints its usage
    lerobot_checks.check_episodes(command.episodes, dataset)
    composed = lerobot_command.compose_with_lerobot(command, dataset)
    by = "lerobot"
    if composed is None:
        composed, by = lerobot_command.compose_training(command, base, dataset), "hpc-preflight"
    lerobot_checks.check_counts(composed)
    return composed, by


def write_composed(output_root: Path, composed: dict[str, Any], name: str = TRAIN_CONFIG) -> tuple[Path, str]:
    """`<output_root>/composed/<digest>/train_config.json`, written afresh at every launch (whatever was
    left there is replaced, never trusted), and its sha256, which the run keeps (`training.composed_sha256`)
    so that the jobs judge exactly this text: the folder is shared, the digest in the config is not."""
    text = json.dumps(composed, indent=2, sort_keys=True, default=str) + "\n"
    digest = hashlib.sha256(text.encode()).hexdigest()
    root = output_root.resolve()
    path = root / COMPOSED_DIR / digest[:16] / name
    if path.is_dir() or not path.parent.resolve().is_relative_to(root):
        where = "is a directory" if path.is_dir() else f"lies in {path.parent.resolve()}, outside {root}"
        raise InputError(
            f"training.path: {path} {where}; it is where the launch writes the composed training config: "
            "move it away",
            path=path,
            field="training.path",
        )
    try:
        atomic_write_text(path, text)
    except OSError as exc:
        message = f"training.path: cannot write {path}: {exc}"
        raise InputError(message, path=path, field="training.path") from None
    return path, digest


def dataset_note(cfg: DictConfig) -> str | None:
    """A line naming the dataset folder actually read where `--dataset.repo_id` is not `<org>/<name>`
    (`../../elsewhere`, an absolute path) or resolves outside HF_LEROBOT_HOME: lerobot reads it there
    too, so it is no block, but the user sees which folder the gate judged."""
    argv = lerobot_command.training_argv(cfg)
    command = lerobot_command.parse(argv) if argv else None
    repo_id = command.repo_id if command is not None else None
    if not repo_id or command is None or command.get("dataset.root"):
        return None
    home = lerobot_command.lerobot_home().resolve()
    folder = (home / repo_id).resolve()
    if REPO_ID.fullmatch(repo_id) and folder.is_relative_to(home):
        return None
    what = "is not <org>/<name>" if not REPO_ID.fullmatch(repo_id) else "resolves through a link"
    where = "outside" if not folder.is_relative_to(home) else "inside"
    return f"lerobot-train: --dataset.repo_id={repo_id} {what}: the dataset read is {folder}, {where} {home}"
