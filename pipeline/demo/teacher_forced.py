"""The demo's models for the teacher_forced stage: a second policy to compare, and, in `demo=faulty`,
a checkpoint that does not match its manifest and a collapsed one.

The second policy (`noise_injected`) is trained, with another seed, on a copy of the demo episodes whose
observations carry injected perturbations (Gaussian noise on state and environment state, actions kept,
as in DART-style recovery data): it sees off-nominal states with the nominal corrective action. Every
model gets a `<name>.sha256` manifest (`sha256  path` lines, as `sha256sum` writes them) and the list
goes to `teacher_forced/models.json`, which the stage reads when its `models` config is empty.

`load_policy(path, device)` is the loader the list names: the demo checkpoint as a batched `predict`.
"""

from __future__ import annotations

import copy
import json
import shutil
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from pipeline.demo import memo
from pipeline.demo.dataset import write_dataset
from pipeline.demo.marker import TEACHER_FORCED as FOLDER
from pipeline.demo.policy import (
    ACTION_KEY,
    camera_keys,
    load_pretrained,
    normalize,
    save_pretrained,
    unnormalize,
)
from pipeline.demo.train import train_policy
from pipeline.storage.files import refuse_pickles

LOADER = "pipeline.demo.teacher_forced:load_policy"
NOISE = 0.05  # perturbation std as a fraction of each observation dim's std


class DemoModel:
    """A demo checkpoint scored in batches on `device`. The saved normalizers are affine per dim, so the
    vector inputs' and the action's are folded once into the first and last Linear layers (`self.net`);
    each camera's per-channel affine is applied after its encoder's first layer, an average pool (linear,
    so the same function on 16x fewer values). `self.policy` stays the checkpoint's own module
    (normalized in, normalized out)."""

    def __init__(self, path: str, device: str) -> None:
        refuse_pickles(Path(path), "a demo policy checkpoint")
        self.loaded = load_pretrained(path)
        self.device = torch.device(device)
        self.policy = self.loaded.policy.to(self.device)
        self.input_features = list(self.loaded.spec.input_features)
        self.cameras = camera_keys(self.loaded.spec)
        self.vectors = [k for k in self.input_features if k not in self.cameras]
        self.inputs = {k: self._affine(k, normalize) for k in self.input_features}
        self.output = self._affine(ACTION_KEY, unnormalize)
        self.net = self._folded()

    def _affine(self, key: str, fn: Any) -> tuple[torch.Tensor, torch.Tensor]:
        shape = list(({**self.loaded.spec.input_features, **self.loaded.spec.output_features})[key]["shape"])
        probe = (shape[0], 1, 1) if key in self.cameras else (int(shape[0]),)  # per channel or per dim
        stats, mode = self.loaded.stats.get(key, {}), self.loaded.mode(key)
        zero = np.asarray(fn(np.zeros(probe, np.float32), stats, mode), np.float32)
        gain = np.asarray(fn(np.ones(probe, np.float32), stats, mode), np.float32) - zero
        return torch.as_tensor(gain, device=self.device), torch.as_tensor(zero, device=self.device)

    @torch.no_grad()
    def _folded(self) -> torch.nn.Sequential:
        """W(g*x + o) + b = (W*g) x + (W o + b) in, g_out*(W x + b) + o_out out: the same function. Only
        the vector columns of the first layer fold; the camera features come after them."""
        net = copy.deepcopy(self.policy.net)
        first, last = net[0], net[-1]
        gain = torch.cat([self.inputs[k][0] for k in self.vectors])
        offset = torch.cat([self.inputs[k][1] for k in self.vectors])
        width = gain.numel()
        first.bias += first.weight[:, :width] @ offset
        first.weight[:, :width] *= gain
        out_gain, out_offset = self.output
        last.weight *= out_gain[:, None]
        last.bias.mul_(out_gain).add_(out_offset)
        return net.eval()

    @torch.inference_mode()
    def predict(self, batch: Mapping[str, np.ndarray]) -> torch.Tensor:
        """Vectors raw, cameras float 0-1 [B, 3, H, W] (the loader's view), actions raw."""
        x = np.concatenate([batch[k] for k in self.vectors], axis=-1, dtype=np.float32)
        parts = [torch.from_numpy(x).to(self.device)]
        for key, encoder in zip(self.cameras, self.policy.encoders, strict=True):
            gain, zero = self.inputs[key]
            pool, rest = encoder.net[0], encoder.net[1:]
            parts.append(rest(pool(_shared(batch[key]).to(self.device)) * gain + zero))
        return self.net(torch.cat(parts, dim=-1))


