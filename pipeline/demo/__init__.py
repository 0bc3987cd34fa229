"""The embedded demo: a dataset, a base checkpoint and a training config generated locally.

Being built (issue 3). `ensure(demo_cfg, root)` returns the paths the launch fills in for
`model.path`, `dataset.path` and `training.path` when they are left null.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def ensure(demo_cfg: Any, root: Path) -> dict[str, str]:
    return {}
