"""render_cache's typed config: where the release and the cache keep what, and how sure each check is.

Every file name is a template formatted with `budget=<int>` (reference 003's names are the defaults), so
another release + cache pair is described by config, not code. Defaults live here only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import OmegaConf

from pipeline.errors import ConfigError
from pipeline.stages.config import Resources, StageConfig

PAIRINGS = ("state", "live_step")
GL_BACKENDS = ("egl", "osmesa", "glfw")
RENDERED_ON = ("cpu", "gpu")
RESIZE = ("area", "bilinear", "nearest", "bicubic")


def _gpus(rendered_on: str) -> int | None:
    """`resources.gpus_per_node` of this stage (and its array tasks) by default: 1 when the cache was
    rendered on a GPU (re-render on the same kind of renderer), else the layer below decides."""
    return 1 if str(rendered_on) == "gpu" else None


if not OmegaConf.has_resolver("render_cache_gpus"):
    OmegaConf.register_new_resolver("render_cache_gpus", _gpus)


@dataclass
class Tolerance:
    """When a re-rendered frame counts as the cached one (tolerance.py says why three bounds). Calibrated
    by benchmarks/bench_render_tolerance.py: the same states rendered twice per backend and across
    EGL/OSMesa were bit-identical on llvmpipe (0 levels, 0 % of pixels, PSNR inf); the synthetic
    driver-noise models it also prints (+/-2 levels on 3 % of the pixels, or of the values, each channel
    on its own) lie inside all three bounds, the smallest planted faults (+20 lighting, BGR, a one-pixel
    camera shift) outside."""

    pixel: int = 2  # max |diff| of any channel, grey levels
    max_fraction: float = 0.05  # values (pixel channels, each on its own) differing at all
    psnr_db: float = 40.0  # floor


@dataclass
class Diagnosis:
    """What is tried on a frame that matches no render of its state (a few frames, cheapest first)."""

    frames: int = 3  # mismatching frames diagnosed per budget (and per high-resolution cache)
    resize_factors: list[float] = field(default_factory=lambda: [0.5, 2.0])  # "rendered at another size"
    resize: str = "area"  # how the cache was resized (also downsamples a high-resolution cache)
    shifts: list[int] = field(default_factory=lambda: [2, -2])  # rows beyond the +/-1 the order row tests
    episodes: int = 2  # neighbouring episodes whose same row is tried ("swapped episodes")


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
    # order from content: a downsampled frame farther than this (mean |diff|) from its base row is out of
    # order even when no neighbour is closer. Measured on the demo (224 px renders area-downsampled vs the
    # 64 px renders of the same 16 rows): 1.63-1.85 to its own row; another episode's row there: 6.7
    content_max_mean: float = 4.0


@dataclass
class RenderCacheConfig(StageConfig):
    """What the release and cache hold, and the tolerances every check uses (reference 003)."""

    resources: Resources = field(
        default_factory=lambda: Resources(
            time_min=60,
            mem_gb=4,
            gpus_per_node="${render_cache_gpus:${..rendered_on}}",  # type: ignore[arg-type]
        )
    )
    rendered_on: str = "cpu"  # cpu | gpu: what rendered the cache; gpu asks a GPU for this stage's jobs
    renderer_meta: str = "gl_renderer"  # meta .npz key holding the cache's GL_RENDERER string (optional)
    tolerance: Tolerance = field(default_factory=Tolerance)
    diagnosis: Diagnosis = field(default_factory=Diagnosis)
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
        if self.rendered_on not in RENDERED_ON:
            raise ConfigError(
                f"{key}.rendered_on", f"expected one of {RENDERED_ON}, got {self.rendered_on!r}"
            )
        self._validate_tolerance(key)
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

    def _validate_tolerance(self, key: str) -> None:
        t, d = self.tolerance, self.diagnosis
        if t.pixel < 0 or not 0 <= t.max_fraction <= 1 or t.psnr_db < 0:
            raise ConfigError(
                f"{key}.tolerance", f"expected pixel >= 0, 0 <= max_fraction <= 1, psnr_db >= 0: {t}"
            )
        if d.resize not in RESIZE:
            raise ConfigError(f"{key}.diagnosis.resize", f"expected one of {RESIZE}, got {d.resize!r}")
        if d.frames < 0 or d.episodes < 0 or any(f <= 0 for f in d.resize_factors):
            raise ConfigError(f"{key}.diagnosis", f"expected frames/episodes >= 0, resize factors > 0: {d}")

    def tasks(self) -> int:
        """Array tasks a sharded run submits: budgets x episode ranges (1 = no array)."""
        return len(self.budgets) * self.shards if self.shards > 1 else 1
