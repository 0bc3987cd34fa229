"""teacher_forced scoring throughput with images in the batch vs the bare batched forward of the same
model, same process; the frame decoding timed apart from the model.

    python benchmarks/bench_teacher_forced.py [--samples 2048] [--batch 256] [--hidden 64 1024]
                                              [--repeats 5] [--device auto] [--dir DIR]

Writes a LeRobot v3.0 dataset with two 64x64 AV1 cameras (`observation.images.front` and `.wrist`, the
demo's shape), a 2-d state and action, episodes of 200 frames, and per hidden width a small image
policy (a conv encoder per camera, the state, an MLP head of that width). Then, on the same sampled rows:

- decode: the stage's one decode of both cameras at the samples (`inputs.Feeds.decode`, one seek per
          episode and camera), timed once and reported apart (`decode_s`, frames per second);
- bare:   the network's forward over batches of the already-decoded images and state as tensors on
          the device (the ceiling: the network alone);
- stage:  `evaluate.score_model`, the stage's per-model path: the model's batched `predict` on the
          numpy batch the stage builds (images float32 [B,3,64,64] in 0-1), error metrics, the
          collapse / NaN findings and the 16-sample determinism probe.

bare and stage are timed in turn `--repeats` times (a shared machine's load drift hits both). Prints one
JSON line: per width the best samples/s of each and the median of the paired ratios stage/bare (aim >=
0.8), with the decode time and the stage's model time apart.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipeline.demo.videos import restore_scheduling  # noqa: E402
from pipeline.stages.config import typed  # noqa: E402
from pipeline.stages.teacher_forced import ModelSpec, TeacherForcedConfig, evaluate, inputs, models  # noqa: E402
from pipeline.stages.teacher_forced.samples import read_frames, select  # noqa: E402
from tests.stages.teacher_forced.pixels import CAMERAS, write_dataset  # noqa: E402

SIDE = 64


class Net(torch.nn.Module):
    """A conv encoder per camera (shared shape, own weights), the state, an MLP head."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.encoders = torch.nn.ModuleList(
            torch.nn.Sequential(
                torch.nn.Conv2d(3, 16, 5, stride=2),
                torch.nn.ReLU(),
                torch.nn.Conv2d(16, 32, 3, stride=2),
                torch.nn.ReLU(),
                torch.nn.AdaptiveAvgPool2d(1),
                torch.nn.Flatten(),
            )
            for _ in CAMERAS
        )
        self.head = torch.nn.Sequential(
            torch.nn.Linear(32 * len(CAMERAS) + 2, hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(hidden, hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(hidden, 2),
        )

    def forward(self, images: list[torch.Tensor], state: torch.Tensor) -> torch.Tensor:
        feats = [enc(x) for enc, x in zip(self.encoders, images, strict=True)]
        return self.head(torch.cat([*feats, state], dim=-1))


class ImagePolicy:
    """The model behind the stage's interface: typed `input_features`, numpy batch in."""

    def __init__(self, hidden: int, device: str) -> None:
        torch.manual_seed(0)
        self.device = torch.device(device)
        self.net = Net(hidden).to(self.device).eval()
        self.input_features = {k: {"type": "VISUAL", "shape": [3, SIDE, SIDE]} for k in CAMERAS}
        self.input_features["observation.state"] = {"type": "STATE", "shape": [2]}

    @torch.inference_mode()
    def predict(self, batch: Mapping[str, Any]) -> torch.Tensor:
        images = [torch.tensor(batch[k], device=self.device) for k in CAMERAS]  # the stage's are read-only
        return self.net(images, torch.tensor(batch["observation.state"], device=self.device))


def timed(fn) -> float:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start


def shared_inputs(dataset: Path, tf: TeacherForcedConfig, obj: ImagePolicy) -> tuple[Any, dict]:
    """The stage's shared samples with both cameras decoded once (the decode timed by the stage)."""
    keys = list(obj.input_features)
    frames = read_frames(dataset, ["observation.state", tf.action_key])
    rows = select(frames, tf.samples, tf.seed)
    declared = {"m": inputs.declare(obj, keys)}
    start = time.perf_counter()
    shared = evaluate.prepare(tf, frames, rows, ["all"] * len(rows), declared)
    shared.feeds.batch("m")  # the 0-1 float views, converted once for every model
    prepared = time.perf_counter() - start
    decode = sum(shared.feeds.decode_s.values())
    decoded = sum(len(v) for v in shared.feeds.decoded_rows.values())
    return shared, {
        "decode_s": round(decode, 3),
        "decode_fps": round(decoded / decode),
        "prepare_s": round(prepared, 3),
    }


def measure(shared: Any, tf: TeacherForcedConfig, hidden: int, repeats: int, device: str) -> dict:
    obj = ImagePolicy(hidden, device)
    model = models.Loaded("m", obj, list(obj.input_features), models.adapt(obj, device, "bench"))
    spec = ModelSpec(name="m", path="bench", loader="bench")
    batch = shared.feeds.batch("m")
    images = [torch.tensor(batch[k], device=obj.device) for k in CAMERAS]
    state = torch.tensor(batch["observation.state"], device=obj.device)

    def bare() -> None:
        with torch.inference_mode():
            for start in range(0, len(state), tf.batch_size):
                part = slice(start, start + tf.batch_size)
                obj.net([x[part] for x in images], state[part])

    def stage() -> None:
        evaluate.score_model(tf, spec, model, shared)

    bare(), stage()  # warm-up
    pairs = [(timed(bare), timed(stage)) for _ in range(repeats)]  # interleaved: load drift hits both
    n = len(state)
    _, run = evaluate.score_model(tf, spec, model, shared)
    return {
        "bare_sps": round(n / min(p[0] for p in pairs)),
        "stage_sps": round(n / min(p[1] for p in pairs)),
        "ratio": round(float(np.median([b / s for b, s in pairs])), 3),
        "model_s": round(run.summary["inference_s"], 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--hidden", type=int, nargs="+", default=[64, 1024])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    device = models.device_for(args.device)
    work = args.dir or Path(tempfile.mkdtemp(prefix="bench_tf_"))
    try:
        n_episodes = max(4, args.samples // 150 + 1)
        start = time.perf_counter()
        dataset = write_dataset(work / "dataset", n_episodes, 200, side=SIDE, codec="libsvtav1")
        restore_scheduling()  # the in-process AV1 encode left this thread real-time (demo/videos.py)
        written = time.perf_counter() - start
        overrides = {"samples": args.samples, "batch_size": args.batch, "plots": False, "device": args.device}
        if device.startswith("cuda"):
            overrides["resources"] = {"gpus_per_node": 1}
        tf = typed(TeacherForcedConfig, overrides, "stages.teacher_forced")
        shared, decode = shared_inputs(dataset, tf, ImagePolicy(64, device))
        out = {
            "samples": args.samples,
            "batch": args.batch,
            "device": device,
            "threads": torch.get_num_threads(),
            "cameras": f"{len(CAMERAS)} x {SIDE}x{SIDE} AV1, {n_episodes} episodes",
            "write_s": round(written, 1),
            **decode,
        }
        for hidden in args.hidden:
            out[f"hidden_{hidden}"] = measure(shared, tf, hidden, args.repeats, device)
        print(json.dumps(out))
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
