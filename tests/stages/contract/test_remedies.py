"""Remedies read from a row's own evidence: offered only where that evidence decides the mend (a camera
assignment that beats every other, a permutation whose partners beat the next candidates), applied to
the typed argv flag by flag, everything else as typed. In process, on synthetic contracts: cheap."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline.readers.base import Contract, DatasetContract, Feature
from pipeline.record.records import Check, Rows
from pipeline.stages.contract import frames, inputs, layout, remedies
from pipeline.stages.contract.camera_fit import Signature, fit, match_unnamed
from pipeline.stages.contract.config import ContractConfig
from pipeline.stages.contract.corrected import apply, line_changes
from pipeline.stages.contract.rows import Pair, Sources

STATE = "observation.state"
CAMS = ("observation.images.top", "observation.images.side", "observation.images.wrist")
LINE = ["lerobot-train", "--policy.path=acme/base", "--dataset.repo_id=acme/data"]


def sources(
    features: dict[str, Feature], a_stats: dict | None = None, c_stats: dict | None = None
) -> Sources:
    a = Contract("A", "lerobot", "/a", features=dict(features), stats=a_stats or {})
    a.norm_map.update({"STATE": "QUANTILES", "ACTION": "QUANTILES", "VISUAL": "MEAN_STD"})
    b = Contract("B", "lerobot", "/b", norm_map={"STATE": "MEAN_STD", "ACTION": "MEAN_STD"})
    c = DatasetContract("C", "lerobot_v3.0", "/data/acme/data", features=dict(features))
    c.recomputed.update(c_stats or {})
    return Sources(a, b, c, ContractConfig())


def state_stats(means: list[float]) -> dict[str, np.ndarray]:
    return {"mean": np.array(means), "std": np.full(len(means), 0.1)}


def permutation_row(a_means: list[float], c_means: list[float]) -> tuple[Check, Sources]:
    feature = Feature(STATE, "state", (len(a_means),))
    src = sources({STATE: feature}, {STATE: state_stats(a_means)}, {STATE: state_stats(c_means)})
    (row,) = layout.permutation_rows(src, Pair(feature, feature, "exact", None, None))
    return row, src


def test_a_clear_swap_gets_the_reorder_as_a_data_remedy() -> None:
    row, src = permutation_row([0, 1, 2, 3, 4, 5], [0, 1, 2, 4, 3, 5])
    assert row.verdict == "mismatch"
    (row,) = remedies.attach([row], src, LINE)
    assert row.remedy["kind"] == "data" and row.remedy["dims"] == {"3": 4, "4": 3}
    assert "meta/stats.json" in row.remedy["file"] and row.verdict == "mismatch"  # never hidden


def test_a_near_tie_permutation_gets_no_reorder() -> None:
    """Base dims 4 and 5 nearly alike: the data's dim 3 fits base dim 4 best, but dim 5 almost as well."""
    row, src = permutation_row([0, 1, 2, 3, 4, 4.03], [0, 1, 2, 4.012, 3, 4.03])
    assert row.verdict == "mismatch", row.message
    (row,) = remedies.attach([row], src, LINE)
    assert row.remedy["kind"] == "undecided" and "dims" not in row.remedy
    assert "next candidate" in row.remedy["decide"] and row.verdict == "mismatch"


def camera_rows(decoded: dict[str, Signature], base: dict[str, Signature]) -> tuple[list[Check], Sources]:
    src = sources({k: Feature(k, "image", (3, 64, 64)) for k in base})
    found = fit(decoded, base, 0.5, 0.5, 0.05)
    return frames._swap_rows(found), src


def sig(*mean: float) -> Signature:
    return Signature(np.array(mean), np.array([0.2, 0.2, 0.2]))


def test_an_exchange_the_frames_decide_gets_the_rename_map() -> None:
    top, side, wrist = CAMS
    base = {top: sig(0.1, 0.1, 0.1), side: sig(0.5, 0.5, 0.5), wrist: sig(0.9, 0.2, 0.6)}
    decoded = {top: base[side], side: base[top], wrist: base[wrist]}
    rows, src = camera_rows(decoded, base)
    swapped = [r for r in remedies.attach(rows, src, LINE) if r.verdict == "mismatch"]
    assert swapped and all(r.remedy["kind"] == "line" for r in swapped)
    assert json.loads(swapped[0].remedy["set"]["rename_map"]) == {top: side, side: top}


def test_an_ambiguous_camera_fit_gets_no_rename_map() -> None:
    """side and wrist look nearly alike: the frames are clearly not as named, but which is which is not
    decided (the best assignment does not beat the next by the swap ratio)."""
    top, side, wrist = CAMS
    base = {top: sig(0.1, 0.1, 0.1), side: sig(0.5, 0.5, 0.5), wrist: sig(0.52, 0.5, 0.5)}
    noise = np.array([0.01, -0.01, 0.0])
    decoded = {top: sig(*(base[side].mean + noise)), side: base[top], wrist: sig(*(base[wrist].mean - noise))}
    rows, src = camera_rows(decoded, base)
    bad = [r for r in remedies.attach(rows, src, LINE) if r.verdict == "mismatch"]
    assert bad and all(r.remedy["kind"] == "undecided" for r in bad)
    assert "next assignment" in bad[0].remedy["decide"] and "probe" in bad[0].remedy["decide"]


def mode_row(ftype: str) -> Check:
    rows = Rows("contract", "normalization")
    return rows(f"normalization.mode:{ftype}", ftype, "mismatch", "override", expected="QUANTILES")


