"""One task's share of the work: the episodes [lo, hi) of one budget, checked row for row.

The result is a plain JSON-able dict per episode (and per sampled row), so a sharded run's parts and the
unsharded run produce the same lists; `rows.py` turns the concatenated lists into the same checks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import InputError
from pipeline.progress import track
from pipeline.stages.render_cache import cache as cache_mod
from pipeline.stages.render_cache import release, stats
from pipeline.stages.render_cache.config import RenderCacheConfig
from pipeline.stages.render_cache.content import content_order
from pipeline.stages.render_cache.diagnose import diagnose_task
from pipeline.stages.render_cache.proprio import resolve
from pipeline.stages.render_cache.render import EvalRenderer, make_env, replay_state_obs
from pipeline.stages.render_cache.tolerance import compare, json_metrics, within


class Renderers:
    """Lazily opened renderers (one per size) and state env for one process, closed together."""

    def __init__(self, cfg: RenderCacheConfig) -> None:
        self.cfg, self._by_size, self._state_env, self.memo = cfg, {}, None, {}

    def at(self, size: int) -> EvalRenderer:
        if size not in self._by_size:
            c = self.cfg
            self._by_size[size] = EvalRenderer(c.env_id, c.task_id, size, c.camera, c.mujoco_gl)
        return self._by_size[size]

    def state_env(self) -> Any:
        if self._state_env is None:
            self.at(self.cfg.size)  # sets MUJOCO_GL before anything imports mujoco
            self._state_env = make_env(self.cfg.state_env_id, self.cfg.task_id)
        return self._state_env

    def renderers(self) -> dict[str, Any]:
        """GL_RENDERER of each size's renderer: the check's side of the rows' renderer strings."""
        return {str(s): r.gl.get("GL_RENDERER") for s, r in sorted(self._by_size.items())}

    def gl(self) -> list[dict[str, Any]]:
        return [dict(r.gl, size=s, software=r.software()) for s, r in sorted(self._by_size.items())]

    def frame(self, ep: Any, entry: release.Entry, t: int, mode: str, size: int) -> np.ndarray | None:
        """Frame of row t under `mode` ("state" | "live_step"); None when the release cannot say."""
        key = (entry.archive_file, t, mode, size)
        if key not in self.memo:
            k, r = self.cfg.keys, self.at(size)
            if mode == "state" or t == 0:  # the reset frame is rendered after mj_forward: both agree
                self.memo[key] = r.state(ep[k.qpos][t], ep[k.qvel][t])
            elif k.control not in ep:
                self.memo[key] = None
            else:
                self.memo[key] = r.live_step(ep[k.qpos][t - 1], ep[k.qvel][t - 1], ep[k.control][t - 1])
        return self.memo[key]

    def close(self) -> None:
        for r in self._by_size.values():
            r.close()
        self._by_size = {}
        if self._state_env is not None:
            self._state_env.close()
            self._state_env = None


def classify(
    cached: np.ndarray,
    ep: Any,
    entry: release.Entry,
    t: int,
    last: int,
    cfg: RenderCacheConfig,
    rs: Renderers,
) -> dict[str, Any]:
    """Exact, or within the calibrated tolerance, under the claimed pairing; else which explanation fits:
    the other pairing, a row shifted by one, or none ("different": diagnosed later, see diagnose.py).
    A bit-identical frame costs one render and one comparison, as before the tolerance existed."""
    size, tol = cached.shape[0], cfg.tolerance
    m = compare(cached, rs.frame(ep, entry, t, cfg.pairing, size))
    out: dict[str, Any] = {"t": t, "last": last, **json_metrics(m), "class": "exact"}
    if m["max_abs"] == 0:
        return out
    if within(m, tol):
        out["class"] = "tolerance"
        return out
    other = "live_step" if cfg.pairing == "state" else "state"
    alt = rs.frame(ep, entry, t, other, size)
    if alt is not None and within(compare(cached, alt), tol):
        out["class"] = other
        return out
    for offset in (1, -1):
        if 0 <= t + offset <= last and within(
            compare(cached, rs.frame(ep, entry, t + offset, cfg.pairing, size)), tol
        ):
            out.update({"class": "shift", "offset": offset})
            return out
    out["class"] = "different"
    return out


