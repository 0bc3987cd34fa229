"""Health faults planted in whole real datasets of different widths and lengths: the widest under
../shared/data/real (open_50, 34 dims, keys `state`/`actions`) and the longest (G1, 26 dims, 35965 rows in
100 episodes). Each fault is named by its row with the episode, the dim and the frames; the clean copy
gives no such row (its rows computed once per dataset for the module)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from pipeline.readers import read_model
from pipeline.readers.base import Contract
from pipeline.readers.dataset import read_dataset
from pipeline.record.records import Check
from pipeline.stages.contract.config import ContractConfig
from pipeline.stages.contract.health import health_rows
from pipeline.stages.contract.rows import Sources
from tests.stages.contract.health_faults import REAL, Columns, rewritten

# name -> (folder, state key, action key)
WHOLE = {
    "widest": ("yipiandanxinxiangyangkai__open_50", "state", "actions"),
    "longest": ("YifanTian07__G1-policy-train", "observation.state", "action"),
}
pytestmark = pytest.mark.skipif(
    not all((REAL / f).is_dir() for f, _, _ in WHOLE.values()),
    reason=f"real LeRobot datasets not found under {REAL}",
)


def health(dataset: Path, work: Path, state: str) -> dict[str, Check]:
    """The health rows for a model that reads `state`, as the stage computes them."""
    model = work / "model"
    model.mkdir(parents=True, exist_ok=True)
    width = json.loads((dataset / "meta" / "info.json").read_text())["features"][state]["shape"]
    inputs = {state: {"type": "STATE", "shape": width}}
    (model / "config.json").write_text(
        json.dumps({"type": "act", "chunk_size": 50, "input_features": inputs})
    )
    config = ContractConfig()
    options = {"rank_error": 0.001, "dynamics_rows": 1000, "health_episodes": 1}
    c = read_dataset(str(dataset), {**options, "health_gap_factor": config.health.gap_factor})
    rows = health_rows(Sources(read_model(model), Contract("B", "lerobot", ""), c, config))
    return {r.id: r for r in rows}


@pytest.fixture(scope="module")
def clean_health(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], dict[str, Check]]:
    """`clean_health(which)`: the health rows of the untouched dataset, computed once for the module: each
    fault's test compares its copy with the same clean rows (a whole-dataset health pass each time)."""
    found: dict[str, dict[str, Check]] = {}

    def of(which: str) -> dict[str, Check]:
        if which not in found:
            folder, state, _ = WHOLE[which]
            found[which] = health(REAL / folder, tmp_path_factory.mktemp(f"clean-{which}"), state)
        return found[which]

    return of


def rows_of(cols: Columns, episode: int) -> np.ndarray:
    return np.flatnonzero(cols["episode_index"] == episode)


def step_std(cols: Columns, key: str) -> np.ndarray:
    """Each dim's standard deviation of its one-step changes inside episodes."""
    steps = np.diff(cols[key], axis=0)[np.diff(cols["episode_index"]) == 0]
    return np.sqrt(np.mean(steps**2, axis=0))


# ------------------------------------------------------------------------------------ copied runs
RUNS, LENGTH = 8, 16  # short runs: 1 window in 4 kept missed each a third of the time


def copy_runs(cols: Columns, state: str, action: str) -> list[tuple[int, int, int, int]]:
    """RUNS runs of LENGTH moving rows, each from one episode into another (a partial re-upload):
    (into, from, first frame there, first frame in the source)."""
    rng = np.random.default_rng(7)
    episodes = np.unique(cols["episode_index"])
    into, source = rng.permutation(episodes)[: 2 * RUNS].reshape(2, RUNS)
    planted = []
    for dest, src in zip(into.tolist(), source.tolist(), strict=True):
        d_rows, s_rows = rows_of(cols, dest), rows_of(cols, src)
        moving = np.flatnonzero(np.any(np.diff(cols[state][s_rows], axis=0) != 0, axis=1)) + 1
        starts = [f for f in moving if np.isin(np.arange(f, f + LENGTH), moving).all()]
        at_src = int(rng.choice(starts))
        at_dest = int(rng.integers(1, len(d_rows) - LENGTH))
        for key in (state, action):
            cols[key][d_rows[at_dest : at_dest + LENGTH]] = cols[key][s_rows[at_src : at_src + LENGTH]]
        planted.append((dest, src, at_dest, at_src))
    return planted


