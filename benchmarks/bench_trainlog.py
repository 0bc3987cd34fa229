"""Overhead of the metrics stream over the bare training loop, as a ratio measured in the same run.

    python benchmarks/bench_trainlog.py [--steps 300] [--repeats 5] [--hidden 64] [--json OUT]

The loop is the reference trainer's (the demo policy size, Adam, grad clipping) on CPU with one thread.
Three variants run interleaved, `repeats` times each, and the medians are compared:
bare loop; + `MetricsLog.step` with loss and grad norm (hex floats, one flushed line per step);
+ a parameter digest on every step (the stage's default, the worst case).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from pipeline import trainlog


def loop(steps: int, hidden: int, out: Path | None, digest_every: int | None) -> float:
    torch.manual_seed(0)
    x, y = torch.randn(4096, 20), torch.randn(4096, 6)
    model = torch.nn.Sequential(
        torch.nn.Linear(20, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, 6),
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    log = None if out is None else trainlog.MetricsLog(out, digest_every=digest_every)
    start = time.perf_counter()
    for step in range(1, steps + 1):
        index = torch.randint(0, len(x), (32,))
        loss = torch.nn.functional.mse_loss(model(x[index]), y[index])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if log is not None:
            log.step(step, loss=loss, grad_norm=grad_norm, model=model)
    elapsed = time.perf_counter() - start
    if log is not None:
        log.close()
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    times: dict[str, list[float]] = {"bare": [], "stream": [], "stream+digest": []}
    with tempfile.TemporaryDirectory() as tmp:
        loop(20, args.hidden, None, None)  # warm-up
        for _ in range(args.repeats):
            times["bare"].append(loop(args.steps, args.hidden, None, None))
            times["stream"].append(loop(args.steps, args.hidden, Path(tmp) / "s", None))
            times["stream+digest"].append(loop(args.steps, args.hidden, Path(tmp) / "d", 1))
    median = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "steps": args.steps,
        "repeats": args.repeats,
        "hidden": args.hidden,
        "median_s": median,
        "per_step_ms": {k: 1000 * v / args.steps for k, v in median.items()},
        "ratio_stream": median["stream"] / median["bare"],
        "ratio_stream_digest": median["stream+digest"] / median["bare"],
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
