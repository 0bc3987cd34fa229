"""The embedded demo: a dataset, a base checkpoint and a training config generated locally.

`ensure(demo_cfg, root)` returns the paths the launch fills in for `model.path`, `dataset.path` and
`training.path` when they are left null, building the variant once under `root/<variant>`.
`python -m pipeline.demo build [--variant default|faulty] [--out DIR]` builds one by hand.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def ensure(demo_cfg: Any, root: Path) -> dict[str, str]:
    """A demo already built is read off its marker, without importing the build (torch, MuJoCo)."""
    from pipeline.demo.marker import built_paths, settings

    cfg = settings(demo_cfg)
    found = built_paths(Path(root) / str(cfg["variant"]), cfg)
    if found is not None:
        return found
    from pipeline.demo.build import ensure as _ensure

    return _ensure(demo_cfg, root)