def test_an_override_of_the_bases_modes_is_dropped_from_the_line() -> None:
    typed = [
        *LINE,
        "--policy.normalization_mapping",
        '{"STATE": "MEAN_STD", "ACTION": "MEAN_STD"}',
        "--steps=5",
    ]
    src = sources({})
    checks = remedies.attach([mode_row("STATE"), mode_row("ACTION")], src, typed)
    assert all(c.remedy == checks[0].remedy for c in checks)
    assert checks[0].remedy["drop"] == ["policy.normalization_mapping"]
    assert apply(typed, *line_changes(checks)) == [*LINE, "--steps=5"]


def test_an_override_in_part_is_set_to_the_bases_mode_for_that_type() -> None:
    typed = [*LINE, '--policy.normalization_mapping={"STATE": "MEAN_STD", "VISUAL": "IDENTITY"}']
    (row,) = remedies.attach([mode_row("STATE")], sources({}), typed)
    assert json.loads(row.remedy["set"]["policy.normalization_mapping"]) == {
        "STATE": "QUANTILES",
        "VISUAL": "IDENTITY",
    }


def test_broken_episodes_leave_the_line_and_lerobots_delete_is_the_data_mend() -> None:
    src = sources({})
    src.c.claimed["total_episodes"] = 10
    rows = Rows("contract", "health")
    back = rows("health.time.order", "timestamp", "mismatch", "back", evidence={"episodes": [7]})
    dup = rows("health.episodes.duplicates", "episode", "mismatch", "dup", evidence={"episodes": [9]})
    checks = remedies.attach([back, dup], src, LINE)
    kept = [e for e in range(10) if e not in (7, 9)]
    assert all(json.loads(c.remedy["set"]["dataset.episodes"]) == kept for c in checks)
    assert checks[0].remedy["command"] == [  # lerobot finds the folder as $HF_LEROBOT_HOME/<repo_id>
        "env",
        "HF_LEROBOT_HOME=/data",
        "HF_HUB_OFFLINE=1",
        "lerobot-edit-dataset",
        "--repo_id=acme/data",
        "--operation.type=delete_episodes",
        "--operation.episode_indices=[7]",
    ]
    assert apply(LINE, *line_changes(checks))[-1] == f"--dataset.episodes={json.dumps(kept)}"


@pytest.mark.parametrize(
    ("typed", "wanted"),
    [
        (["--rename_map", "{}", "--steps=3"], ['--rename_map={"a": "b"}', "--steps=3"]),
        (
            ["--policy.device=cpu", "--policy.normalization_mapping={}"],
            ["--policy.device=cpu", '--rename_map={"a": "b"}'],
        ),
        (
            ["--job_name", "it's $HOME", "--rename-map={}"],
            ["--job_name", "it's $HOME", '--rename_map={"a": "b"}'],
        ),
    ],
)
def test_apply_changes_only_the_remedied_flags(typed: list[str], wanted: list[str]) -> None:
    sets, drops = {"rename_map": '{"a": "b"}'}, ["policy.normalization_mapping"]
    assert apply(["lerobot-train", *typed], sets, drops) == ["lerobot-train", *wanted]


def test_a_row_without_a_remedy_writes_the_json_it_always_wrote() -> None:
    row = mode_row("STATE")
    assert "remedy" not in row.to_dict()
    again = Check.from_dict({**row.to_dict(), "remedy": {"kind": "data", "summary": "x"}})
    assert again.remedy == {"kind": "data", "summary": "x"}


def renamed_cameras(decoded: dict[str, Signature], base: dict[str, Signature]) -> list[Check]:
    """The base reads `base`'s cameras, the dataset has `decoded`'s under other names and no map."""
    features = {k: Feature(k, "image", (3, 64, 64)) for k in base}
    src = sources(features)
    src.c.features = {k: Feature(k, "image", (3, 64, 64)) for k in decoded}
    src.camera_match = match_unnamed(decoded, base, 0.05)
    return remedies.attach(inputs.camera_rows(src), src, LINE)


def test_renamed_cameras_the_frames_tell_apart_get_the_map() -> None:
    top, side, _ = CAMS
    base = {top: sig(0.1, 0.1, 0.1), side: sig(0.6, 0.5, 0.4)}
    rows = renamed_cameras(
        {"observation.images.high": base[top], "observation.images.left": base[side]}, base
    )
    assert len(rows) == 2 and all(r.verdict == "mismatch" and r.remedy["kind"] == "line" for r in rows)
    wanted = {"observation.images.high": top, "observation.images.left": side}
    assert json.loads(rows[0].remedy["set"]["rename_map"]) == wanted


def test_renamed_cameras_the_frames_cannot_tell_apart_get_no_map() -> None:
    top, side, _ = CAMS
    base = {top: sig(0.4, 0.5, 0.5), side: sig(0.5, 0.5, 0.5)}  # told apart, but each frame sits between
    mid = sig(0.45, 0.5, 0.5)
    rows = renamed_cameras({"observation.images.high": mid, "observation.images.left": mid}, base)
    assert rows and all(r.remedy["kind"] == "undecided" for r in rows)
    assert "against" in rows[0].remedy["decide"] and "probe" in rows[0].remedy["decide"]


def test_a_renamed_input_without_stats_under_its_name_gets_the_stats_copied_as_a_data_remedy() -> None:
    top, front = "observation.images.top", "observation.images.front"
    src = sources({})
    src.c.stats[top] = {"mean": np.zeros((3, 1, 1)), "std": np.ones((3, 1, 1))}
    rows = Rows("contract", "normalization")
    row = rows(
        f"normalization.renamed:{front}", front, "mismatch", "unnormalized", evidence={"dataset_key": top}
    )
    (row,) = remedies.attach([row], src, LINE)
    assert row.remedy["kind"] == "data" and row.remedy["file"] == "/data/acme/data/meta/stats.json"
    assert f"add {front} (a copy of its {top} entry)" in row.remedy["summary"]
