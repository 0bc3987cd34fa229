"""What a lerobot-train command asks that lerobot itself accepts and then trains wrongly on, or dies on
after the gate: named at launch, one line each, before anything is submitted.

lerobot's parser takes `--steps=0` (no training), `--batch_size=0` (the DataLoader dies at the first
batch), `--save_freq=0` (a division by zero at step 1) and `--dataset.episodes` ids the dataset does not
have (they fail when the dataset is opened, in the job). An unknown `--policy.type` it refuses with 70
lines of usage text; here it is one line naming the types known. The counts are judged on B as composed
(by lerobot or by our reader, flags over a `--config_path` file), so a value from either place is seen.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.errors import InputError
from pipeline.storage.files import read_json

FIELD = "training.command"

# The window fields of each policy type's config as lerobot 0.4.4 defaults them (read off the configs it
# saves: ../shared/data/real/lerobot-0.4.4), for `--policy.type` with no base where lerobot itself is not
# importable to say so; a `--policy.<field>` flag overrides them, a type not listed has none.
LEROBOT_WINDOWS: dict[str, dict[str, int]] = {
    "act": {"n_obs_steps": 1, "chunk_size": 100, "n_action_steps": 100},
    "diffusion": {"n_obs_steps": 2, "horizon": 16, "n_action_steps": 8, "drop_n_last_frames": 7},
    "groot": {"n_obs_steps": 1, "chunk_size": 50, "n_action_steps": 50},
    "pi0": {"n_obs_steps": 1, "chunk_size": 50, "n_action_steps": 50},
    "pi05": {"n_obs_steps": 1, "chunk_size": 50, "n_action_steps": 50},
    "pi0_fast": {"n_obs_steps": 1, "chunk_size": 50, "n_action_steps": 50},
    "smolvla": {"n_obs_steps": 1, "chunk_size": 50, "n_action_steps": 50},
    "xvla": {"n_obs_steps": 1, "chunk_size": 32, "n_action_steps": 32},
    "wall_x": {"n_obs_steps": 1, "chunk_size": 32, "n_action_steps": 32},
    "tdmpc": {"n_obs_steps": 1, "horizon": 5, "n_action_steps": 1},
    "vqbet": {"n_obs_steps": 5, "action_chunk_size": 5, "n_action_pred_token": 3},
    "sac": {"n_obs_steps": 1},
    "reward_classifier": {"n_obs_steps": 1},
}
# TrainPipelineConfig's counts (lerobot 0.4.4): the ones the training loop divides by or batches with
# must be positive; the ones where 0 means "off" (eval, logging) or "in the main process" must be >= 0
POSITIVE_COUNTS = ("steps", "batch_size", "save_freq", "prefetch_factor")
NON_NEGATIVE_COUNTS = ("num_workers", "eval_freq", "env_eval_freq", "log_freq", "eval_steps")


def known_policy_types() -> list[str]:
    """lerobot's registry of policy configs where lerobot is importable, else the types this reader
    knows the windows of."""
    try:  # the factory, as lerobot-train imports it: `lerobot.policies` alone leaves out sac and others
        import lerobot.policies.factory  # noqa: F401  (registers every policy type's config)
        from lerobot.configs.policies import PreTrainedConfig
    except ImportError:
        return sorted(LEROBOT_WINDOWS)
    return sorted(PreTrainedConfig.get_known_choices())


def check_policy_type(policy_type: str | None) -> None:
    known = known_policy_types()
    if policy_type is not None and policy_type not in known:
        raise InputError(
            f"{FIELD}: --policy.type={policy_type} is not a policy type lerobot knows; "
            f"known: {', '.join(known)}",
            field=FIELD,
        )


def check_counts(composed: Mapping[str, Any]) -> None:
    """B's counts: integers, positive (or >= 0 where 0 turns a feature off)."""
    for key in (*POSITIVE_COUNTS, *NON_NEGATIVE_COUNTS):
        if key not in composed or composed[key] is None:
            continue
        value, floor = composed[key], 1 if key in POSITIVE_COUNTS else 0
        if isinstance(value, bool) or not isinstance(value, int) or value < floor:
            expected = "a positive integer" if floor else "an integer >= 0"
            raise InputError(f"{FIELD}: --{key}={value!r}: expected {expected}", field=FIELD)


def check_episodes(episodes: list[int] | None, dataset: Path) -> None:
    """`--dataset.episodes` ids the dataset has (0 .. total_episodes - 1 of its meta/info.json); an
    empty list selects nothing to train on (every later row would judge an empty selection)."""
    if episodes is not None and not episodes:
        raise InputError(
            f"{FIELD}: --dataset.episodes=[] selects no episode, so there is nothing to train on; "
            "name the episodes, or drop the flag to train on all of them",
            path=dataset,
            field=FIELD,
        )
    if not episodes:
        return
    info = read_json(dataset / "meta" / "info.json", "a LeRobot meta/info.json")
    total = info.get("total_episodes") if isinstance(info, dict) else None
    if not isinstance(total, int) or isinstance(total, bool):
        return  # no count to judge by: the dataset reader names that
    absent = sorted({e for e in episodes if not 0 <= e < total})
    if absent:
        more = f", ... ({len(absent)} in all)" if len(absent) > 10 else ""
        shown = ", ".join(map(str, absent[:10])) + more
        raise InputError(
            f"{FIELD}: --dataset.episodes names episode(s) {shown} that {dataset} does not have "
            f"(it has {total}: 0 to {total - 1})",
            path=dataset,
            field=FIELD,
        )
