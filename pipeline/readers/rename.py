"""The training's rename map (dataset key -> policy key), as every stage that feeds the model applies it.

lerobot-train renames the dataset's observation keys to the policy's before anything else reads them
(its preprocessor's first step, `rename_observations_processor`, with `--rename_map`), so a stage that
feeds the policy dataset rows must read each policy input from the dataset key the map renames to it;
otherwise a finetune onto renamed cameras looks like a dataset without the policy's cameras. The map is
the one the run will train with: the lerobot-train line's `--rename_map` where one is typed after `--`,
else the training config's (`training.path`, B: lerobot saves `rename_map` in train_config.json).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pipeline.errors import InputError
from pipeline.readers import lerobot_command


def rename_map(cfg: Any) -> dict[str, str]:
    """The map the run trains with; empty when nothing renames. A training config the reader cannot
    take gives none here: the contract stage names that file."""
    argv = lerobot_command.training_argv(cfg)
    command = lerobot_command.parse(argv) if argv else None
    if command is not None and command.get("rename_map") is not None:
        return command.rename_map
    path = (cfg.get("training") or {}).get("path") if hasattr(cfg, "get") else None
    if not path:
        return {}
    from pipeline.readers.training import read_training

    try:
        return dict(read_training(str(path)).hints.get("rename_map") or {})
    except InputError:
        return {}


def sources(rename: Mapping[str, str]) -> dict[str, str]:
    """Policy key -> the dataset key it is read from, for the renamed keys only. Where two dataset keys
    are renamed to one policy key, the later one wins, as lerobot's step overwrites it."""
    return {str(policy): str(data) for data, policy in rename.items()}


def said(key: str, source: Mapping[str, str]) -> str:
    """`policy key` or `policy key (the dataset's <key>, by the rename map)` for a row's message."""
    return f"{key} (the dataset's {source[key]}, by the rename map)" if key in source else key


def unnormalized(
    rename: Mapping[str, str], has_stats: Callable[[str], bool], inputs: Iterable[str]
) -> dict[str, str]:
    """Policy input -> the dataset key renamed onto it, for each renamed input the normalizer finds no
    stats for under its own (policy) name. lerobot-train normalizes with the dataset's stats keyed as
    the dataset names them, while the rename map has already renamed the inputs (its preprocessor's
    first step), so such an input passes the normalizer unnormalized, at training as at inference."""
    wanted = set(inputs)
    return {
        policy: data for policy, data in sources(rename).items() if policy in wanted and not has_stats(policy)
    }
