"""render_cache on real MuJoCo renders of tiny demos (a handful of frames per test)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from pipeline.stages.render_cache import budget, check, rows
from pipeline.stages.render_cache.gap import gap_row, side_by_side
from pipeline.stages.render_cache.partial import Renderers, episode_range
from tests.stages.render_cache.helpers import config

pytestmark = pytest.mark.render


def _by_id(checks: list) -> dict:
    return {c.id.removeprefix("render_cache."): c for c in checks}


def test_clean_demo_passes_every_check(clean_checks: list) -> None:
    checks = clean_checks
    got = _by_id(checks)
    for b in (1, 2):
        for name in (
            "files",
            "shapes",
            "counts",
            "order.actions",
            "order.states",
            "order.traj_id",
            "proprio",
            "goals.position",
            "observation.replay",
            "goals.terminal",
        ):
            assert got[f"{name}.b{b}"].verdict == "match", got[f"{name}.b{b}"]
        for name in ("rerender", "order", "pairing"):
            assert got[f"frames.b{b}.{name}"].verdict == "match", got[f"frames.b{b}.{name}"]
    assert got["frames.b2.rerender"].evidence["n"] == 8
    assert got["frames.b2.rerender"].evidence["mismatch_rate_upper_bound"] == pytest.approx(
        1 - 0.05 ** (1 / 8)
    )
    assert got["subsets.nested"].verdict == "match" and got["render.determinism"].verdict == "match"
    assert "GL_RENDERER" not in str(got["render.gl"].actual) and got["render.gl"].actual
    assert not any(c.blocking for c in checks)
    # the demo cache records the renderer its frames were drawn with: the row names both sides
    assert "not recorded" not in got["frames.b2.rerender"].message
    assert (
        "cache 'llvmpipe" in got["frames.b2.rerender"].message
        or "cache 'unknown'" in got["frames.b2.rerender"].message
    )


def test_faulty_demo_each_fault_caught_by_its_own_row(faulty_demo: Path, tmp_path: Path) -> None:
    checks, _ = check(config(budgets=[2, 3]), faulty_demo / "release", faulty_demo / "cache", None, tmp_path)
    got = _by_id(checks)
    assert got["subsets.nested"].verdict == "mismatch" and got["subsets.nested"].blocking
    shift, camera = got["frames.b3.order"], got["frames.b3.rerender"]
    assert shift.blocking and shift.evidence["rows"] == [[4, 1]], shift
    assert camera.blocking and camera.evidence["rows"] == [7], camera
    assert [d["explanation"] for d in camera.evidence["diagnosis"]] == ["camera:front"], camera.message
    assert got["frames.b3.pairing"].verdict == "match"  # neither fault is a pairing convention
    assert got["order.actions.b3"].verdict == "match" and got["frames.b2.rerender"].verdict == "match"


def test_live_step_frames_are_reported_as_pairing_not_nondeterminism(
    clean_demo: Path, tmp_path: Path, rs: Renderers
) -> None:
    """Frames as env.step returned them, claimed as state renders: the pairing row says so."""
    shutil.copytree(clean_demo, tmp_path / "d")
    root = tmp_path / "d"
    cfg = config(budgets=[1])
    with np.load(root / "release" / "data" / "episode-0000.npz") as ep:
        live = [
            rs.at(64).live_step(ep["qpos"][t - 1], ep["qvel"][t - 1], ep["control"][t - 1]) for t in (1, 2, 3)
        ]
    frames = np.load(root / "cache" / "pix_b0001_frames.npy")
    frames[1:4] = np.stack(live)
    np.save(root / "cache" / "pix_b0001_frames.npy", frames)
    claimed_state = episode_range(cfg, root / "release", root / "cache", 1, (0, 1), rs)
    every = len(claimed_state["frames"])  # the whole budget was re-rendered: exhaustive, exact verdicts
    rows_state = _by_id(rows.frame_rows(cfg, "frames.b1", "b1", claimed_state["frames"], 64, every))
    live_cfg = config(budgets=[1], pairing="live_step")
    claimed_live = episode_range(live_cfg, root / "release", root / "cache", 1, (0, 1), rs)
    rows_live = _by_id(rows.frame_rows(live_cfg, "frames.b1", "b1", claimed_live["frames"], 64, every))
    assert rows_state["frames.b1.pairing"].verdict == "mismatch"
    assert (
        rows_state["frames.b1.pairing"].actual == "live_step"
        and "not renderer" in rows_state["frames.b1.pairing"].message
    )
    assert rows_state["frames.b1.rerender"].verdict == "match"  # explained: not a renderer difference
    assert (
        rows_live["frames.b1.pairing"].verdict == "match"
        and rows_live["frames.b1.rerender"].verdict == "match"
    )


def _broken(clean_demo: Path, tmp_path: Path) -> Path:
    root = tmp_path / "d"
    shutil.copytree(clean_demo, root)
    return root


@pytest.mark.parametrize(
    "fault",
    ["missing_goals", "truncated_frames", "outside_manifest", "wrong_shape", "garbage_header", "overcount"],
)
def test_bad_inputs_give_error_rows_naming_file_and_field(
    clean_demo: Path, tmp_path: Path, rs: Renderers, fault: str
) -> None:
    root = _broken(clean_demo, tmp_path)
    cache_dir, cfg = root / "cache", config(budgets=[1])
    if fault == "missing_goals":
        (cache_dir / "pix_b0001_goals.npy").unlink()
    elif fault == "truncated_frames":
        data = (cache_dir / "pix_b0001_frames.npy").read_bytes()
        (cache_dir / "pix_b0001_frames.npy").write_bytes(data[: len(data) - 1000])
    elif fault == "garbage_header":  # a header Python's tokenizer cannot even split (an open bracket)
        header = b"\x93NUMPY\x01\x00\x10\x00{'descr': ([<u1"
        (cache_dir / "pix_b0001_frames.npy").write_bytes(header + b" " * 8)
    elif fault == "overcount":  # the manifest claims more rows than the cache's arrays hold (4)
        (root / "release" / "subsets" / "subset-0001.jsonl").write_text(
            '{"archive_file": "episode-0000.npz", "transition_count": 4}\n'
            '{"archive_file": "episode-0001.npz", "transition_count": 4}\n'
        )
    elif fault == "outside_manifest":
        (root / "release" / "subsets" / "subset-0001.jsonl").write_text(
            '{"archive_file": "../../x.npz", "transition_count": 4}\n'
        )
    else:
        np.save(cache_dir / "pix_b0001_frames.npy", np.zeros((4, 32, 32, 3), np.uint8))
    got = episode_range(cfg, root / "release", cache_dir, 1, (0, 1), rs) if fault != "wrong_shape" else None
    facts = budget.facts(cfg, root / "release", cache_dir, 1)
    if fault == "wrong_shape":
        found = _by_id(
            rows.budget_rows(cfg, 1, facts, rows.merge([{"budget": 1, "part": [0, 1], "episodes": []}]))
        )
        assert found["shapes.b1"].verdict == "mismatch" and "[4, 32, 32, 3]" in found["shapes.b1"].message
        return
    found = _by_id(rows.budget_rows(cfg, 1, facts, rows.merge([got])))
    errors = [c for c in found.values() if c.verdict == "error"]
    assert errors and all(c.blocking for c in errors)
    field = {
        "missing_goals": "goals",
        "truncated_frames": "frames",
        "outside_manifest": "archive_file",
        "garbage_header": "frames",
        "overcount": "transition_count",
    }[fault]
    assert any(c.evidence.get("field") == field and c.evidence.get("path") for c in errors), errors


def test_domain_gap_png_side_by_side(clean_demo: Path, tmp_path: Path, rs: Renderers) -> None:
    root = _broken(clean_demo, tmp_path)
    path = root / "release" / "data" / "episode-0000.npz"
    with np.load(path) as z:
        arrays = dict(z)
    arrays["pixels.front"] = np.zeros(
        (len(arrays["qpos"]), 64, 64, 3), np.uint8
    )  # a black "collection" render
    np.savez(path, **arrays)
    cfg = config(budgets=[1])
    row, artifacts = gap_row(cfg, root / "release", rs, tmp_path)
    assert row.verdict == "mismatch" and row.severity == "soft" and row.actual > cfg.gap_max_mean_diff
    assert Path(artifacts["domain_gap_png"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_side_by_side_writes_a_titled_png(tmp_path: Path) -> None:
    a = np.zeros((8, 8, 3), np.uint8)
    out = side_by_side(tmp_path / "g.png", [(0, a, a + 10)], "ep.npz", "env")
    assert out.read_bytes()[:4] == b"\x89PNG" and not list(tmp_path.glob(".*tmp*"))
