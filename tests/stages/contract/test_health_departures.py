"""Planted faults on copies of three real LeRobot datasets (SO-101 v3.0, G1 v2.1 with 26-d hand and arm
joints, open_50 v3.0 bimanual with hands, 34-d), each named as a departure by its episode and dim, also on
the dim the clean data profiles as most pinned (a gripper or a hand joint) and on the command whose
per-episode spread varies most (a stuck actuator); copies of another episode's rows (every vector, or the
state alone; a prefix or a suffix) named by episode; the clean copies give no motion finding. The base is
a contract card with the clean data's own stats (a model that reads the state)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from pipeline.readers import read_model
from pipeline.readers.base import Contract
from pipeline.readers.dataset import read_dataset
from pipeline.stages.contract import scan_options
from pipeline.stages.contract.config import ContractConfig
from pipeline.stages.contract.health import health_rows
from pipeline.stages.contract.rows import Sources
from tests.conftest import REAL_DATA
from tests.stages.contract.health_faults import _cut_jsonl, load_columns, rewritten

SETS = {  # name: (folder, episodes kept (None: all), state key, action key)
    "so101": ("SamueleSandrini__record-test", None, "observation.state", "action"),
    "g1": ("YifanTian07__G1-policy-train", 12, "observation.state", "action"),
    "open50": ("yipiandanxinxiangyangkai__open_50", None, "state", "actions"),
}
EPISODE = 2
MOTION = ("held", "frozen", "stuck", "spikes", "jumps", "dead")


def _small(name: str, dest: Path) -> Path:
    folder, keep, _, _ = SETS[name]
    src = REAL_DATA / folder
    if not src.is_dir():
        pytest.skip(f"real dataset not found: {src}")
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("videos", "images"))
    if keep is not None:  # a v2.1 copy cut to its first episodes: a file per episode
        for path in (dest / "data").rglob("episode_*.parquet"):
            if int(path.stem.split("_")[1]) >= keep:
                path.unlink()
        _cut_jsonl(dest / "meta", keep)
        info = json.loads((dest / "meta" / "info.json").read_text())
        info["total_episodes"] = keep
        info["total_frames"] = sum(len(c) for c in [load_columns(dest)["episode_index"]])
        (dest / "meta" / "info.json").write_text(json.dumps(info, indent=2))
    return dest


def _pinned_dim(cols: dict[str, np.ndarray], key: str) -> int:
    """The dim that sits most at its limits among those moving in every episode (a gripper)."""
    x, ep = cols[key], cols["episode_index"]
    moves = np.all([np.ptp(x[ep == e], axis=0) > 0 for e in np.unique(ep)], axis=0)
    share = ((x == x.min(axis=0)) | (x == x.max(axis=0))).mean(axis=0)
    return int(np.argmax(np.where(moves, share, -1)))


def _moving_dim(cols: dict[str, np.ndarray], key: str) -> int:
    x, rows = cols[key], cols["episode_index"] == EPISODE
    return int(np.argmax(np.ptp(x[rows], axis=0) / np.maximum(np.ptp(x, axis=0), 1e-12)))


def _varied_dim(cols: dict[str, np.ndarray], key: str, partner: str) -> int:
    """Among the dims moving in every episode, the one whose per-episode spread varies most (robust
    spread over median): where a whole-episode hold is hardest to tell from a quiet episode. Only dims
    whose partner (the same dim of `partner`) moves in EPISODE at least half as much as it typically
    does: a command held while its joint barely moves either is an operator's choice, not a fault."""
    ep = cols["episode_index"]
    ids = list(np.unique(ep))
    spread, other = (np.array([np.ptp(cols[k][ep == e], axis=0) for e in ids]) for k in (key, partner))
    median = np.median(spread, axis=0)
    varied = np.median(np.abs(spread - median), axis=0) / np.maximum(median, 1e-12)
    moves = other[ids.index(EPISODE)] >= 0.5 * np.median(other, axis=0)
    return int(np.argmax(np.where(np.all(spread > 0, axis=0) & moves, varied, -1)))


def _copy_rows(cols: dict[str, np.ndarray], keys: tuple[str, ...], suffix: bool) -> None:
    """A later episode's rows over EPISODE's first (or last) half: a re-upload that overwrote part of it."""
    ep = cols["episode_index"]
    rows, other = np.flatnonzero(ep == EPISODE), np.flatnonzero(ep == EPISODE + 1)
    m = min(len(rows), len(other)) // 2
    for key in keys:
        cols[key][rows[-m:] if suffix else rows[:m]] = cols[key][other[-m:] if suffix else other[:m]]


