"""The demo build's slow inputs kept between builds, keyed by everything they are made from: the oracle's
episodes and the policies trained on them, beside the rendered frames (`cameras.cache_dir`) in the user's
cache (`storage.user_cache`).

`demo=faulty` plants its faults after the rollouts and the trainings, so a faulty build after a default
one (or any later build with the same settings) reuses ~25 s of rollouts and training instead of
repeating them. A key covers every input (settings, the arrays trained on, the library versions, a
version bumped when the code that makes them changes), so a hit is what a rebuild would give: the
policy's weights and normalizer files are byte-identical (tested). An entry is judged when read
(`cache_entries.py`: its type, then its arrays' and its config's shapes against these settings and this
data); a damaged one is named on one log line, discarded and made again.
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

from pipeline.demo.cache_entries import Damaged, discard, expect_array, expect_names, kept, load_npz
from pipeline.errors import InputError, one_line
from pipeline.readers.base import read_json
from pipeline.storage import user_cache
from pipeline.storage.atomic import atomic_write_bytes

VERSION = 1  # bump when generate_episodes or train_policy change what they make
Episodes = list[dict[str, np.ndarray]]
LOSS_FILE = "final_loss.json"


def root() -> Path:
    return user_cache()


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
        if kept(path):
            return _kept_episodes(path, n, steps)
    except Damaged as exc:
        discard(path, exc)
    made = make()
    buffer = io.BytesIO()
    np.savez(buffer, **{f"{i}/{name}": a for i, e in enumerate(made) for name, a in e.items()})
    _keep(lambda: atomic_write_bytes(_mkdir(path), buffer.getvalue()))
    return made


def _kept_episodes(path: Path, n: int, steps: int) -> Episodes:
    """The kept episodes, or `Damaged`: exactly `n` episodes with the same arrays (names, dtypes, widths),
    each of `steps` rows, as `generate_episodes` makes them."""
    arrays = load_npz(path)
    names = sorted({k.split("/", 1)[-1] for k in arrays})
    expect_names(list(arrays), [f"{i}/{name}" for i in range(n) for name in names])
    for name in names:
        first = arrays[f"0/{name}"]
        for i in range(n):
            expect_array(f"{i}/{name}", arrays[f"{i}/{name}"], (steps, *first.shape[1:]), first.dtype)
    return [{name: arrays[f"{i}/{name}"] for name in names} for i in range(n)]


def policy(
    trained_on: Episodes, settings: Mapping[str, Any], train: Callable[[], tuple[Any, Any, Any]]
) -> tuple[Any, Any, Any]:
    """(policy, stats, spec) for a policy trained with `settings` on a dataset written from `trained_on`:
    reloaded from the cache (its `final_loss` too), or `train()` and kept as a saved checkpoint."""
    import torch

    from pipeline.demo.policy import save_pretrained

    folder = root() / "demo-policies" / key("policy", dict(settings), torch.__version__, arrays=trained_on)
    try:
        if kept(folder, folder=True):
            return _kept_policy(folder, trained_on, settings)
    except Damaged as exc:
        discard(folder, exc)
    made = train()

    def keep() -> None:
        scratch = Path(tempfile.mkdtemp(prefix=".policy-", dir=_mkdir(folder).parent))
        save_pretrained(made[0], made[1], scratch, made[2])
        (scratch / LOSS_FILE).write_text(json.dumps({"final_loss": made[0].final_loss}))
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


def _kept_policy(folder: Path, trained_on: Episodes, settings: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    """The kept (policy, stats, spec), or `Damaged`: its config.json must declare the shapes training on
    `trained_on` with `settings` gives (checked before any module is built from it), its weights the
    shapes that config describes, and its final loss must be a number."""
    from pipeline.demo.policy import load_pretrained

    try:
        config = read_json(folder / "config.json", "the kept demo policy's config.json")
        problem = _config_mismatch(config, trained_on, settings)
        if problem:
            raise Damaged(f"config.json {problem}")
        loss = read_json(folder / LOSS_FILE, "the kept demo policy's final loss")["final_loss"]
        if loss is not None and (isinstance(loss, bool) or not isinstance(loss, int | float)):
            raise Damaged(f"{LOSS_FILE} field 'final_loss' is {loss!r}, expected a number or null")
        loaded = load_pretrained(folder)
    except InputError as exc:  # it names the file inside the entry, which `discard` names itself
        raise Damaged(one_line(exc).removeprefix(f"{folder}/")) from exc
    except (OSError, AttributeError, KeyError, TypeError, ValueError) as exc:  # a field missing or mistyped
        raise Damaged(f"{type(exc).__name__}: {one_line(exc)}") from exc
    loaded.policy.final_loss = loss  # type: ignore[attr-defined]
    return loaded.policy, loaded.stats, loaded.spec


def _config_mismatch(config: Any, trained_on: Episodes, settings: Mapping[str, Any]) -> str | None:
    """What in a kept policy's config.json differs from what `train_policy` declares for this data (each
    row's width, each camera's [3, H, W]) and these settings, or None."""
    from pipeline.demo.cameras import CAMERAS
    from pipeline.demo.dataset import ROW_KEYS, VECTOR_KEYS

    first = trained_on[0] if trained_on else {}
    wanted = {f: [int(first[r].shape[1])] for f, r in zip(VECTOR_KEYS, ROW_KEYS, strict=True) if r in first}
    wanted |= {c: [3, *(int(d) for d in first[c].shape[1:3])] for c in CAMERAS if c in first}
    inputs, outputs = dict(config["input_features"]), dict(config["output_features"])
    declared = {k: f.get("shape") for k, f in {**inputs, **outputs}.items()}
    for feature, shape in wanted.items():
        if declared.get(feature) != shape:
            found = declared.get(feature)
            return f"feature {feature!r} has shape {found}, expected {shape} (its training data's)"
    cameras = [k for k, f in inputs.items() if f.get("type") == "VISUAL"]
    for camera in cameras:
        if camera not in wanted:
            return f"feature {camera!r} is a camera its training data lacks"
    sizes = {
        "state_dim": sum(int(np.prod(declared[k])) for k in inputs if k not in cameras),
        "action_dim": sum(int(np.prod(declared[k])) for k in outputs),
        "cameras": len(cameras),
    }
    if "hidden" in settings:
        sizes["hidden"] = int(settings["hidden"])
    for field, size in sizes.items():
        if config.get(field) != size:
            return f"field {field!r} is {config.get(field)!r}, expected {size}"
    return None


def _mkdir(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _keep(write: Callable[[], object]) -> None:
    try:
        write()
    except OSError:
        pass  # an unwritable cache costs the next build time, never the result