def sampled(
    cfg: RenderCacheConfig,
    budget: int,
    population: int,
    salt: int = 0,
    count: int | None = None,
    starts: Any = None,
) -> list[int]:
    n = stats.sample_size(
        population, cfg.sample if count is None else count, cfg.max_mismatch_rate, cfg.confidence
    )
    return [int(j) for j in stats.sample_rows(population, n, cfg.seed + budget + salt, starts)]


def _eq(cached: np.ndarray, expected: np.ndarray) -> int | None:
    """First row where `cached` differs from `expected` (cast to the cache's dtype); None if identical."""
    expected = np.asarray(expected).astype(cached.dtype, copy=False)
    if cached.shape != expected.shape:
        return 0
    if not len(cached):
        return None
    bad = np.flatnonzero(~np.all((cached == expected).reshape(len(cached), -1), axis=1))
    return int(bad[0]) if len(bad) else None


def _rows(data: dict[str, Any], ep: Any, s: int, T: int, e: int, cfg: RenderCacheConfig) -> dict[str, Any]:
    """actions / states / traj ids / proprio / goal position: row for row against the release."""
    k, meta = cfg.keys, data["meta"]
    out: dict[str, Any] = {
        "actions": _eq(meta["action"][s : s + T], ep[k.action][:T]),
        "states": _eq(meta["state"][s : s + T], ep[k.observation][:T]),
        "traj_id": _eq(meta["traj_id"][s : s + T], np.full(T, e)),
    }
    if data["proprio"] is not None:
        fn = data["proprio_fn"]
        want = np.stack([np.asarray(fn(ep, t)) for t in range(T)]) if T else np.zeros((0,))
        out["proprio"] = _eq(np.asarray(data["proprio"][s : s + T]), want)
    if cfg.goal_meta in meta and k.goal in ep:
        want = np.stack([np.asarray(ep[k.goal][t])[tuple(cfg.goal_index)] for t in range(T)])
        got = meta[cfg.goal_meta][s : s + T]
        close = got.shape == want.shape and np.allclose(got, want, atol=cfg.goal_atol, rtol=0)
        out["goal_position"] = None if close else 0
    return out