def _plant(fault: str, which: str, state: str, action: str):  # type: ignore[no-untyped-def]
    def edit(cols: dict[str, np.ndarray]) -> dict[str, Any]:
        x, ep = cols[state], cols["episode_index"]
        if fault == "stuck_action":  # one command held at its first value all episode
            d = _varied_dim(cols, action, state)
            cols[action][ep == EPISODE, d] = cols[action][np.flatnonzero(ep == EPISODE)[0], d]
            return {"episodes": [EPISODE], "dims": [d]}
        if fault.startswith("copied_"):  # only the state's rows, or a suffix of every vector
            _copy_rows(cols, (state,) if fault == "copied_state" else (state, action), fault.endswith("x"))
            return {"episodes": [EPISODE], "dims": []}
        d = _pinned_dim(cols, state) if which == "pinned" else _moving_dim(cols, state)
        rows = np.flatnonzero(ep == EPISODE)
        n = len(rows)
        if fault == "frozen":  # the joint stops for 60 % of the episode while its command goes on
            x[rows[n // 5 : n // 5 + 3 * n // 5], d] = x[rows[n // 5], d]
        elif fault == "spike":
            x[rows[n // 2], d] += 50 * x[:, d].std()
        elif fault == "dead":
            x[:, d] = np.median(x[:, d])
        elif fault == "never_opens":  # the gripper's joint stays at its closed end all episode
            x[rows, d] = x[rows, d].min()
        elif fault == "copied":  # another episode's rows over this one (as many as it has)
            other = np.flatnonzero(ep == _longer(ep, n))[:n]
            for key in (state, action):
                cols[key][rows[: len(other)]] = cols[key][other]
            return {"episodes": [EPISODE], "dims": []}
        elif fault == "merged":  # the next episode recorded as the rest of this one
            nxt = np.flatnonzero(ep == EPISODE + 1)
            ep[nxt] = EPISODE
            cols["frame_index"][nxt] = np.arange(n, n + len(nxt))
            step = np.median(np.diff(cols["timestamp"][rows]))
            cols["timestamp"][nxt] = cols["timestamp"][rows[-1]] + step * np.arange(1, len(nxt) + 1)
            keys = ("episode_index", "frame_index", "timestamp")
            return {"episodes": [EPISODE], "dims": None, "columns": {k: cols[k].copy() for k in keys}}
        return {"episodes": [EPISODE], "dims": [d]}

    return edit


def _index_columns(root: Path, columns: dict[str, np.ndarray]) -> None:
    """Write the planted index columns back, file by file in row order (each keeps its arrow type)."""
    offset = 0
    for path in sorted((root / "data").rglob("*.parquet")):
        table = pq.read_table(path)
        for name, values in columns.items():
            kind = table.schema.field(name).type
            part = pa.array(values[offset : offset + table.num_rows]).cast(kind)
            table = table.set_column(table.schema.get_field_index(name), name, part)
        pq.write_table(table, path)
        offset += table.num_rows


def _longer(ep: np.ndarray, n: int) -> int:
    """Another episode with at least `n` rows, else the longest other (then a partial copy)."""
    ids, counts = np.unique(ep, return_counts=True)
    counts = np.where(ids == EPISODE, -1, counts)
    return int(next((e for e, c in zip(ids, counts, strict=True) if c >= n), ids[np.argmax(counts)]))


def _card(cols: dict[str, np.ndarray], out: Path, state: str, action: str) -> Path:
    """A base whose stats are the clean data's own (it reads the state, predicts the action)."""
    features = {}
    for key, kind in ((state, "STATE"), (action, "ACTION")):
        x = cols[key]
        stats = {"mean": x.mean(0), "std": x.std(0), "min": x.min(0), "max": x.max(0)}
        stats = {k: v.tolist() for k, v in stats.items()}
        features[key] = {"type": kind, "shape": [x.shape[1]], "stats": stats}
    out.mkdir(parents=True, exist_ok=True)
    card = {"source": "the clean copy's stats", "normalization_mapping": {}, "features": features}
    (out / "contract.yaml").write_text(yaml.safe_dump(card))
    return out


def _rows(dataset: Path, base: Path) -> dict[str, Any]:
    config = ContractConfig()
    c = read_dataset(str(dataset), scan_options(config))
    rows = health_rows(Sources(read_model(base), Contract("B", "lerobot", ""), c, config))
    return {r.id.removeprefix("contract."): r for r in rows}


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """Each dataset's small clean copy and its base."""
    out = {}
    for name, (_, _, state, action) in SETS.items():
        root = tmp_path_factory.mktemp(name)
        data = _small(name, root / "clean")
        out[name] = (data, _card(load_columns(data), root / "base", state, action))
    return out


@pytest.mark.parametrize("name", sorted(SETS))
def test_the_clean_copy_has_no_motion_finding(name: str, clean: dict[str, tuple[Path, Path]]) -> None:
    rows = _rows(*clean[name])
    motion = [r for k, r in rows.items() if k.split(".")[1].split(":")[0] in MOTION]
    assert motion, sorted(rows)
    assert all(r.verdict == "match" for r in motion), [r.message for r in motion if r.verdict != "match"]


FAULTS = [
    ("frozen", "pinned"),
    ("frozen", "moving"),
    ("spike", "pinned"),
    ("spike", "moving"),
    ("dead", "pinned"),
    ("dead", "moving"),
    ("never_opens", "pinned"),
    ("copied", "moving"),
    ("copied_state", "moving"),
    ("copied_suffix", "moving"),
    ("stuck_action", "varied"),
    ("merged", "moving"),
]


@pytest.mark.parametrize(("fault", "which"), FAULTS)
@pytest.mark.parametrize("name", sorted(SETS))
def test_a_planted_fault_is_named_by_episode_and_dim(
    name: str, fault: str, which: str, clean: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    data, base = clean[name]
    _, _, state, action = SETS[name]
    expected = rewritten(data, tmp_path / "data", _plant(fault, which, state, action))
    if fault == "merged":
        _index_columns(tmp_path / "data", expected.pop("columns"))
    rows = _rows(tmp_path / "data", base)
    found = [r for r in rows.values() if r.verdict == "mismatch" and _names(r, expected)]
    assert found, [f"{k}: {r.message}" for k, r in rows.items() if r.verdict not in ("match", "skipped")]
    # taught wrong: blocks; a 50-sd spike by what it does to the normalizer's range; a joint frozen 60 % of
    # an episode (5-10 s) while its command moves, as a dropout
    if fault in ("dead", "never_opens", "stuck_action", "spike", "frozen") or fault.startswith("copied"):
        assert any(r.blocking for r in found), [r.message for r in found]
    if fault == "spike":
        assert "alone moves the normalized values by up to" in " ".join(r.message for r in found)


def _names(row: Any, expected: dict[str, Any]) -> bool:
    """The row names the planted episode (a dead dim: every episode) and dim (None: any dim)."""
    ev = row.evidence
    dims = expected["dims"]
    if "dead" in ev and ev.get("dims"):
        return dims is not None and set(dims) <= set(ev["dims"])
    per = {int(k): v for k, v in (ev.get("per_episode") or {}).items()}
    if dims and per:
        return any(set(dims) <= set(per.get(e, [])) for e in expected["episodes"])
    named = set(ev.get("episodes") or []) | {e for g in ev.get("groups") or [] for e in g}
    named |= {r[k] for r in ev.get("runs") or [] for k in ("episode", "of")}  # both sides of a copy
    return bool(set(expected["episodes"]) & {int(e) for e in named}) and not dims


@pytest.mark.parametrize("trained", [[0, 1, 3], [1, 2]])
def test_only_the_episodes_trained_on_are_judged(
    trained: list[int], clean: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    """A gripper that never opens in episode 2: named where episode 2 is trained on, silent where the
    training line leaves it out (the habit is still every episode's)."""
    data, base = clean["g1"]
    _, _, state, action = SETS["g1"]
    expected = rewritten(data, tmp_path / "data", _plant("never_opens", "pinned", state, action))
    config = ContractConfig()
    c = read_dataset(str(tmp_path / "data"), scan_options(config))
    src = Sources(read_model(base), Contract("B", "lerobot", ""), c, config)
    src.trained_episodes = trained  # type: ignore[attr-defined]
    rows = [r for r in health_rows(src) if r.id.split(".")[2].split(":")[0] in MOTION]
    named = [r.id for r in rows if r.verdict == "mismatch" and _names(r, expected)]
    assert bool(named) == (EPISODE in trained), [r.message for r in rows if r.verdict == "mismatch"]
    assert all(r.verdict == "match" for r in rows if r.id not in named)
