"""The contract stage's settings: every threshold with its default and the reason for its value.

Defaults live here only (Hydra composes them from this dataclass; `--cfg job` shows them); overrides
such as `stages.contract.rank_error=0.01` are type-checked when Hydra composes and range-checked by
`validate` at launch, with a message naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.record.records import SEVERITIES
from pipeline.stages.config import Resources, StageConfig, require


@dataclass
class DegenerateConfig:
    """A normalizer scale (std, q99-q01, max-min) <= eps * max(1, |mean|) counts as zero."""

    eps: float = 1.0e-6
    # ... where the data is constant too (padding): normalized to 0, no blow-up. Where the data
    # varies the row is always hard (division by ~0 on real values).
    constant_severity: str = "soft"

    def validate(self, key: str) -> None:
        require(self.eps > 0, f"{key}.eps", "a number > 0", self.eps)
        _severity(self.constant_severity, f"{key}.constant_severity")


@dataclass
class StaleConfig:
    """The dataset's shipped stats vs the same stats recomputed from its data."""

    mean_z: float = 0.1  # |mean_shipped - mean_data| above 0.1 data std
    std_ratio: float = 1.1  # std_shipped / std_data outside [1/1.1, 1.1]
    range_frac: float = 0.01  # min/max off by more than 1 % of the data range
    severity: str = "hard"  # the normalizer would use stats of other data ...
    # ... where that moves the normalized data by more than this anywhere over its range (MEAN_STD: data
    # std; MIN_MAX: a quarter of the [-1, 1] span is 0.5); less is soft, a constant dim's round-off nothing
    effect: float = 0.5
    quantile_rank: float = 0.05  # a shipped q01/q10/q50/q90/q99 sitting > 0.05 in rank from its level
    # soft: LeRobot v3 averages per-episode quantiles, so real datasets drift a little
    quantile_severity: str = "soft"
    # diagnosis: std off, mean within 1e-5 relative (float32 accumulation noise over ~1e4-1e5 rows is
    # ~1e-6..1e-5: open_50 agrees to 1.2e-6 and 2.0e-6) and |mean|/std >= 1e3: float32 cancellation
    cancel_mean_rel: float = 1.0e-5
    cancel_condition: float = 1.0e3

    def validate(self, key: str) -> None:
        require(self.mean_z > 0, f"{key}.mean_z", "a number of data std > 0", self.mean_z)
        require(self.std_ratio > 1, f"{key}.std_ratio", "a ratio > 1", self.std_ratio)
        require(self.effect > 0, f"{key}.effect", "normalized units > 0", self.effect)
        require(0 < self.range_frac <= 1, f"{key}.range_frac", "a fraction in (0, 1]", self.range_frac)
        require(0 < self.quantile_rank < 1, f"{key}.quantile_rank", "a rank in (0, 1)", self.quantile_rank)
        _severity(self.severity, f"{key}.severity")
        _severity(self.quantile_severity, f"{key}.quantile_severity")
        require(self.cancel_mean_rel > 0, f"{key}.cancel_mean_rel", "a fraction > 0", self.cancel_mean_rel)
        require(self.cancel_condition > 1, f"{key}.cancel_condition", "a ratio > 1", self.cancel_condition)


@dataclass
class ShiftConfig:
    """The base's baked-in stats vs the dataset's (finetuning data may legitimately differ)."""

    soft_z: float = 1.0  # |mean_C - mean_A| above 1 base std in a dim: warn
    std_ratio: float = 3.0  # spread ratio beyond 3x either way: warn
    hard_z: float | None = None  # set a number to make large shifts block (off: a new task may differ)

    def validate(self, key: str) -> None:
        require(self.soft_z > 0, f"{key}.soft_z", "a number of base std > 0", self.soft_z)
        require(self.std_ratio > 1, f"{key}.std_ratio", "a ratio > 1", self.std_ratio)
        hard = self.hard_z
        require(
            hard is None or hard >= self.soft_z, f"{key}.hard_z", f"null or >= soft_z ({self.soft_z})", hard
        )


