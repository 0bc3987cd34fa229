"""The project's reference smoke trainer: the demo's small policy on a LeRobot v3.0 dataset, a few steps.

    python -m pipeline.demo.reference_trainer --seed 0 --steps 6 --out DIR \
        --dataset PATH [--model PATH] [--fault unseeded_shuffle|clock_seed] [--save-normalization-stats false]

It is the demo's smoke trainer, what the determinism stage runs on the demo (its `train_cmd` names
`-m pipeline.demo.reference_trainer`), and a worked example of the contract a user's
trainer meets: a `pipeline.trainlog` metrics stream in `<out>/metrics.jsonl` (with its epoch
boundaries as `log.event("epoch_end")`, stopping on `log.stop`), a checkpoint in
`<out>/checkpoint` (the demo's LeRobot-style format; with `--save-normalization-stats false` its
normalizer files hold no keys, like LeRobot's `save_normalization_stats=false`), and the stats it
normalized with in `<out>/normalization_intent.safetensors`. Under `torchrun` it trains with DDP
(gloo on CPU) and logs the all-reduced loss, so every rank must log the same bits.

`--fault` plants a real source of nondeterminism for `demo=faulty`: `unseeded_shuffle` draws the
batch order from OS entropy, `clock_seed` seeds everything from the clock.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from pipeline import trainlog
from pipeline.demo import policy as demo
from pipeline.demo.cameras import CAMERAS
from pipeline.demo.pixels import Pixels, PooledPolicy, camera_pixels
from pipeline.progress import progress
from pipeline.readers import LeRobotData
from pipeline.readers.frames import FrameReader
from pipeline.readers.lerobot_data import shape_of

FAULTS = ("none", "unseeded_shuffle", "clock_seed")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--model", default="", help="base checkpoint to start from (optional)")
    parser.add_argument(
        "--training",
        default="",
        help="training config (YAML); its "
        "policy.normalization_mapping overrides the checkpoint's, as in LeRobot",
    )
    parser.add_argument("--fault", choices=FAULTS, default="none")
    parser.add_argument("--save-normalization-stats", default="false", choices=("true", "false"))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--digest-every", type=int, default=1)
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    return parser.parse_args(argv)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def normalization_override(training: str) -> dict[str, str]:
    """`policy.normalization_mapping` from the training config: what training really normalizes with."""
    if not training:
        return {}
    import yaml

    path = Path(training)
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise SystemExit(f"--training {path}: cannot read a YAML training config: {exc}") from exc
    mapping = (config.get("policy") or {}).get("normalization_mapping") or {}
    if not isinstance(mapping, dict):
        raise SystemExit(f"--training {path}: policy.normalization_mapping must be a mapping of type -> mode")
    return {str(k): str(v) for k, v in mapping.items()}


def build_policy(dataset: Path, model: str, training: str = "") -> tuple[nn.Module, Any]:
    """The demo policy and its spec: from the base checkpoint when given (its camera encoders included),
    else sized from the dataset with one encoder per demo camera the dataset records."""
    override = normalization_override(training)
    if model:
        loaded = demo.load_pretrained(model)
        loaded.spec.normalization_mapping = {**loaded.spec.normalization_mapping, **override}
        return loaded.policy.train(), loaded.spec
    data = LeRobotData(dataset)
    env_dim = data.feature_dim(demo.ENV_KEY) if demo.ENV_KEY in data.features else 0
    state_dim, action_dim = data.feature_dim(demo.STATE_KEY), data.feature_dim(demo.ACTION_KEY)
    cams = {k: _chw(data, k) for k in CAMERAS if k in data.video_keys()}
    spec = demo.default_spec(state_dim, action_dim, env_dim, cameras=cams)
    spec.normalization_mapping = {**spec.normalization_mapping, **override}
    return demo.DemoPolicy(state_dim + env_dim, action_dim, cameras=len(cams)), spec


def _chw(data: LeRobotData, key: str) -> list[int]:
    """A camera's [3, H, W] from info.json's `shape` (LeRobot writes video shapes HWC)."""
    shape = shape_of(data.features[key], data.root / "meta/info.json", key)
    if len(shape) != 3 or 3 not in (shape[0], shape[-1]):
        where = f"{data.root}/meta/info.json: features.{key}.shape"
        raise SystemExit(f"{where} {list(shape)}: expected [H, W, 3] or [3, H, W]")
    return [3, *shape[:2]] if shape[-1] == 3 else list(shape)


class Tensors(NamedTuple):
    """What one run trains on: normalized vector inputs, pooled camera frames (encoder order), targets,
    and the stats they were normalized with (saved as the normalization intent)."""

    x: torch.Tensor
    pixels: list[Pixels]
    y: torch.Tensor
    stats: dict[str, Any]


def training_tensors(dataset: Path, spec: Any) -> Tensors:
    """Normalized inputs and targets, exactly as the saved normalizers will map them at eval time.

    Camera inputs are decoded once through the frame reader (RGB, float 0-1, as LeRobot's loader gives
    them) and pooled once (`pipeline.demo.pixels`). A feature without stats passes through unnormalized,
    as LeRobot's normalizer does (and says so).
    """
    data = LeRobotData(dataset)
    stats = {f: {s: v.astype(np.float32) for s, v in block.items()} for f, block in data.stats().items()}
    cams, output = demo.camera_keys(spec), demo.ACTION_KEY
    vectors = [f for f in spec.input_features if f not in cams]
    missing = [k for k in cams if k not in FrameReader(data).cameras()]
    if missing:
        raise SystemExit(
            f"{dataset}/meta/info.json: the policy reads camera(s) {missing}, which the dataset does not "
            f"record (it has {FrameReader(data).cameras()})"
        )
    frames = data.frames([*vectors, output], dtype=np.float32)
    mapping = spec.normalization_mapping

    def mode(feature: str) -> str:
        if feature not in stats:
            print(f"reference_trainer: no stats for {feature} in {dataset}/meta/stats.json: passed through")
            return "IDENTITY"
        return mapping.get({**spec.input_features, **spec.output_features}[feature]["type"], "IDENTITY")

    x = np.concatenate([demo.normalize(frames[f], stats.get(f, {}), mode(f)) for f in vectors], axis=-1)
    y = demo.normalize(frames[output], stats.get(output, {}), mode(output))
    pixels = camera_pixels(dataset, cams, stats, {k: mode(k) for k in cams})
    used = {f: stats[f] for f in [*spec.input_features, output] if f in stats}
    x_t, y_t = torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y, dtype=torch.float32)
    return Tensors(x_t, pixels, y_t, used)


def batch_order(n: int, seed: int, fault: str, epoch: int) -> torch.Tensor:
    """The frame order for one epoch; the planted fault draws it from OS entropy instead of the seed."""
    generator = torch.Generator()
    if fault == "unseeded_shuffle":
        generator.manual_seed(int.from_bytes(os.urandom(8), "little") & (2**63 - 1))
    else:
        generator.manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=generator)


def batches(n: int, batch: int, seed: int, fault: str) -> Iterator[tuple[int, torch.Tensor]]:
    """Endless (epoch, global batch indices); each DDP rank then takes its own slice."""
    epoch = 0
    while True:
        order = batch_order(n, seed, fault, epoch)
        for start in range(0, n - batch + 1, batch):
            yield epoch, order[start : start + batch]
        epoch += 1


def setup_distributed(device_kind: str) -> tuple[int, int, torch.device]:
    rank, world = trainlog.rank_and_world()
    use_cuda = device_kind == "cuda" or (device_kind == "auto" and torch.cuda.is_available())
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    if world > 1:
        dist.init_process_group("nccl" if use_cuda else "gloo")
    return rank, world, device


def global_mean(value: torch.Tensor, world: int) -> torch.Tensor:
    """The loss averaged over ranks: what every rank must log identically under DDP."""
    if world <= 1:
        return value.detach()
    total = value.detach().clone()
    dist.all_reduce(total)
    return total / world


def train(args: argparse.Namespace) -> None:
    seed = time.time_ns() % 2**31 if args.fault == "clock_seed" else args.seed
    seed_everything(seed)
    rank, world, device = setup_distributed(args.device)
    policy, spec, stats = fit(args, seed, rank, world, device)
    if rank == 0:
        save(policy, spec, stats, args)
    leave_process_group(world)


def fit(
    args: argparse.Namespace, seed: int, rank: int, world: int, device: torch.device
) -> tuple[nn.Module, Any, dict[str, Any]]:
    """Train; only the bare policy leaves, so the DDP wrapper and its reducer die with this frame."""
    policy, spec = build_policy(args.dataset, args.model, args.training)
    data = training_tensors(args.dataset, spec)
    x, y = data.x, data.y
    pixels = [p.pooled.to(device) for p in data.pixels]
    policy = policy.to(device)
    pooled = PooledPolicy(policy)  # the encoders' first (parameter-free) pooling is done once, above
    model: nn.Module = nn.parallel.DistributedDataParallel(pooled) if world > 1 else pooled
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    log = trainlog.MetricsLog(args.out, digest_every=args.digest_every)
    feed = batches(len(x), args.batch_size * world, seed, args.fault)
    epoch = 0
    with progress(f"reference_trainer: seed {seed}, rank {rank}, training steps", args.steps) as advance:
        for step in range(1, args.steps + 1):
            batch_epoch, index = next(feed)
            if batch_epoch != epoch:  # the stage can require the first epoch boundary inside its horizon
                log.event("epoch_end", step=step - 1)
                epoch = batch_epoch
            index = index[rank::world]
            on = index.to(device)
            predicted = model(x[index].to(device), [p[on] for p in pixels])
            loss = nn.functional.mse_loss(predicted, y[index].to(device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            optimizer.step()
            log.step(step, loss=global_mean(loss, world), grad_norm=grad_norm, lr=args.lr, model=policy)
            advance()
            if log.stop:  # the stage's horizon events were reached (and a few steps after them)
                break
    log.close()
    return policy, spec, data.stats


def leave_process_group(world: int) -> None:
    """Leave the gloo group together, with nothing of it left alive at exit.

    Rank 1 has nothing to save, so without the barrier it destroyed its group and exited while rank 0
    was still saving. The DDP reducer, held in reference cycles until the interpreter's final clean-up,
    kept gloo's worker threads alive past `destroy_process_group`; tearing them down during exit aborted
    the process ("terminate called without an active exception", SIGABRT) in about one run in six on two
    loaded cores, and torchrun then killed rank 0 mid-save. Collecting the cycles first frees the reducer
    while the interpreter is whole; the barrier keeps every rank in the group until all are done.
    """
    if world <= 1:
        return
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


def save(policy: nn.Module, spec: Any, stats: dict[str, Any], args: argparse.Namespace) -> None:
    keep = args.save_normalization_stats == "true"
    demo.save_pretrained(policy.cpu(), stats if keep else {}, args.out / "checkpoint", spec)
    trainlog.write_intent({f"{f}.{s}": v for f, d in stats.items() for s, v in d.items()}, args.out)


def main(argv: Sequence[str] | None = None) -> None:
    train(parse_args(argv))


if __name__ == "__main__":
    main()
