"""The demo's eval-side reload, the loader the determinism stage's reload check is pointed at.

    stages.determinism.reload.loader: pipeline.demo.reload:load_demo

`load_demo(checkpoint_dir, dataset_dir) -> pipeline.trainlog.Reloaded` reloads what
`pipeline.demo.policy.save_pretrained` wrote and re-injects the statistics the checkpoint lacks from the
dataset's metadata (through the one LeRobot data API), as LeRobot's eval does. It lives with the demo so
that no stage imports the demo; a team writes its own loader with the same signature.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.demo.policy import ACTION_KEY, WeightsMismatch, load_pretrained
from pipeline.normalization import NEEDS, flat_stats
from pipeline.readers import LeRobotData
from pipeline.trainlog import Reloaded


def load_demo(checkpoint: Path, dataset: Path) -> Reloaded:
    """The demo's eval path: `load_pretrained`, then re-inject what the checkpoint lacks from the dataset.

    Like LeRobot's `_inject_stats`, only missing statistics are filled; stats that were saved (even as
    `inf`) are kept, which is exactly why a saved placeholder must be caught.
    """
    try:
        loaded = load_pretrained(checkpoint)
    except WeightsMismatch as exc:  # training saved what eval cannot load: a finding, not bad input
        raise RuntimeError(str(exc)) from None
    source = LeRobotData(dataset).stats()
    features = [*loaded.spec.input_features, *loaded.spec.output_features]
    injected: list[str] = []
    for feature in features:
        have = loaded.stats.setdefault(feature, {})
        for stat, value in source.get(feature, {}).items():
            if stat not in have:
                have[stat] = value
                injected.append(f"{feature}.{stat}")
    required = [f"{feature}.{stat}" for feature in features for stat in NEEDS.get(loaded.mode(feature), ())]
    return Reloaded(
        stats=flat_stats(loaded.stats),
        forward=loaded.act,
        input_features=list(loaded.spec.input_features),
        output_feature=ACTION_KEY,
        injected=injected,
        required=required,
    )