@dataclass
class SignConfig:
    """A dim whose data mirrors the base's (C ~ -A: spread equal, mean and range negated). Deviations are
    in units of the base's spread: std for mean and quantiles, max - min for the range."""

    tol: float = 0.1  # every mirrored stat within 0.1 spread of -A
    std_ratio: float = 1.1  # and the std within 10 %
    min_gap: float = 1.0  # as-is the stats differ by >= 1 spread (else a flip is invisible in the stats)
    severity: str = "hard"  # the base's learned mapping is inverted for that dim
    # an action dim mirrored inside its range (stages/contract/mirror.py): the sign of its corr with the
    # state dim that tracks it (|corr| >= track_corr) against the base's stats (action stats within
    # base_tol state spreads of the state's, and >= min_gap from the mirrored state's) ...
    track_corr: float = 0.5
    base_tol: float = 0.5
    data_severity: str = "soft"  # ... or, where the base pins nothing, against the other dims' sign

    def validate(self, key: str) -> None:
        require(self.tol > 0, f"{key}.tol", "a number of base spreads > 0", self.tol)
        require(self.std_ratio > 1, f"{key}.std_ratio", "a ratio > 1", self.std_ratio)
        require(self.min_gap > self.tol, f"{key}.min_gap", f"a number > tol ({self.tol})", self.min_gap)
        require(0 < self.track_corr < 1, f"{key}.track_corr", "a correlation in (0, 1)", self.track_corr)
        require(
            0 < self.base_tol < self.min_gap,
            f"{key}.base_tol",
            f"in (0, min_gap={self.min_gap})",
            self.base_tol,
        )
        _severity(self.severity, f"{key}.severity")
        _severity(self.data_severity, f"{key}.data_severity")


@dataclass
class OffsetConfig:
    """A dim whose data is the base's shifted by a constant (C ~ A + k: zero-position / calibration)."""

    tol: float = 0.1  # every stat shifted by the same k within 0.1 spread (units as for the sign)
    std_ratio: float = 1.1  # with the std within 10 %
    min_z: float = 1.0  # and |k| >= 1 base std (smaller offsets are inside normal task drift)
    severity: str = "hard"  # soft to warn only (e.g. a known re-zeroed rig)

    def validate(self, key: str) -> None:
        require(self.tol > 0, f"{key}.tol", "a number of base spreads > 0", self.tol)
        require(self.std_ratio > 1, f"{key}.std_ratio", "a ratio > 1", self.std_ratio)
        require(self.min_z > self.tol, f"{key}.min_z", f"a number > tol ({self.tol})", self.min_z)
        _severity(self.severity, f"{key}.severity")


@dataclass
class RelationConfig:
    """Absolute vs delta actions, tested in the data: action vs next state, and vs the per-episode step."""

    min_corr: float = 0.9  # the relation that holds must correlate >= 0.9 (median over paired dims)
    margin: float = 0.3  # and beat the other relation by >= 0.3 in correlation
    base_z: float = 0.5  # A absolute: action mean within 0.5 state std of the state mean (median dim)
    base_delta: float = 0.2  # A delta: action std <= 0.2 state std and mean within 0.5 state std of 0
    severity: str = "hard"  # the base's outputs mean targets, the data's mean steps (or the reverse)

    def validate(self, key: str) -> None:
        require(0 < self.min_corr <= 1, f"{key}.min_corr", "a correlation in (0, 1]", self.min_corr)
        require(0 < self.margin < 2, f"{key}.margin", "a correlation gap in (0, 2)", self.margin)
        require(self.base_z > 0, f"{key}.base_z", "a number of state std > 0", self.base_z)
        require(0 < self.base_delta < 1, f"{key}.base_delta", "a ratio in (0, 1)", self.base_delta)
        _severity(self.severity, f"{key}.severity")