def _replay(ep: Any, T: int, cfg: RenderCacheConfig, rs: Renderers) -> list[list[float]]:
    """|observation after replaying qpos/qvel - the release's observation| on rows 0, T/2, T-1."""
    k, env = cfg.keys, rs.state_env()
    nq, nv = env.unwrapped.model.nq, env.unwrapped.model.nv
    if ep[k.qpos].shape[1:] != (nq,) or ep[k.qvel].shape[1:] != (nv,):
        path = str(getattr(ep, "path", ""))
        raise InputError(
            f"{path}: qpos/qvel have shapes {ep[k.qpos].shape}/{ep[k.qvel].shape}; {cfg.state_env_id} "
            f"has nq={nq}, nv={nv}",
            path=path,
            field=k.qpos,
        )
    errs = []
    for t in sorted({0, T // 2, max(T - 1, 0)}):
        got = replay_state_obs(env, ep[k.qpos][t], ep[k.qvel][t])
        want = np.asarray(ep[k.observation][t], dtype=np.float64)
        errs.append(np.abs(got - want).tolist() if got.shape == want.shape else [-1.0])
    return errs


def _goal(
    data: dict[str, Any], ep: Any, at: tuple[release.Entry, int, int], cfg: RenderCacheConfig, rs: Renderers
) -> dict[str, Any]:
    """The goal frame of every row of the episode == a render of its terminal state, within the same
    calibrated tolerance as the frames: another driver's noise moves goal frames as much as any other
    frame, and a goal that shows another state (another episode's, a wrong terminal row) moves far more.
    Every row is compared, not only the first, so one row's wrong goal is found as well."""
    entry, s, T = at
    goals = data["goals"][s : s + T]
    if T == 0:
        return {"exact": False, "within": False, "max_abs": None, "constant": False}
    k = cfg.keys
    last = len(ep[k.qpos]) - 1
    key = (entry.archive_file, last, "state", goals.shape[1])
    if key not in rs.memo:
        rs.memo[key] = rs.at(goals.shape[1]).state(ep[k.qpos][last], ep[k.qvel][last])
    ref, goals = rs.memo[key], np.asarray(goals)
    constant = bool(np.all(goals == goals[0]))
    if ref is not None and goals.shape[1:] == ref.shape and bool(np.all(goals == ref)):
        return {"exact": True, "within": True, "max_abs": 0, "constant": constant}
    found = [compare(g, ref) for g in (goals[:1] if constant else goals)]
    outside = [i for i, m in enumerate(found) if not within(m, cfg.tolerance)]
    worst = found[outside[0]] if outside else max(found, key=lambda m: (m["max_abs"], m["frac_differ"]))
    return {
        "exact": False,
        "within": not outside,
        "max_abs": max(m["max_abs"] for m in found),
        "constant": constant,
        "rows_outside": len(outside) * (T if constant else 1),
        "first_outside": outside[0] if outside else None,
        "reported": json_metrics(worst),
    }


def open_budget(cfg: RenderCacheConfig, release_root: Path, cache_root: Path, budget: int) -> dict[str, Any]:
    """Manifest, mapped cache arrays and row offsets of one budget (InputError names what is wrong)."""
    entries = release.read_manifest(release_root, cfg.manifest, budget, cfg.episode_dir)
    paths = cache_mod.budget_cache(cache_root, cfg, budget)
    data: dict[str, Any] = {
        "budget": budget,
        "entries": entries,
        "starts": np.concatenate([[0], np.cumsum([e.transition_count for e in entries])]).astype(int),
        "frames": cache_mod.load_npy(paths.frames, "frames"),
        "goals": cache_mod.load_npy(paths.goals, "goals"),
        "meta": cache_mod.load_meta(paths.meta),
        "proprio": cache_mod.load_npy(paths.proprio, "proprio") if paths.proprio else None,
        "proprio_fn": resolve(cfg.proprio_fn) if paths.proprio else None,
        "hires": {s: cache_mod.load_npy(f, f"frames{s}") for s, (f, _m) in paths.hires.items()},
    }
    data["rows"] = min(len(data["frames"]), int(data["starts"][-1]))
    return data


def episode_range(
    cfg: RenderCacheConfig,
    release_root: Path,
    cache_root: Path,
    budget: int,
    part: tuple[int, int],
    rs: Renderers,
) -> dict[str, Any]:
    """Check episodes [lo, hi) of `budget` (part = (index, count) of the split); JSON-able result."""
    try:
        data = open_budget(cfg, release_root, cache_root, budget)
    except InputError as exc:
        return {"budget": budget, "part": list(part), "error": _error(exc)}
    entries = data["entries"]
    lo, hi = _split(len(entries), *part)
    starts = data["starts"][:-1]
    drawn = sampled(cfg, budget, data["rows"], starts=starts)
    data["sample"] = [j for j in drawn if data["starts"][lo] <= j < data["starts"][hi]]
    data["hires_sample"] = {
        s: sampled(cfg, budget, data["rows"], salt=s, count=h.sample, starts=starts)
        for s, h in _hires(cfg, data)
    }
    k = cfg.keys
    required = (k.qpos, k.qvel, k.action, k.observation)
    out: dict[str, Any] = {"budget": budget, "part": list(part), "episodes": [], "frames": []}
    out["hires"] = {str(s): [] for s in data["hires_sample"]}
    out["content"] = {str(s): [] for s in data["hires_sample"]}
    for e in track(range(lo, hi), f"render_cache budget {budget}: episodes {lo}-{hi} re-rendered"):
        entry, s = entries[e], int(data["starts"][e])
        try:
            _claimed_rows_exist(cfg, release_root, data, e)
            with release.open_episode(entry, required) as ep:
                T_rel = len(ep[k.action]) - cfg.drop_last
                T = max(0, min(entry.transition_count, T_rel, data["rows"] - s))
                row = {"episode": e, "file": entry.archive_file, "manifest": entry.transition_count}
                row.update(release_transitions=T_rel, checked=T, **_rows(data, ep, s, T, e, cfg))
                row.update(obs_err=_replay(ep, T, cfg, rs), goal=_goal(data, ep, (entry, s, T), cfg, rs))
                _episode_frames(cfg, rs, data, ep, (e, s, T, T_rel), out)
        except InputError as exc:
            row = {"episode": e, "file": entry.archive_file, "error": _error(exc)}
        out["episodes"].append(row)
    diagnose_task(cfg, rs, data, out["frames"], data["frames"])
    for size, found in out["hires"].items():
        diagnose_task(cfg, rs, data, found, data["hires"][int(size)])
    out["renderer"] = rs.renderers()
    return out


def _claimed_rows_exist(cfg: RenderCacheConfig, release_root: Path, data: dict[str, Any], e: int) -> None:
    """The manifest's counts place episode `e` at a cache row; a count the arrays do not hold (a manifest
    from a larger build, or a cache cut short) is named here instead of comparing empty slices."""
    s, count, rows = int(data["starts"][e]), data["entries"][e].transition_count, data["rows"]
    if count > 0 and s >= rows:
        path = release.manifest_path(release_root, cfg.manifest, data["budget"])
        raise InputError(
            f"{path}: transition_count of {data['entries'][e].archive_file!r} places it at cache rows "
            f"{s}-{s + count - 1}, but the cache's arrays hold {rows} rows (the counts before it sum to "
            f"{s}; expected counts that sum to at most {rows})",
            path=str(path),
            field="transition_count",
        )


def _episode_frames(
    cfg: RenderCacheConfig, rs: Renderers, data: dict[str, Any], ep: Any, at: tuple, out: dict[str, Any]
) -> None:
    """The sampled rows of one episode: base and high-resolution frames re-rendered and classified, and
    each high-resolution frame's order checked from content against the base cache (no render)."""
    e, s, T, T_rel = at
    entry = data["entries"][e]
    for j in (j for j in data["sample"] if s <= j < s + T):
        got = classify(np.asarray(data["frames"][j]), ep, entry, j - s, T_rel, cfg, rs)
        out["frames"].append({"row": j, "e": e, **got})
        for size in (size for size in data["hires_sample"] if j < len(data["hires"][size])):
            method = cfg.diagnosis.resize
            found = content_order(data["hires"][size], data["frames"], j, (s, s + T), method)
            out["content"][str(size)].append(found)
    for size, rows in data["hires_sample"].items():
        for j in (j for j in rows if s <= j < s + T):
            got = classify(np.asarray(data["hires"][size][j]), ep, entry, j - s, T_rel, cfg, rs)
            out["hires"][str(size)].append({"row": j, "e": e, **got})


def _hires(cfg: RenderCacheConfig, data: dict[str, Any]) -> list[tuple[int, Any]]:
    return [(h.size, h) for h in cfg.hires if h.size in data["hires"]]


def _split(n: int, index: int, count: int) -> tuple[int, int]:
    """Episode range `index` of `count` near-equal contiguous ranges of n episodes."""
    bounds = np.linspace(0, n, count + 1).round().astype(int)
    return int(bounds[index]), int(bounds[index + 1])


def _error(exc: InputError) -> dict[str, Any]:
    return {"message": str(exc), "path": exc.path, "field": exc.field}
