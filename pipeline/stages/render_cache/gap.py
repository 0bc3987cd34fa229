"""Rows rendered once per run (in the main job): the GL renderer in use, render determinism of one state,
and the raw-release vs eval-renderer domain gap with the frames side by side in a PNG."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import InputError
from pipeline.record.records import Check
from pipeline.stages.render_cache import release
from pipeline.stages.render_cache.config import RenderCacheConfig
from pipeline.stages.render_cache.partial import Renderers
from pipeline.stages.render_cache.render import gpu_present
from pipeline.stages.render_cache.rows import ROWS
from pipeline.storage import atomic_write_bytes


def gl_row(cfg: RenderCacheConfig, gl: list[dict[str, Any]]) -> Check:
    """GL_RENDERER per task; a software renderer on a node with a GPU is a (soft) finding, and so is a
    MUJOCO_GL other than the configured one (mujoco imported before the stage could set it)."""
    seen = sorted({(g.get("GL_RENDERER"), g.get("MUJOCO_GL"), bool(g.get("software"))) for g in gl}, key=str)
    gpu = gpu_present()
    software = any(s for _, _, s in seen)
    wrong = sorted({str(b) for _, b, _ in seen if b != cfg.mujoco_gl})
    problems = []
    if software and gpu:
        problems.append("software GL renderer on a node with a GPU (rendering ~10x slower than it could be)")
    if wrong:
        problems.append(f"MUJOCO_GL was {wrong}, not the configured {cfg.mujoco_gl!r}")
    renderers = [r for r, _, _ in seen]
    return ROWS.judge(
        "render.gl",
        "renderer",
        None if not seen else not problems,
        "; ".join(problems) or f"GL_RENDERER {renderers} with MUJOCO_GL={cfg.mujoco_gl}",
        severity="soft",
        configured=cfg.mujoco_gl,
        actual=renderers,
        evidence={"renderers": [list(s) for s in seen], "gpu_on_node": gpu},
    )


def first_episode(cfg: RenderCacheConfig, release_root: Path) -> release.Entry | None:
    try:
        return release.read_manifest(release_root, cfg.manifest, min(cfg.budgets), cfg.episode_dir)[0]
    except InputError:
        return None


def determinism_row(cfg: RenderCacheConfig, release_root: Path, rs: Renderers) -> Check:
    """The same state rendered twice, another state in between: the renderer itself is deterministic."""
    entry, k = first_episode(cfg, release_root), cfg.keys
    if entry is None:
        return ROWS.judge("render.determinism", "renderer", None, "no readable manifest to take a state from")
    r = rs.at(cfg.size)
    with release.open_episode(entry, (k.qpos, k.qvel)) as ep:
        first = r.state(ep[k.qpos][0], ep[k.qvel][0])
        r.state(ep[k.qpos][-1], ep[k.qvel][-1])
        again = r.state(ep[k.qpos][0], ep[k.qvel][0])
    d = int(np.abs(first.astype(np.int16) - again.astype(np.int16)).max())
    return ROWS.judge(
        "render.determinism",
        "renderer",
        d == 0,
        f"one state rendered twice (another in between): max |diff| {d}",
        actual=d,
        evidence={"episode": entry.archive_file, "size": cfg.size},
    )


def gap_row(
    cfg: RenderCacheConfig, release_root: Path, rs: Renderers, out: Path
) -> tuple[Check, dict[str, str]]:
    """Raw release frames (collection renderer) vs the eval renderer on the same states, PNGs attached."""
    entry, k = first_episode(cfg, release_root), cfg.keys
    if entry is None:
        return ROWS.judge("domain_gap", "renderer", None, "no readable manifest", severity="soft"), {}
    with release.open_episode(entry, (k.qpos, k.qvel)) as ep:
        if k.raw_frames not in ep:
            return ROWS(
                "domain_gap",
                "renderer",
                "match",
                f"the release has no raw frames ({k.raw_frames!r}) to compare: nothing to measure",
                severity="soft",
                evidence={"episode": entry.archive_file},
            ), {}
        raw = ep[k.raw_frames]
        ts = sorted({0, len(raw) // 2, len(raw) - 1})
        pairs = [(t, raw[t], rs.at(raw.shape[1]).state(ep[k.qpos][t], ep[k.qvel][t])) for t in ts]
    gaps = [float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean()) for _, a, b in pairs]
    png = out / "domain_gap.png"
    side_by_side(png, pairs, entry.archive_file, cfg.env_id)
    worst = max(gaps)
    check = ROWS.judge(
        "domain_gap",
        "renderer",
        worst <= cfg.gap_max_mean_diff,
        f"raw release vs eval renderer at {raw.shape[1]}px: mean |pixel diff| {[round(g, 2) for g in gaps]} "
        f"(threshold {cfg.gap_max_mean_diff}); policies train on eval-renderer frames",
        severity="soft",
        expected=cfg.gap_max_mean_diff,
        actual=worst,
        evidence={"episode": entry.archive_file, "rows": ts, "mean_abs_pixel_diff": gaps, "png": str(png)},
    )
    return check, {"domain_gap_png": str(png)}


def side_by_side(
    path: Path, pairs: list[tuple[int, np.ndarray, np.ndarray]], episode: str, env_id: str
) -> Path:
    """One row per state: raw release frame | eval render | |difference|, with a title, axis labels, a
    legend naming the three columns and a colour bar for the difference. matplotlib's Agg backend (no
    display on a compute node), rendered in memory and written by the one atomic writer."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    fig = Figure(figsize=(10.5, 3 * len(pairs) + 0.6), dpi=80)
    axes = fig.subplots(len(pairs), 3, squeeze=False)
    columns = ("raw release frame (collection renderer)", f"eval renderer ({env_id})", "|diff|, max over RGB")
    for row, (t, raw, ev) in enumerate(pairs):
        diff = np.abs(raw.astype(np.int16) - ev.astype(np.int16)).max(axis=-1)
        for col, img in enumerate((raw, ev, diff)):
            ax = axes[row][col]
            shown = ax.imshow(img, cmap="magma" if col == 2 else None, vmin=0, vmax=255 if col == 2 else None)
            ax.set_title(f"{columns[col].split(' (')[0]}, t={t}", fontsize=9)
            ax.set_xlabel("x (pixels)")
            ax.set_ylabel("y (pixels)")
            if col == 2:
                fig.colorbar(shown, ax=ax, label="pixel difference (0-255)")
    places = ("left", "middle", "right")
    legend = [
        Patch(fill=False, edgecolor="none", label=f"{p}: {c}") for p, c in zip(places, columns, strict=True)
    ]
    fig.legend(handles=legend, loc="lower center", ncol=3, fontsize=8, frameon=False, handlelength=0)
    fig.suptitle(f"Domain gap: raw release vs eval renderer ({episode})")
    fig.tight_layout(rect=(0, 0.6 / (3 * len(pairs) + 0.6) + 0.02, 1, 1))
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return atomic_write_bytes(path, buffer.getvalue())