@dataclass
class PermutationConfig:
    """Data-driven reorder detection: assignment over per-dim (mean, std)."""

    match_tol: float = 0.5  # a moved dim must match its partner within 0.5 (|d mean| + |d std|) / pooled std
    min_gain: float = 0.5  # and the cycle must cost at most half of leaving the dims in place

    def validate(self, key: str) -> None:
        require(self.match_tol > 0, f"{key}.match_tol", "a number > 0", self.match_tol)
        require(0 <= self.min_gain < 1, f"{key}.min_gain", "a fraction in [0, 1)", self.min_gain)


def _factors() -> dict[str, float]:
    return {
        "degrees_vs_radians": 57.29578,
        "radians_vs_degrees": 0.01745329,
        "mm_vs_m": 1000.0,
        "m_vs_mm": 0.001,
        "cm_vs_m": 100.0,
        "m_vs_cm": 0.01,
        "0-255_vs_0-1": 255.0,
        "0-1_vs_0-255": 0.00392157,
    }


@dataclass
class UnitsConfig:
    """Per-dim spread ratios (C/A) that match a known unit or convention factor."""

    min_ratio: float = 3.0  # spread ratios nearer 1 than 3x are not unit findings
    tolerance: float = 0.1  # a ratio within 10 % of a known factor is that factor
    unexplained_ratio: float = 10.0  # beyond 10x with no known factor: soft finding
    # every dim of a feature beyond unexplained_ratio at once: one whole-feature row. Hard: a new task
    # changes some dims, not all; all at once is a convention (delta vs absolute, another action space)
    feature_severity: str = "hard"
    factors: dict[str, float] = field(default_factory=_factors)  # known factors (C spread / A spread)

    def validate(self, key: str) -> None:
        require(self.min_ratio > 1, f"{key}.min_ratio", "a ratio > 1", self.min_ratio)
        require(0 < self.tolerance < 1, f"{key}.tolerance", "a fraction in (0, 1)", self.tolerance)
        ratio = self.unexplained_ratio
        require(
            ratio >= self.min_ratio, f"{key}.unexplained_ratio", f">= min_ratio ({self.min_ratio})", ratio
        )
        for name, factor in self.factors.items():
            require(factor > 0, f"{key}.factors.{name}", "a factor > 0", factor)
        _severity(self.feature_severity, f"{key}.feature_severity")


