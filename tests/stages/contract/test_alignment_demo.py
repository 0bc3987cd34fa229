"""The alignment rows on the demo's own clean recordings (MuJoCo-rendered cameras, AV1, LeRobot v3.0) of
five seeds, small (3 episodes of 60 steps each, rendered in one call): a fixed and a wrist camera in step
with the state, no hard alignment row. The full-size five-seed check is a one-off script (README)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from pipeline.demo import memo
from pipeline.demo.cameras import render_episodes
from pipeline.demo.dataset import generate_episodes, write_dataset
from pipeline.readers import read_dataset
from pipeline.readers.base import Contract
from pipeline.stages.contract.alignment import alignment_rows
from pipeline.stages.contract.rows import Sources
from tests.stages.contract.helpers import OPTIONS, STAGE_CFG

SEEDS, EPISODES, STEPS = range(5), 3, 60


def test_clean_demo_datasets_of_five_seeds_have_no_hard_alignment_row(tmp_path: Path) -> None:
    # the oracle's rollouts through the demo build's own cache (`memo.episodes`, kept under their settings)
    recorded = {seed: memo.episodes(EPISODES, STEPS, seed, partial(generate_episodes, EPISODES, STEPS, seed))
                for seed in SEEDS}  # fmt: skip
    every = [episode for seed in SEEDS for episode in recorded[seed]]
    for episode, frames in zip(every, render_episodes(every, 64), strict=True):
        episode.update(frames)
    found = {}
    for seed in SEEDS:
        write_dataset(tmp_path / str(seed), recorded[seed])
        c = read_dataset(tmp_path / str(seed), OPTIONS)
        src = Sources(Contract("A", "contract_card", "base"), Contract("B", "training", "t"), c, STAGE_CFG)
        found[seed] = alignment_rows(src)
    lags = {s: [r for r in rows if r.id.startswith("contract.frames.lag:")] for s, rows in found.items()}
    assert all(len(v) == 2 for v in lags.values()), lags  # the fixed (front) and the wrist camera
    hard = {
        s: [r.message for r in rows if r.verdict != "match" and r.severity == "hard"]
        for s, rows in found.items()
    }
    assert not any(hard.values()), hard
    measured = [r for v in lags.values() for r in v if r.verdict == "match"]
    peaks = [
        (r.feature, r.evidence["peak_lag"], r.evidence["peak_r"], r.evidence["r_at_0"]) for r in measured
    ]
    assert len(measured) >= 8 and all(abs(r.evidence["peak_lag"]) <= 1 for r in measured), peaks
