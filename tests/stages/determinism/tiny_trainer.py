"""A user's own smoke trainer, as small as a real one gets: what `train_cmd` may point at.

Real torch training (a linear model, a few plain SGD steps on seeded random data) with the two
`pipeline.trainlog` lines. The update is written out rather than taken from `torch.optim`: an optimizer's
first use imports `torch._dynamo`, about 1 s of CPU (as long as torch's own import) in every run without
the stage's deterministic mode (the bare pair's; that mode's `torch.use_deterministic_algorithms` imports
it anyway), and no check of the stage depends on which optimizer a trainer uses (the reference trainer
keeps Adam).
Test hooks: `--crash-if-out-contains twin_b` makes one twin exit 1; `--nondet-op` hits an op torch has
no deterministic CPU implementation for (`Tensor.put_`);
`--own-deterministic` switches deterministic algorithms on in the trainer itself (as some jobs do);
`--abort-at-exit-rank 1` makes that torchrun rank abort (SIGABRT) after its last logged step, as a rank
whose process-group teardown aborts does.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

from pipeline import trainlog


def sgd_step(model: torch.nn.Module, lr: float) -> None:
    """`p -= lr * grad`, then the gradients cleared for the next backward."""
    with torch.no_grad():
        for param in model.parameters():
            param -= lr * param.grad
            param.grad = None


def wait_for_rank_zero(out: Path, limit_s: float = 120.0) -> None:
    """Until rank 0 closed its log (its report is written last): the abort then comes after every rank
    trained, as a teardown abort does."""
    deadline = time.monotonic() + limit_s
    while not (out / "determinism.rank0.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--crash-if-out-contains", default="")
    parser.add_argument("--nondet-op", action="store_true")
    parser.add_argument("--own-deterministic", action="store_true")
    parser.add_argument("--abort-at-exit-rank", type=int, default=-1)
    args = parser.parse_args()
    if args.own_deterministic:
        torch.use_deterministic_algorithms(True)
    if args.crash_if_out_contains and args.crash_if_out_contains in str(args.out):
        print("planted crash", file=sys.stderr)
        return 1
    torch.manual_seed(args.seed)
    x, y = torch.randn(64, 3), torch.randn(64, 1)
    model = torch.nn.Linear(3, 1)
    log = trainlog.MetricsLog(args.out)
    for step in range(1, args.steps + 1):
        if args.nondet_op:
            torch.zeros(4).put_(torch.tensor([0, 0]), torch.ones(2))
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        sgd_step(model, lr=1e-2)
        log.step(step, loss=loss, grad_norm=grad_norm, model=model)
    log.close()
    if trainlog.rank_and_world()[0] == args.abort_at_exit_rank:
        wait_for_rank_zero(args.out)
        print("terminate called without an active exception", file=sys.stderr, flush=True)
        os.abort()
    return 0


if __name__ == "__main__":
    sys.exit(main())