@dataclass
class FramesConfig:
    """Rows decoded from the camera frames (issue 22): how much to decode and when a difference counts."""

    episodes: int = 4  # episodes sampled per camera (first, last and evenly between): one seek each
    per_episode: int = 8  # frames decoded per sampled episode, evenly spaced
    reversed_ratio: float = 0.5  # channel order: reversed distance < ratio x as-is distance -> BGR
    min_distance: float = 0.05  # ... and the as-is distance above this (0-1 units), else both fit
    swap_ratio: float = 0.5  # cameras: exchanged assignment < ratio x as-named distance -> swapped
    stale_mean: float = 0.05  # |recomputed - shipped| image mean or std per channel (0-1) -> stale (soft)
    stale_std: float = 0.25  # ... that gap in units of the base's image std moving the input more: hard
    grey_level: float = 3.0  # decoded channels differing by at most this (grey levels 0-255): a grey camera
    # (a grey picture through AV1 4:2:0 decodes with a tint of ~1.2 levels; colour scenes differ by tens)
    colour_spread: float = 0.02  # the base's image mean per channel spanning more (0-1): trained on colour
    fps_tolerance: float = 0.01  # video fps vs info.json fps
    # video files whose headers are read (in parallel) for every episode's span, nothing decoded; beyond,
    # the frames.health row says how many of how many were read
    span_files: int = 5000
    # alignment in time (issue 34): image motion against state speed, per camera
    max_lag: int = 5  # lags -max_lag..max_lag frames searched; an episode needs 2*max_lag+1 frames
    align_episodes: int = 6  # episodes sampled (first, last, evenly between): one window each
    align_frames: int = 64  # consecutive frames decoded per window (placed where the state moves most)
    lag_min_corr: float = 0.3  # peak correlation below this: the motion follows the state at no lag
    lag_margin: float = 0.1  # peak r - r at lag 0 at least this for a lag to count ...
    lag_confidence: float = 0.8  # ... and this share of the bootstrap's peaks at the same lag
    lag_bootstrap: int = 200  # bootstrap draws over the sampled episodes
    lag_min_episodes: int = 3  # fewer measured episodes: a bootstrap over them says nothing, the lag is soft
    neighbour_margin: float = 0.2  # a neighbour's state fits an episode's frames this much better
    # a whole camera shifted by episodes: offsets +-1..+-this tested, pooled over the sampled episodes;
    # each offset decodes one more window per sampled episode and reads that neighbour's state; 0: off
    max_episode_shift: int = 1
    still_level: float = 0.5  # image motion (grey levels 0-255) below this in every window: still camera
    jump_ratio: float = 2.0  # a reset jump: the largest change around a v3.0 boundary, this x the next

    def validate(self, key: str) -> None:
        require(self.episodes >= 1, f"{key}.episodes", "an episode count >= 1", self.episodes)
        require(self.per_episode >= 1, f"{key}.per_episode", "a frame count >= 1", self.per_episode)
        require(self.span_files >= 1, f"{key}.span_files", "a file count >= 1", self.span_files)
        require(self.jump_ratio > 1, f"{key}.jump_ratio", "a ratio > 1", self.jump_ratio)
        require(self.max_lag >= 1, f"{key}.max_lag", "a lag >= 1 frame", self.max_lag)
        require(
            self.max_episode_shift >= 0, f"{key}.max_episode_shift", "an offset >= 0", self.max_episode_shift
        )
        for name in ("align_episodes", "lag_bootstrap", "lag_min_episodes"):
            require(getattr(self, name) >= 1, f"{key}.{name}", "a count >= 1", getattr(self, name))
        need = 2 * self.max_lag + 2
        require(
            self.align_frames >= need, f"{key}.align_frames", f">= 2*max_lag+2 = {need}", self.align_frames
        )
        for name in ("lag_min_corr", "lag_margin", "lag_confidence", "neighbour_margin"):
            value = getattr(self, name)
            require(0 <= value <= 1, f"{key}.{name}", "a value in [0, 1]", value)
        for name in ("reversed_ratio", "swap_ratio"):
            value = getattr(self, name)
            require(0 < value < 1, f"{key}.{name}", "a ratio in (0, 1)", value)
        for name in (
            "min_distance",
            "stale_mean",
            "fps_tolerance",
            "still_level",
            "stale_std",
            "grey_level",
            "colour_spread",
        ):
            value = getattr(self, name)
            require(value >= 0, f"{key}.{name}", "a value >= 0", value)


# health thresholds that are shares in (0, 1)
HEALTH_FRACTIONS = (
    "fps_tolerance",
    "frozen_share",
    "stuck_still",
    "stuck_moving",
    "departure_alpha",
)


