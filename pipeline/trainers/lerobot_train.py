"""`lerobot-train` as the determinism stage's smoke training: N steps, one seed, the exact loss per step.

lerobot-train prints its loss to three decimals every `log_freq` steps, which hides every drift below
that; so this wrapper runs lerobot's own `lerobot_train.main()` in this process (same parser, same
config file, same code path as the console script) and wraps its `update_policy` to write each step's
loss, grad norm and a parameter digest through `pipeline.trainlog` (floats as hex: bits compared, not
digits). The user's `train_config.json` (what `lerobot-train` saved beside its checkpoint) is the run's
configuration; only what a smoke run must change is overridden: seed, steps, output folder, dataset
root, logging, saving, no eval and no wandb. The last checkpoint's `pretrained_model/` is copied to
`<out>/checkpoint`, where the stage's reload round trip reads it.

    stages.determinism.train_cmd: ["{python}", "-m", "pipeline.trainers.lerobot_train", "--seed", "{seed}",
      "--steps", "{steps}", "--out", "{out}", "--config", "{training}", "--dataset", "{dataset}"]

Anything after `--` goes to lerobot-train as is (e.g. `--policy.device=cuda`).

Without `--config`, the arguments after `--` are the user's own lerobot-train flags (the command typed
after `--` on the launch line; the determinism stage derives this form itself when no `train_cmd` is
set): they are the run's configuration, and the smoke run's settings replace the ones the user typed for
the same keys (`--steps=200000` would otherwise win, as the last value does in lerobot's parser).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REQUIRES = ("lerobot",)  # checked at launch (determinism's `unmet`): missing, no part job starts
LEROBOT_OUT = "lerobot"  # lerobot-train's output_dir inside <out>; it must not exist beforehand


def lerobot_argv(args: argparse.Namespace, extra: Sequence[str]) -> list[str]:
    """The lerobot-train command line: the user's config (`--config`, then `extra` as given), or the
    user's own flags (no `--config`: `extra` less the keys the smoke run sets), then the smoke run's
    settings."""
    smoke = smoke_flags(args)
    if args.config is None:
        owned = {flag[2:].partition("=")[0] for flag in smoke} | {"resume"}
        return ["lerobot-train", *without(extra, owned), *smoke]
    return ["lerobot-train", f"--config_path={args.config}", *smoke, *extra]


def smoke_flags(args: argparse.Namespace) -> list[str]:
    """What a smoke run sets whatever the user's config says: its seed, steps and output folder, a
    checkpoint at the end only, every step logged, no eval, no wandb, no push to the Hub."""
    flags = [
        f"--seed={args.seed}",
        f"--steps={args.steps}",
        f"--output_dir={args.out / LEROBOT_OUT}",
        f"--save_freq={args.steps}",
        "--log_freq=1",
        "--eval_freq=0",
        "--wandb.enable=false",
        "--policy.push_to_hub=false",
    ]
    if args.dataset:
        flags.append(f"--dataset.root={args.dataset}")
    return flags


def without(flags: Sequence[str], keys: set[str]) -> list[str]:
    """`flags` less every `--key=value` or `--key value` whose key (`-` read as `_`, as lerobot's parser
    reads it) is in `keys`."""
    kept: list[str] = []
    i = 0
    while i < len(flags):
        item = flags[i]
        key, eq, _ = item[2:].partition("=") if item.startswith("--") else ("", "", "")
        drop = bool(key) and key.replace("-", "_") in keys
        takes_next = drop and not eq and i + 1 < len(flags) and not flags[i + 1].startswith("--")
        if not drop:
            kept.append(item)
        i += 2 if takes_next else 1
    return kept


def logged_update(original: Any, log: Any) -> Any:
    """lerobot's `update_policy`, plus one trainlog line per optimizer step: the exact loss and grad norm
    (its tracker keeps them as meters whose `val` is this step's `loss.item()`)."""
    count = {"step": 0}

    def update_policy(train_metrics: Any, policy: Any, *rest: Any, **kwargs: Any) -> Any:
        metrics, output = original(train_metrics, policy, *rest, **kwargs)
        count["step"] += 1
        loss, grad_norm = (float(getattr(m, "val", m)) for m in (metrics.loss, metrics.grad_norm))
        log.step(count["step"], loss=loss, grad_norm=grad_norm, model=policy)
        return metrics, output

    return update_policy


def kept_processors(original: Any, made: list[Any]) -> Any:
    """lerobot's `make_pre_post_processors`, keeping the pipelines it builds for training: their
    normalizer states are what training normalized with (the intent the reload is compared against)."""

    def make_pre_post_processors(*args: Any, **kwargs: Any) -> Any:
        pipelines = original(*args, **kwargs)
        made[:] = list(pipelines)
        return pipelines

    return make_pre_post_processors


def write_intent(made: Sequence[Any], out: Path) -> None:
    """The training processors' stats as `normalization_intent.safetensors` in `out` (trainlog)."""
    from pipeline import trainlog
    from pipeline.stages.determinism.lerobot_reload import processor_stats

    if len(made) == 2:
        trainlog.write_intent(processor_stats(made[0], made[1])[0], out)


def run(args: argparse.Namespace, extra: Sequence[str]) -> int:
    from lerobot.scripts import lerobot_train

    from pipeline import trainlog

    args.out.mkdir(parents=True, exist_ok=True)
    log = trainlog.MetricsLog(args.out)  # applies the stage's determinism settings before training
    originals = lerobot_train.update_policy, lerobot_train.make_pre_post_processors
    made: list[Any] = []
    lerobot_train.update_policy = logged_update(originals[0], log)
    lerobot_train.make_pre_post_processors = kept_processors(originals[1], made)
    saved_argv = sys.argv
    sys.argv = lerobot_argv(args, extra)
    try:
        lerobot_train.main()
    finally:
        sys.argv = saved_argv
        lerobot_train.update_policy, lerobot_train.make_pre_post_processors = originals
        log.close()
    write_intent(made, args.out)
    last = args.out / LEROBOT_OUT / "checkpoints" / "last" / "pretrained_model"
    if not last.is_dir():
        print(f"lerobot-train left no checkpoint at {last}", file=sys.stderr)
        return 1
    shutil.copytree(last.resolve(), args.out / args.checkpoint_subdir, dirs_exist_ok=True)
    return 0


def parse_args(raw: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """Our options, and what follows the first `--` (lerobot-train's flags, passed on as they are)."""
    raw = list(raw)
    extra = raw[raw.index("--") + 1 :] if "--" in raw else []
    ours = raw[: raw.index("--")] if "--" in raw else raw
    parser = argparse.ArgumentParser(prog="python -m pipeline.trainers.lerobot_train")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--config", type=Path, default=None, help="the run's train_config.json (none: the flags after --)"
    )
    parser.add_argument("--dataset", default="", help="the dataset root (default: the config's)")
    parser.add_argument("--checkpoint-subdir", default="checkpoint")
    args = parser.parse_args(ours)
    if args.config is not None and not args.config.is_file():
        parser.error(f"--config {args.config}: no such file (expected lerobot's train_config.json)")
    return args, extra


def main(argv: Sequence[str] | None = None) -> int:
    return run(*parse_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
