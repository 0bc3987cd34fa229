"""Which demo a launch would use, read without building one: the settings, their digest and the marker a
finished build leaves. Kept apart from `build` (which imports torch, MuJoCo and the encoders) so that a
launch whose demo is already built pays none of those imports: about 1.8 s of every such launch."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DEFAULTS: dict[str, Any] = {
    "variant": "default",
    "seed": 0,
    "episodes": 20,
    "steps": 200,
    "train_steps": 300,
    "hidden": 64,
    "cameras": {"size": 64},  # two cameras (pipeline/demo/cameras.py); {"size": 0} records none
    "faults": {},
}
MARKER = "demo.json"
TEACHER_FORCED = "teacher_forced"  # the folder of the teacher_forced stage's models (models.json)
# Bump when the demo gains or changes what it builds, so a demo built by an older version is rebuilt.
BUILD_VERSION = 4


def settings(demo_cfg: Any) -> dict[str, Any]:
    raw = demo_cfg if isinstance(demo_cfg, Mapping) else _to_dict(demo_cfg)
    # `render_cache` configures the render_cache demo (pipeline/demo/render_cache.py, its own build and
    # digest), `deploy` the env the policy runs in (pipeline/demo/deploy_env.py, a file of its own): left
    # out here, so changing either does not rebuild this demo
    given = {
        k: v for k, v in dict(raw or {}).items() if v is not None and k not in ("render_cache", "deploy")
    }
    out = {**DEFAULTS, **given}
    out["faults"] = dict(out.get("faults") or {})
    out["cameras"] = {**DEFAULTS["cameras"], **dict(out.get("cameras") or {})}
    return out


def _to_dict(cfg: Any) -> dict[str, Any]:
    try:
        from omegaconf import OmegaConf

        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except Exception:  # noqa: BLE001 - a plain object without omegaconf
        return dict(cfg or {})


def digest(cfg: Mapping[str, Any]) -> str:
    keyed = {"build_version": BUILD_VERSION, **cfg}
    return hashlib.sha256(json.dumps(keyed, sort_keys=True, default=str).encode()).hexdigest()[:16]


def built_paths(target: Path, cfg: Mapping[str, Any]) -> dict[str, str] | None:
    """The built demo's paths when `target` holds a finished build of exactly these settings."""
    marker = target / MARKER
    if not marker.is_file():
        return None
    try:
        data = json.loads(marker.read_text())
    except (OSError, ValueError):
        return None
    paths = data.get("paths") if isinstance(data, dict) else None
    if not isinstance(paths, dict) or data.get("digest") != digest(cfg):
        return None  # not a marker this build wrote: built again (the marker is written last)
    if not all(isinstance(n, str) and _inside(target, n) for n in paths.values()):
        return None
    return {str(k): str(target / name) for k, name in paths.items()}


def _inside(root: Path, name: str) -> bool:
    """A marker's path stays in its demo folder (a hand-edited `../..` names nothing of the build)."""
    return (root / name).resolve().is_relative_to(root.resolve())
