"""Fingerprints of each DataLoader worker's random streams, to find streams forked identically.

PyTorch reseeds Python's `random`, numpy's global RNG and torch in every worker (base seed + worker
id). What it cannot reseed is a generator the dataset holds (`self.rng = np.random.default_rng(0)`,
a `random.Random`, a `torch.Generator`) or one a `worker_init_fn` reseeds with a fixed value: every
worker then draws the same augmentations, deterministically and wrongly. `watch(loader, folder)` wraps
the loader's `worker_init_fn`; after the user's function ran, each worker writes one JSON file with a
digest of every stream it can see. Workers started together share `torch.initial_seed() - id`, so the
determinism stage groups them by that and reports a stream whose digest repeats within a group.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()[:24]


def stream_state(value: Any) -> str | None:
    """A digest of a random generator's state, or None for anything that is not one."""
    if isinstance(value, np.random.Generator):
        return _sha(json.dumps(value.bit_generator.state, sort_keys=True, default=str).encode())
    if isinstance(value, np.random.RandomState):
        keys, pos = value.get_state()[1:3]
        return _sha(keys.tobytes() + str(pos).encode())
    if isinstance(value, random.Random):
        return _sha(repr(value.getstate()).encode())
    if isinstance(value, torch.Generator):
        return _sha(value.get_state().numpy().tobytes())
    return None


def streams(dataset: Any) -> dict[str, str]:
    """The global streams and the generators held by the dataset (two attribute levels deep)."""
    found = {
        "random (global)": _sha(repr(random.getstate()).encode()),
        "numpy.random (global)": _sha(np.random.get_state()[1].tobytes()),
        "torch (global)": _sha(torch.random.get_rng_state().numpy().tobytes()),
    }
    seen: set[int] = set()
    todo: list[tuple[str, Any, int]] = [("dataset", dataset, 0)]
    while todo:
        name, obj, depth = todo.pop()
        if id(obj) in seen or depth > 2:
            continue
        seen.add(id(obj))
        state = stream_state(obj)
        if state is not None:
            found[name] = state
            continue
        for key, value in vars(obj).items() if hasattr(obj, "__dict__") else []:
            if not key.startswith("__") and not isinstance(value, (str, bytes, int, float, torch.Tensor)):
                todo.append((f"{name}.{key}", value, depth + 1))
    return {k: v for k, v in found.items() if v}


class WorkerProbe:
    """The wrapped `worker_init_fn` (a class so that it pickles under the spawn start method)."""

    def __init__(self, folder: Path, user_fn: Callable[[int], Any] | None) -> None:
        self.folder, self.user_fn = Path(folder), user_fn

    def __call__(self, worker_id: int) -> None:
        if self.user_fn is not None:
            self.user_fn(worker_id)
        info = torch.utils.data.get_worker_info()
        record = {
            "worker": worker_id,
            "num_workers": getattr(info, "num_workers", None),
            "group": torch.initial_seed() - worker_id,
            "pid": os.getpid(),
            "streams": streams(getattr(info, "dataset", None)),
        }
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f".w{worker_id}-{os.getpid()}.tmp"
        tmp.write_text(json.dumps(record), encoding="utf-8")
        os.replace(tmp, self.folder / f"worker{worker_id}-{os.getpid()}.json")


def watch(loader: Any, folder: Path) -> Any:
    """Wrap `loader.worker_init_fn` (before the first iteration); returns the loader."""
    if getattr(loader, "num_workers", 0) > 0 and not isinstance(loader.worker_init_fn, WorkerProbe):
        loader.worker_init_fn = WorkerProbe(folder, loader.worker_init_fn)
    return loader


def duplicates(folder: Path) -> list[dict[str, Any]]:
    """Streams whose state is the same in two or more workers started together."""
    groups: dict[int, list[dict[str, Any]]] = {}
    for path in sorted(Path(folder).glob("worker*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            groups.setdefault(int(record["group"]), []).append(record)
        except (OSError, ValueError, KeyError, TypeError):
            continue
    found = []
    for group, records in sorted(groups.items()):
        by_state: dict[tuple[str, str], list[int]] = {}
        for record in records:
            for name, state in (record.get("streams") or {}).items():
                by_state.setdefault((name, state), []).append(int(record["worker"]))
        for (name, _state), workers in sorted(by_state.items()):
            if len(set(workers)) > 1:
                found.append({"stream": name, "workers": sorted(set(workers)), "group": group})
    return found
