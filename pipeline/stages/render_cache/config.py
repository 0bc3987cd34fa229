"""render_cache's typed config: where the release and the cache keep what, and how sure each check is.

Every file name is a template formatted with `budget=<int>` (reference 003's names are the defaults), so
another release + cache pair is described by config, not code. Defaults live here only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.errors import ConfigError
from pipeline.stages.config import Resources, StageConfig

PAIRINGS = ("state", "live_step")
GL_BACKENDS = ("egl", "osmesa", "glfw")


@dataclass
class ReleaseKeys:
    """Array names inside each per-episode file (.npz or HDF5)."""

    qpos: str = "qpos"
    qvel: str = "qvel"
    action: str = "action"
    observation: str = "observation"
    control: str = "control"  # ctrl applied by step t -> t+1; needed to replay the live-step pairing
    raw_frames: str = "pixels.front"  # optional: frames the collection renderer recorded
    goal: str = "variation.cube.goal_position"  # optional goal variable (compared with meta[goal_meta])


@dataclass
class HiresCache:
    """A higher-resolution cache of the same rows (e.g. 224x224 for a VLA)."""

    size: int = 224
    frames: str = "vla_b{budget:04d}_frames224.npy"
    meta: str = "vla_b{budget:04d}_meta.npz"
    budgets: list[int] = field(default_factory=list)  # empty: the largest budget only
    sample: int | None = None  # frames re-rendered per budget; None: sized from max_mismatch_rate


@dataclass
class RenderCacheConfig(StageConfig):
    """What the release and cache hold, and the tolerances every check uses (reference 003)."""

    resources: Resources = field(default_factory=lambda: Resources(time_min=60, mem_gb=4))
    budgets: list[int] = field(default_factory=lambda: [10, 50, 100, 1000])
    manifest: str = "subsets/subset-{budget:04d}.jsonl"
    episode_dir: str = "data"  # manifests' archive_file resolve under <release>/<episode_dir>
    keys: ReleaseKeys = field(default_factory=ReleaseKeys)
    frames: str = "pix_b{budget:04d}_frames.npy"
    goals: str = "pix_b{budget:04d}_goals.npy"
    meta: str = "pix_b{budget:04d}_meta.npz"
    proprio: str | None = "prop_b{budget:04d}.npy"  # null: no proprio cache
    proprio_fn: str = "pipeline.stages.render_cache.proprio:ogbench_cube"  # module:function(episode, t)
    goal_meta: str = "goal_xy"  # meta key holding each row's goal position (absent: not checked)
    goal_index: list[int] = field(default_factory=lambda: [0])  # row t: release goal[t][index]
    goal_atol: float = 1e-6
    hires: list[HiresCache] = field(default_factory=lambda: [HiresCache()])
    drop_last: int = 1  # cache rows per episode = len(action) - drop_last (the terminal state is the goal)
    env_id: str = "visual-cube-single-v0"  # the eval renderer
    state_env_id: str = "cube-single-v0"  # recomputes `observation` after a replay
    task_id: int = 1  # fixed task: without it the task (and its target marker) comes from np.random
    size: int = 64
    camera: str = "front_pixels"
    pairing: str = "state"  # what frame t shows: "state" (set_state(q_t) + forward) | "live_step"
    mujoco_gl: str = "egl"
    sample: int | None = None  # frames re-rendered per budget; None: enough that 0 mismatches bound ...
    cache_sha256: str | None = None  # pin: sha256 of the cache folder's sorted `path sha256` lines
    release_sha256: str | None = None  # the same for the release (a SHA256SUMS inside is always checked)
    max_mismatch_rate: float = 0.005  # ... the rate below this (598 at 95 %); every row where fewer exist
    confidence: float = 0.95  # one-sided Clopper-Pearson level of every reported bound
    seed: int = 0  # the sample's seed (per budget: seed + budget)
    obs_atol: float = (
        0.05  # continuous obs dims after a replay: live kinematics lag one substep (demo: 0.007)
    )
    contact_dims: list[int] = field(default_factory=lambda: [18])  # binary flags: reported as a fraction
    contact_max_fraction: float = 0.25  # soft finding above this
    gap_max_mean_diff: float = 20.0  # mean |pixel| difference above this is a (soft) finding
    shards: int = 1  # episode ranges per budget; > 1 runs budgets x shards tasks as one job array

    def validate(self, key: str) -> None:
        super().validate(key)
        if (
            not self.budgets
            or any(b < 1 for b in self.budgets)
            or len(set(self.budgets)) != len(self.budgets)
        ):
            raise ConfigError(f"{key}.budgets", f"expected distinct positive integers, got {self.budgets}")
        if self.pairing not in PAIRINGS:
            raise ConfigError(f"{key}.pairing", f"expected one of {PAIRINGS}, got {self.pairing!r}")
        if self.mujoco_gl not in GL_BACKENDS:
            raise ConfigError(f"{key}.mujoco_gl", f"expected one of {GL_BACKENDS}, got {self.mujoco_gl!r}")
        if ":" not in self.proprio_fn:
            raise ConfigError(f"{key}.proprio_fn", f"expected module:function, got {self.proprio_fn!r}")
        for name in ("size", "shards"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{key}.{name}", f"expected an integer >= 1, got {getattr(self, name)}")
        if (self.sample is not None and self.sample < 0) or self.drop_last < 0:
            raise ConfigError(f"{key}.sample", "expected sample >= 0 and drop_last >= 0")
        if not 0 < self.max_mismatch_rate < 1:
            raise ConfigError(
                f"{key}.max_mismatch_rate", f"expected 0 < rate < 1, got {self.max_mismatch_rate}"
            )
        if not 0.5 <= self.confidence < 1:
            raise ConfigError(f"{key}.confidence", f"expected 0.5 <= confidence < 1, got {self.confidence}")
        for i, h in enumerate(self.hires):
            if h.size < 1 or (h.sample is not None and h.sample < 0):
                raise ConfigError(f"{key}.hires.{i}", f"expected size >= 1 and sample >= 0, got {h}")

    def tasks(self) -> int:
        """Array tasks a sharded run submits: budgets x episode ranges (1 = no array)."""
        return len(self.budgets) * self.shards if self.shards > 1 else 1