@dataclass
class HealthConfig:
    """Dataset health (issue 24), measured in the stats pass. Every threshold used is printed in its row;
    the severity of each row is the README's table (what breaks or silently corrupts training is hard)."""

    enabled: bool = True
    gap_factor: float = 1.5  # a step longer than this x 1/fps is a dropped-frame gap
    fps_tolerance: float = 0.05  # |fps from the timestamps / info.json fps - 1| beyond this: hard
    frozen_frames: int = 30  # a dim unchanged this many steps (and frozen_share of its episode) ...
    frozen_share: float = 0.2  # ... while the rest of its feature moves, departing from its habit: frozen
    stuck_still: float = 0.01  # a state dim moving < this share of its typical per-episode spread ...
    stuck_moving: float = 0.2  # ... while its action moves > this share of its own: a stuck actuator
    spike_z: float = 8.0  # a spike or a step must exceed this many RMS steps of its dim to be judged
    # motion rows judge an episode against the dim's habit over the episodes: at least this many of them
    # (fewer: one `skipped` row), and a departure is kept at this false discovery rate over episodes x dims
    min_episodes: int = 4
    departure_alpha: float = 0.01
    length_z: float = 3.5  # episode length beyond this robust z (median, MAD): a length outlier
    max_duplicate_share: float = 0.0  # exact duplicate episodes beyond this share of episodes: hard
    near_duplicate: float = 0.01  # episodes whose means, ends and length agree within this x std: soft
    repeat_windows: int = 2  # windows of moving rows (readers/repeats) one episode repeats bit for bit
    # from another, at one offset: a partial copy (hard)
    worst: int = 10  # episodes in the record's worst-episodes table

    def validate(self, key: str) -> None:
        require(self.min_episodes >= 3, f"{key}.min_episodes", "an episode count >= 3", self.min_episodes)
        require(self.frozen_frames >= 2, f"{key}.frozen_frames", "a frame count >= 2", self.frozen_frames)
        require(self.worst >= 1, f"{key}.worst", "a row count >= 1", self.worst)
        least = self.repeat_windows
        require(least >= 2, f"{key}.repeat_windows", "a window count >= 2", least)
        for name in ("gap_factor", "spike_z", "length_z"):
            require(getattr(self, name) > 1, f"{key}.{name}", "a factor > 1", getattr(self, name))
        for name in HEALTH_FRACTIONS:
            value = getattr(self, name)
            require(0 < value < 1, f"{key}.{name}", "a fraction in (0, 1)", value)
        for name in ("max_duplicate_share", "near_duplicate"):
            value = getattr(self, name)
            require(0 <= value < 1, f"{key}.{name}", "a fraction in [0, 1)", value)


@dataclass
class ContractConfig(StageConfig):
    """contract: base checkpoint (A) vs training config (B) vs dataset (C). Thresholds and why."""

    # cpus: parquet columns decode side by side, then the features reduce side by side; memory is a
    # batch of rows (`parquet_columns.BATCH_ROWS`) plus 65536 counters per dim, whatever the dataset size
    resources: Resources = field(default_factory=lambda: Resources(time_min=30, cpus_per_task=2, mem_gb=4))
    rank_error: float = (
        0.001  # recomputed quantiles: at most 0.1 % of the rows between reported and true rank
    )
    dynamics_rows: int = 50000  # consecutive rows kept for the absolute-vs-delta action check (bounded)
    # above this many rows (info.json total_frames, read at launch) the data pass runs as one Slurm job
    # array, a task per this many rows (whole data files, at most one task per file); 0: never
    shard_rows: int = 4_000_000
    # info.json total_frames/episodes vs what the parquet holds (LeRobot indexes by them)
    frames_severity: str = "hard"
    degenerate: DegenerateConfig = field(default_factory=DegenerateConfig)
    stale: StaleConfig = field(default_factory=StaleConfig)
    shift: ShiftConfig = field(default_factory=ShiftConfig)
    permutation: PermutationConfig = field(default_factory=PermutationConfig)
    units: UnitsConfig = field(default_factory=UnitsConfig)
    sign: SignConfig = field(default_factory=SignConfig)
    offset: OffsetConfig = field(default_factory=OffsetConfig)
    relation: RelationConfig = field(default_factory=RelationConfig)
    frames: FramesConfig = field(default_factory=FramesConfig)
    health: HealthConfig = field(default_factory=HealthConfig)

    def validate(self, key: str) -> None:
        super().validate(key)
        require(0 < self.rank_error <= 0.5, f"{key}.rank_error", "a rank error in (0, 0.5]", self.rank_error)
        require(self.dynamics_rows >= 1, f"{key}.dynamics_rows", "a row count >= 1", self.dynamics_rows)
        require(self.shard_rows >= 0, f"{key}.shard_rows", "a row count >= 0 (0: no array)", self.shard_rows)
        _severity(self.frames_severity, f"{key}.frames_severity")
        for name in (
            "degenerate",
            "stale",
            "shift",
            "permutation",
            "units",
            "sign",
            "offset",
            "relation",
            "frames",
            "health",
        ):
            getattr(self, name).validate(f"{key}.{name}")


def _severity(value: str, key: str) -> None:
    require(value in SEVERITIES, key, " | ".join(SEVERITIES), value)