@pytest.mark.parametrize("which", sorted(WHOLE))
def test_short_copied_runs_are_each_named(which: str, tmp_path: Path, clean_health: Callable) -> None:
    folder, state, action = WHOLE[which]
    clean = clean_health(which)["contract.health.episodes.repeated_rows"]
    assert clean.verdict == "match", clean.message
    copy = tmp_path / "data"
    planted = rewritten(REAL / folder, copy, lambda cols: copy_runs(cols, state, action))
    row = health(copy, tmp_path, state)["contract.health.episodes.repeated_rows"]
    assert row.verdict == "mismatch" and row.blocking
    for dest, src, at_dest, at_src in planted:
        frames = {dest: (at_dest, at_dest + LENGTH - 1), src: (at_src, at_src + LENGTH - 1)}
        named = [
            r
            for r in row.evidence["runs"]
            if {r["episode"], r["of"]} == {dest, src}
            and frames[r["episode"]][0] <= r["frames"][0] <= r["frames"][1] <= frames[r["episode"]][1]
        ]
        assert named, (dest, src, at_dest, row.evidence["runs"])
    assert len(row.evidence["runs"]) == RUNS and f"{RUNS} repeated run(s)" in row.message


# ------------------------------------------------------------------------------------------ spike
def spike_beside_the_largest_step(cols: Columns, state: str) -> tuple[int, int, int]:
    """A one-sample spike of 50 standard deviations of the dim's steps, in the state dim and episode that
    hold the dataset's largest genuine step, half an episode away from it: (episode, dim, frame)."""
    std = step_std(cols, state)
    steps = np.abs(np.diff(cols[state], axis=0)) / np.where(std > 0, std, 1)
    steps[np.diff(cols["episode_index"]) != 0] = 0
    row, dim = np.unravel_index(int(np.argmax(steps)), steps.shape)
    episode = int(cols["episode_index"][row + 1])
    rows = rows_of(cols, episode)
    frame = int(np.clip((row + 1 - rows[0] + len(rows) // 2) % len(rows), 2, len(rows) - 3))
    cols[state][rows[frame], dim] += 50 * std[dim]
    return episode, int(dim), frame


def spikes(row: Check) -> set[tuple[int, int, int]]:
    found = row.evidence["spikes"]
    return {(int(e), d, f) for e, v in found.items() for d, f in zip(v["dims"], v["frames"], strict=True)}


@pytest.mark.parametrize("which", sorted(WHOLE))
def test_a_spike_beside_a_larger_genuine_step_is_named_alone(
    which: str, tmp_path: Path, clean_health: Callable
) -> None:
    folder, state, _ = WHOLE[which]
    row_id = f"contract.health.spikes:{state}"
    clean = clean_health(which)[row_id]
    copy = tmp_path / "data"
    episode, dim, frame = rewritten(
        REAL / folder, copy, lambda cols: spike_beside_the_largest_step(cols, state)
    )
    row = health(copy, tmp_path, state)[row_id]
    assert spikes(row) - spikes(clean) == {(episode, dim, frame)}, row.message
    assert f"episode {episode} dim {dim}" in row.message and f"frame {frame}" in row.message
    if which == "longest":  # G1 holds large genuine steps but no glitch: its clean copy names none
        assert clean.verdict == "match", clean.message


# --------------------------------------------------------------------------------- frozen actuator
def freeze_most_discrete(cols: Columns, state: str, action: str) -> tuple[int, int, int]:
    """The state dim that sits at its limits most often (gripper-like), held at its first value for the
    whole episode in which its action moves most (a stuck actuator): (episode, dim, rows)."""
    s = cols[state]
    at_limits = (s == s.min(axis=0)).sum(axis=0) + (s == s.max(axis=0)).sum(axis=0)
    moving = np.ptp(s, axis=0) > 0
    dim = int(np.argmax(np.where(moving, at_limits, -1)))
    episodes = np.unique(cols["episode_index"])
    spread = [np.ptp(cols[action][rows_of(cols, int(e)), dim]) for e in episodes]
    episode = int(episodes[int(np.argmax(spread))])
    rows = rows_of(cols, episode)
    s[rows, dim] = s[rows[0], dim]
    return episode, dim, len(rows)


@pytest.mark.parametrize("which", sorted(WHOLE))
def test_an_actuator_frozen_for_a_whole_episode_is_named(
    which: str, tmp_path: Path, clean_health: Callable
) -> None:
    folder, state, action = WHOLE[which]
    clean = clean_health(which)[f"contract.health.stuck:{state}"]
    assert clean.verdict == "match", clean.message
    copy = tmp_path / "data"
    episode, dim, length = rewritten(
        REAL / folder, copy, lambda cols: freeze_most_discrete(cols, state, action)
    )
    row = health(copy, tmp_path, state)[f"contract.health.stuck:{state}"]
    assert row.blocking and row.evidence["per_episode"] == {episode: [dim]}, row.message
    assert row.evidence["frames"] == {episode: [0, length - 1]}
    assert f"episode {episode} dim(s) {dim}" in row.message and f"frames 0-{length - 1}" in row.message
