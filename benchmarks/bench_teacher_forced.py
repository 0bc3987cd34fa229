"""teacher_forced scoring throughput vs the bare batched forward pass of the same model, same process.

    python benchmarks/bench_teacher_forced.py [--samples 8192] [--batch 512] [--hidden 64 1024]
                                              [--repeats 5] [--device auto] [--dir DIR]

Writes a LeRobot v3.0 dataset shaped like the demo's (random-walk state, environment state and action,
episodes of 200 frames) and, per hidden width, a demo-format MLP checkpoint. Then, on the same
sampled observation rows:

- bare:  `policy(x)` over batches of the already-normalized, already-concatenated input tensor on the
         device (the ceiling: the network alone);
- stage: `evaluate.score_model`, the stage's per-model path: the loader's batched `predict`
         (normalizers, forward, unnormalize, to numpy), error metrics, the collapse / NaN findings and
         the 16-sample determinism probe.

The two are timed in turn `--repeats` times (a shared machine's load drift hits both). Prints one JSON
line: best samples/s of each per width and the median of the paired ratios stage/bare
(aim >= 0.8). One-off work (reading the data, selecting and hashing samples, plots) is not in it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipeline.demo.dataset import write_dataset  # noqa: E402
from pipeline.demo.policy import DemoPolicy, default_spec, save_pretrained  # noqa: E402
from pipeline.demo.teacher_forced import LOADER  # noqa: E402
from pipeline.demo.train import load_stats  # noqa: E402
from pipeline.stages.config import typed  # noqa: E402
from pipeline.stages.teacher_forced import ModelSpec, TeacherForcedConfig, evaluate, models  # noqa: E402
from pipeline.stages.teacher_forced.samples import read_frames, select  # noqa: E402


def episodes(n: int, steps: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        walk = np.cumsum(rng.normal(0, 0.05, (steps, 20)), axis=0).astype(np.float32)
        out.append({"state": walk[:, :11], "env_state": walk[:, 11:15], "action": walk[:, 15:] * 0.5})
    return out


def checkpoint(dataset: Path, hidden: int, out: Path) -> Path:
    torch.manual_seed(0)
    policy = DemoPolicy(15, 5, hidden).eval()
    return save_pretrained(policy, load_stats(dataset), out, default_spec(11, 5, 4))


def timed(fn) -> float:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start


def measure(dataset: Path, ckpt: Path, tf: TeacherForcedConfig, repeats: int, device: str) -> dict:
    spec = ModelSpec(name="m", path=str(ckpt), loader=LOADER)
    model = models.load("m", str(ckpt), LOADER, device, [], "bench")
    keys = sorted(set(model.inputs) | {tf.action_key})
    frames = read_frames(dataset, keys)
    rows = select(frames, tf.samples, tf.seed)
    shared = evaluate.prepare(tf, frames, rows, ["all"] * len(rows), keys)
    demo = model.obj
    x = torch.cat(
        [
            torch.as_tensor(shared.batch[k], device=demo.device) * demo.inputs[k][0] + demo.inputs[k][1]
            for k in demo.input_features
        ],
        dim=-1,
    )

    def bare() -> None:
        with torch.inference_mode():
            for start in range(0, len(x), tf.batch_size):
                demo.policy(x[start : start + tf.batch_size])

    def stage() -> None:
        evaluate.score_model(tf, spec, model, shared)

    bare(), stage()  # warm-up
    pairs = [(timed(bare), timed(stage)) for _ in range(repeats)]  # interleaved: load drift hits both
    n = len(rows)
    return {
        "bare_sps": round(n / min(p[0] for p in pairs)),
        "stage_sps": round(n / min(p[1] for p in pairs)),
        "ratio": round(float(np.median([b / s for b, s in pairs])), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=8192)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--hidden", type=int, nargs="+", default=[64, 1024])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    device = models.device_for(args.device)
    work = args.dir or Path(tempfile.mkdtemp(prefix="bench_tf_"))
    try:
        n_episodes = max(4, args.samples // 150 + 1)
        dataset = write_dataset(work / "dataset", episodes(n_episodes, 200, 0))
        overrides = {"samples": args.samples, "batch_size": args.batch, "plots": False, "device": args.device}
        if device.startswith("cuda"):
            overrides["resources"] = {"gpus_per_node": 1}
        tf = typed(TeacherForcedConfig, overrides, "stages.teacher_forced")
        out = {
            "samples": args.samples,
            "batch": args.batch,
            "device": device,
            "threads": torch.get_num_threads(),
        }
        for hidden in args.hidden:
            ckpt = checkpoint(dataset, hidden, work / f"ckpt_{hidden}")
            out[f"hidden_{hidden}"] = measure(dataset, ckpt, tf, args.repeats, device)
        print(json.dumps(out))
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
