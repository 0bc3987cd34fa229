"""Fail fast on inputs: every configured path exists and is of a kind some reader accepts, at launch.

Without this, a `model.path` that does not exist or a `dataset.path` that is a plain text file queues
every job and ends half a minute later blocked, with the real reason buried among generic ones (a twin
"crashed" because the training command it ran could not open the model). Launch asks the readers' own
cheap format detection (`detect_model`, `training_file`, `dataset_format`: names and stats, nothing
parsed) for the inputs of the stages actually selected, before the run folder exists; a bad one is one
`InputError` naming the config key, the path and what was expected. A part job asks again for its own
stage (`stage_inputs`), so an input that changed after launch is reported as that, not as a crash.
Which paths a stage reads is its own declaration (`Stage.inputs`); nothing here names a stage.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from pipeline import stages
from pipeline.errors import ConfigError, InputError
from pipeline.run.plan import selected_stages
from pipeline.storage.files import regular_file


def _folder(path: Path) -> None:
    if not path.is_dir():
        what = "does not exist" if not path.exists() else "is not a directory"
        raise InputError(f"{path}: {what} (expected a folder)", path=path)


def _exists(path: Path) -> None:
    """A plugin stage reads its inputs with its own code: launch can only say whether they exist."""
    if not path.exists():
        raise InputError(f"{path}: does not exist", path=path)


def _checkpoint(path: Path) -> None:
    """A model loaded by its own loader (`module:function`): a file or a folder."""
    if not path.exists():
        raise InputError(f"{path}: does not exist (expected the checkpoint file or folder)", path=path)


def _file(path: Path) -> None:
    regular_file(path, "a regular file")


# one checker per input kind (`pipeline.inputs.KINDS`): the readers' own detection, raising their own
# InputError
def _reader(spec: str) -> Callable[[Path], Any]:
    """A reader's detection, imported when a launch first asks it (each reader brings numpy, pyarrow or
    h5py): importing this module, as every job does, imports none of them."""
    module, _, name = spec.partition(":")
    return lambda path: getattr(importlib.import_module(module), name)(path)


CHECKS: dict[str, Callable[[Path], Any]] = {
    "model": _reader("pipeline.readers.model:detect_model"),
    "training": _reader("pipeline.readers.training:training_file"),
    "dataset": _reader("pipeline.readers.dataset:dataset_format"),
    "folder": _folder,
    "checkpoint": _checkpoint,
    "file": _file,
    "exists": _exists,
    "optional": lambda path: None,
}


def stage_inputs(cfg: DictConfig, stage: stages.Stage) -> Iterator[tuple[str, str, Callable[[Path], Any]]]:
    """(config key, path, checker) for every input `stage` declares that the config sets."""
    for declared in stage.declared_inputs:
        for key, path in declared.resolve(cfg):
            if path:
                yield key, path, CHECKS[declared.kind]


def check(key: str, path: str, checker: Callable[[Path], Any]) -> None:
    """One input: the reader's InputError, re-raised as one line naming the key, the path and what
    was expected (the reader's message starts with the path and says what it looked for)."""
    try:
        checker(Path(path))
    except InputError as exc:
        message = str(exc) if str(exc).startswith(str(path)) else f"{path}: {exc}"
        raise InputError(f"{key}: {message}", path=path, field=key) from None


def check_stage(cfg: DictConfig, stage: stages.Stage) -> None:
    """The inputs of one stage (a part job asks this before it runs)."""
    for key, path, checker in stage_inputs(cfg, stage):
        check(key, path, checker)


def check_inputs(cfg: DictConfig, registry: Mapping[str, stages.Stage]) -> None:
    """Launch: the inputs of the selected stages (stage=, skip=, and what they run after) and the chained
    job's script; `cfg` is the resolved config (demo paths filled, paths absolute)."""
    for stage in selected_stages(cfg, registry):
        check_stage(cfg, stage)
    chain = (cfg.get("chain") or {}).get("sbatch")
    if chain:
        check("chain.sbatch", str(chain), lambda p: regular_file(p, "an sbatch script"))


def blank_inputs(cfg: DictConfig, registry: Mapping[str, stages.Stage]) -> None:
    """An input key typed with an empty value (`dataset.path=''`) is refused: the user named an input,
    so the embedded demo (which fills only where no input is named) must not stand in for it."""
    for stage in registry.values():
        for declared in stage.declared_inputs:
            for key in declared.blank(cfg):
                raise ConfigError(key, "set to an empty path; name the file or folder, or leave the key out")
        for key in (k for need in stage.needs for k in need.split("|")):
            value = _select(cfg, key)
            if isinstance(value, str) and not value.strip():
                raise ConfigError(key, "set to an empty value; give one, or leave the key out")


def _select(cfg: Any, key: str) -> Any:
    node = cfg
    for part in key.split("."):
        node = node.get(part) if hasattr(node, "get") else None
    return node
