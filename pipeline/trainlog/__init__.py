"""A per-step metrics stream any PyTorch loop can emit, exact enough to prove two runs bit-identical.

Trainers usually print losses to six decimals, which hides every drift smaller than that. This module
writes one JSON line per step where every float is also stored with `float.hex()`, so the determinism
stage compares bits, not printed digits. Two lines of user code:

    log = trainlog.MetricsLog(out_dir)                       # once, before the loop
    log.step(step, loss=loss, grad_norm=gn, model=model)     # once per optimizer step

`model=` adds a parameter digest (sha256 of the state dict bytes in sorted key order) on the steps
chosen by `digest_every`/`digest_steps`; `batch=` adds a digest of the step's input batch (so a
divergence says "the data differ", and repeated batches show duplicated worker streams). Under
`torchrun` each rank writes its own file (`metrics.rank<N>.jsonl`) so the stage can check that the ranks
agree.

The horizon: `log.event("epoch_end")` (also `eval`, `checkpoint_save`, `lr_change`) marks where those
happened, in `events.jsonl`; when the stage names events that must lie inside the smoke run, it runs
the command with a step cap and `log.stop` turns true once they were seen and a few steps after them
were logged (`if log.stop: break`). `log.watch(loader)` fingerprints each DataLoader worker's random
streams (`pipeline.trainlog.workers`), so streams forked identically into every worker are found.

Opening the log also applies what the determinism stage asked for through the environment
(`PREFLIGHT_DETERMINISTIC=1|warn|0`) and, with `warn`, records the nondeterministic ops torch warned
about in `determinism.json` next to the stream.
"""

from __future__ import annotations

import importlib
from typing import Any

from pipeline.trainlog.spec import (  # noqa: F401  (the trainer API: light, no torch)
    ENV_AFTER,
    ENV_HORIZON,
    ENV_KEYS,
    ENV_MIN_STEPS,
    ENV_MODE,
    EVENTS_FILE,
    INTENT_FILE,
    KNOWN_EVENTS,
    METRICS_FILE,
    NONDET_RE,
    NORM_KEY_RE,
    REPORT_FILE,
    Reloaded,
    metrics_name,
    rank_and_world,
)


def __getattr__(name: str) -> Any:
    """`trainlog.MetricsLog` and the rest of the log's API, imported on first use: the stages import
    `pipeline.trainlog.spec` at every launch, and that must not import torch."""
    log = importlib.import_module("pipeline.trainlog.log")
    try:
        return getattr(log, name)
    except AttributeError:
        raise AttributeError(f"module 'pipeline.trainlog' has no attribute {name!r}") from None
