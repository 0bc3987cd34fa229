"""The demo's D: the OGBench env its episodes came from, which is where the demo's policy runs.

A user names D on a command line (`readers.deploy`); the demo has no such line, so its input provider
describes the env as a D file (`deploy.path`): the two cameras at the size the demo renders them, the
proprioceptive state and the cube's state it reads from the env's `info` each step, at the demo's control
rate. `demo=faulty` plants D faults here (`demo.deploy.faults`): a camera rendered at another size than
the training frames (`camera_size`), or two cameras' frames exchanged between their keys (`swap_cameras`:
each key then says, in `source`, whose frames it carries). Kept apart from the demo's build (no torch, no
MuJoCo): a launch writes this small file each time, and the demo's build digest leaves `deploy` out.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.demo.cameras import CAMERAS, ENV_ID
from pipeline.demo.features import ACTION_NAMES, ENV_NAMES, FPS, STATE_NAMES
from pipeline.storage import atomic_write_json

# what the env gives each step is what the demo reads from its info to record (demo/dataset.py `_state`,
# `_env_state`) at its control rate: one reader of the env, so the D of the clean demo is the env itself
STATE, CUBE, ACTION = STATE_NAMES, ENV_NAMES, ACTION_NAMES
FOLDER = "deploy"


def describe(demo_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The env as a D file's content, with `demo.deploy.faults` applied."""
    size = int((demo_cfg.get("cameras") or {}).get("size") or 0)
    faults = dict((demo_cfg.get("deploy") or {}).get("faults") or {})
    features: dict[str, Any] = {}
    for key in CAMERAS if size else ():
        px = int((faults.get("camera_size") or {}).get(key, size))
        features[key] = {"role": "image", "shape": [3, px, px], "fps": FPS, "source": key.rsplit(".", 1)[-1]}
    swap = faults.get("swap_cameras") or []
    if len(swap) == 2 and all(k in features for k in swap):
        a, b = swap
        features[a], features[b] = features[b], features[a]
    features["observation.state"] = {"role": "state", "shape": [len(STATE)], "names": STATE}
    features["observation.environment_state"] = {"role": "env", "shape": [len(CUBE)], "names": CUBE}
    features["action"] = {"role": "action", "shape": [len(ACTION)], "names": ACTION}
    return {
        "kind": f"ogbench/{ENV_ID}",
        "read_by": "the demo's settings of the OGBench env its episodes came from (demo/deploy_env.py)",
        "fps": FPS,
        "rename_map": {},
        "features": features,
        "faults": faults,
    }


def write(demo_cfg: Mapping[str, Any], root: Path) -> Path:
    """`<demo folder>/deploy/<digest>.json`: the same env is the same file, so reuse holds."""
    content = describe(demo_cfg)
    text = json.dumps(content, sort_keys=True)
    path = Path(root) / FOLDER / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
    if not path.is_file():
        atomic_write_json(path, content)
    return path.resolve()
