"""The demo build's slow inputs kept between builds, keyed by everything they are made from: the oracle's
episodes and the policies trained on them, beside the rendered frames (`cameras.cache_dir`).

`demo=faulty` plants its faults after the rollouts and the trainings, so a faulty build after a default
one (or any later build with the same settings) reuses ~25 s of rollouts and training instead of
repeating them. A key covers every input (settings, the arrays trained on, the library versions, a
version bumped when the code that makes them changes), so a hit is what a rebuild would give: the
policy's weights and normalizer files are byte-identical (tested). A damaged entry is made again.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.demo.cameras import cache_dir
from pipeline.errors import InputError
from pipeline.storage.atomic import atomic_write_bytes

VERSION = 1  # bump when generate_episodes or train_policy change what they make
Episodes = list[dict[str, np.ndarray]]


def root() -> Path:
    return cache_dir().parent


def key(*parts: Any, arrays: Sequence[Mapping[str, np.ndarray]] = ()) -> str:
    """sha256 of the parts (JSON) and of every array's name, dtype, shape and bytes."""
    h = hashlib.sha256(json.dumps([VERSION, *parts], default=str, sort_keys=True).encode())
    for i, group in enumerate(arrays):
        for name in sorted(group):
            a = np.ascontiguousarray(group[name])
            h.update(f"{i}/{name}/{a.dtype.str}/{a.shape}".encode())
            h.update(a.tobytes())
    return h.hexdigest()[:32]


def episodes(n: int, steps: int, seed: int, make: Callable[[], Episodes]) -> Episodes:
    """The oracle's episodes for (n, steps, seed): from the cache, or `make()` and kept."""
    import mujoco
    import ogbench

    versions = (mujoco.__version__, getattr(ogbench, "__version__", None))
    path = root() / "demo-episodes" / f"{key('episodes', n, steps, seed, *versions)}.npz"
    try:
        with np.load(path, allow_pickle=False) as z:
            names = sorted({k.split("/", 1)[1] for k in z.files})
            return [{name: z[f"{i}/{name}"] for name in names} for i in range(n)]
    except (OSError, ValueError, KeyError):
        pass  # not kept yet, or damaged: made again and replaced
    made = make()
    buffer = io.BytesIO()
    np.savez(buffer, **{f"{i}/{name}": a for i, e in enumerate(made) for name, a in e.items()})
    _keep(lambda: atomic_write_bytes(_mkdir(path), buffer.getvalue()))
    return made


def policy(
    trained_on: Episodes, settings: Mapping[str, Any], train: Callable[[], tuple[Any, Any, Any]]
) -> tuple[Any, Any, Any]:
    """(policy, stats, spec) for a policy trained with `settings` on a dataset written from `trained_on`:
    reloaded from the cache (its `final_loss` too), or `train()` and kept as a saved checkpoint."""
    import torch

    from pipeline.demo.policy import load_pretrained, save_pretrained

    folder = root() / "demo-policies" / key("policy", dict(settings), torch.__version__, arrays=trained_on)
    try:
        loss = json.loads((folder / "final_loss.json").read_text())["final_loss"]
        loaded = load_pretrained(folder)
        loaded.policy.final_loss = loss  # type: ignore[attr-defined]
        return loaded.policy, loaded.stats, loaded.spec
    except (OSError, ValueError, KeyError, InputError):
        pass  # not kept yet, damaged, or being replaced by a concurrent build: trained again
    made = train()

    def keep() -> None:
        scratch = Path(tempfile.mkdtemp(prefix=".policy-", dir=_mkdir(folder).parent))
        save_pretrained(made[0], made[1], scratch, made[2])
        (scratch / "final_loss.json").write_text(json.dumps({"final_loss": made[0].final_loss}))
        if folder.exists():  # damaged (it did not load): moved aside, then replaced
            stale = folder.with_name(f".stale-{scratch.name}")
            folder.rename(stale)
            shutil.rmtree(stale, ignore_errors=True)
        try:
            scratch.rename(folder)
        except OSError:  # a concurrent build kept the same policy first: keep theirs
            shutil.rmtree(scratch, ignore_errors=True)

    _keep(keep)
    return made


def _mkdir(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _keep(write: Callable[[], object]) -> None:
    try:
        write()
    except OSError:
        pass  # an unwritable cache costs the next build time, never the result
