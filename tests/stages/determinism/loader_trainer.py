"""A third-party smoke trainer with a DataLoader over named samples: what `train_cmd` may point at.

Real torch training (a linear model, plain SGD written out as in `tiny_trainer.py`, so a run without the
stage's deterministic mode does not pay `torch.optim`'s import of `torch._dynamo`; batches of 4 from 32
named samples: 8 steps per epoch) with
the trainlog lines a user adds: `log.step(..., batch=x)`, `log.event("epoch_end")`, `log.watch(loader)`,
`if log.stop: break`. Each flag plants one real, common bug:

- `--order hashset`: the sample order is `list(set(names))`, so it follows str hashing (PYTHONHASHSEED).
- `--unseeded-from-epoch K`: epochs >= K shuffle from OS entropy (seeded before: a short run passes).
- `--worker-rng dataset`: the dataset holds `np.random.default_rng(0)` for its augmentation noise; with
  `--workers N` every worker gets a copy of the same generator state.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
import torch

from pipeline import trainlog

SAMPLES, BATCH = 32, 4


class Named(torch.utils.data.Dataset):
    """Samples keyed by name; optional augmentation noise from a generator the dataset holds."""

    def __init__(self, seed: int, worker_rng: str) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.names = [f"sample-{i:03d}" for i in range(SAMPLES)]
        self.x = torch.randn(SAMPLES, 3, generator=generator)
        self.y = torch.randn(SAMPLES, 1, generator=generator)
        self.rng = np.random.default_rng(0) if worker_rng == "dataset" else None

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.x[index]
        if self.rng is not None:
            x = x + torch.as_tensor(self.rng.normal(scale=0.1, size=3), dtype=torch.float32)
        return x, self.y[index]


def epoch_order(args: argparse.Namespace, dataset: Named, epoch: int) -> list[int]:
    if args.order == "hashset":
        return [dataset.names.index(name) for name in set(dataset.names)]
    generator = torch.Generator()
    unseeded = args.unseeded_from_epoch is not None and epoch >= args.unseeded_from_epoch
    seed = int.from_bytes(os.urandom(8), "little") >> 1 if unseeded else args.seed * 1000 + epoch
    return torch.randperm(SAMPLES, generator=generator.manual_seed(seed)).tolist()


def sgd_step(model: torch.nn.Module, lr: float) -> None:
    """`p -= lr * grad`, then the gradients cleared for the next backward."""
    with torch.no_grad():
        for param in model.parameters():
            param -= lr * param.grad
            param.grad = None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--order", choices=("seeded", "hashset"), default="seeded")
    parser.add_argument("--unseeded-from-epoch", type=int, default=None)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--worker-rng", choices=("none", "dataset"), default="none")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    dataset = Named(args.seed, args.worker_rng)
    model = torch.nn.Linear(3, 1)
    log = trainlog.MetricsLog(args.out)
    step, epoch = 0, 0
    while step < args.steps and not log.stop:
        loader = torch.utils.data.DataLoader(
            dataset, batch_size=BATCH, sampler=epoch_order(args, dataset, epoch), num_workers=args.workers
        )
        for x, y in log.watch(loader):
            step += 1
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
            sgd_step(model, lr=1e-2)
            log.step(step, loss=loss, grad_norm=grad_norm, model=model, batch=x)
            if step >= args.steps or log.stop:
                break
        else:
            log.event("epoch_end")
        epoch += 1
    log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