def _shared(frames: np.ndarray) -> torch.Tensor:
    """The stage's read-only frames as a tensor without a copy (a copy per call was a fifth of a probe
    search): safe, since the model only reads them (the pool makes a new tensor)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(np.asarray(frames, np.float32))


def load_policy(path: str, device: str) -> DemoModel:
    return DemoModel(path, device)


def write_manifest(checkpoint: Path, manifest: Path) -> Path:
    """`sha256  relative/path` for every file of the checkpoint (the pin the stage verifies)."""
    from pipeline.stages.teacher_forced.provenance import hash_tree

    lines = [f"{digest}  {name}\n" for name, digest in sorted(hash_tree(checkpoint).items())]
    manifest.write_text("".join(lines))
    return manifest


def perturb(episodes: list[dict[str, np.ndarray]], seed: int) -> list[dict[str, np.ndarray]]:
    """Observations with injected noise, actions unchanged (the recovery action from a perturbed state)."""
    rng = np.random.default_rng(seed)
    out = copy.deepcopy(episodes)
    for key in ("state", "env_state"):
        spread = np.concatenate([e[key] for e in episodes]).std(axis=0)
        for episode in out:
            noise = rng.normal(size=episode[key].shape) * spread * NOISE
            episode[key] = (episode[key] + noise).astype(np.float32)
    return out


def _entry(out: Path, name: str, path: Path, seeds: list[int]) -> dict[str, Any]:
    manifest = out / FOLDER / f"{name}.sha256"
    if not manifest.exists():
        write_manifest(path, manifest)
    rel = path.relative_to(out).as_posix()
    return {
        "name": name,
        "path": f"../{rel}",
        "loader": LOADER,
        "manifest": manifest.name,
        "seeds": seeds,
    }


def _faulty(out: Path, base: Path) -> list[dict[str, Any]]:
    """A checkpoint altered after its manifest was written, and one with every weight zeroed."""
    folder = out / FOLDER
    tampered = folder / "tampered"
    shutil.copytree(base, tampered)
    write_manifest(tampered, folder / "tampered.sha256")
    weights = load_file(str(tampered / "model.safetensors"))
    first = next(iter(sorted(weights)))
    weights[first] = weights[first] + 0.01
    save_file(weights, str(tampered / "model.safetensors"))
    collapsed = folder / "collapsed"
    shutil.copytree(base, collapsed)
    zeros = {k: torch.zeros_like(v) for k, v in load_file(str(collapsed / "model.safetensors")).items()}
    save_file(zeros, str(collapsed / "model.safetensors"))
    return [_entry(out, "tampered", tampered, []), _entry(out, "collapsed", collapsed, [])]


def build_models(out: Path, cfg: Mapping[str, Any], episodes: list[dict[str, np.ndarray]]) -> Path:
    """Everything the teacher_forced stage compares on the demo, listed in `teacher_forced/models.json`."""
    folder = Path(out) / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    seed = int(cfg["seed"])
    noisy = perturb(episodes, seed + 1)
    fit = {"seed": seed + 1, "steps": int(cfg["train_steps"]), "hidden": int(cfg["hidden"])}

    def train() -> tuple[Any, Any, Any]:
        scratch = folder / "noise_injected_data"
        write_dataset(scratch, noisy)
        try:
            return train_policy(scratch, **fit)
        finally:
            shutil.rmtree(scratch)

    policy, stats, spec = memo.policy(noisy, fit, train)
    second = save_pretrained(policy, stats, folder / "noise_injected", spec)
    models = [_entry(out, "base", out / "model", [seed]), _entry(out, "noise_injected", second, [seed + 1])]
    if cfg.get("faults"):
        models += _faulty(out, out / "model")
    listing = {"baseline": "base", "models": models}
    (folder / "models.json").write_text(json.dumps(listing, indent=2) + "\n")
    return folder / "models.json"
