"""The contract stage's settings: every threshold with its default and the reason for its value.

Defaults live here only (Hydra composes them from this dataclass; `--cfg job` shows them); overrides
such as `stages.contract.rank_error=0.01` are type-checked when Hydra composes and range-checked by
`validate` at launch, with a message naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.records import SEVERITIES
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
    severity: str = "hard"  # the normalizer would use stats of other data
    quantile_rank: float = 0.05  # a shipped q01/q10/q50/q90/q99 sitting > 0.05 in rank from its level
    # soft: LeRobot v3 averages per-episode quantiles, so real datasets drift a little
    quantile_severity: str = "soft"

    def validate(self, key: str) -> None:
        require(self.mean_z > 0, f"{key}.mean_z", "a number of data std > 0", self.mean_z)
        require(self.std_ratio > 1, f"{key}.std_ratio", "a ratio > 1", self.std_ratio)
        require(0 < self.range_frac <= 1, f"{key}.range_frac", "a fraction in (0, 1]", self.range_frac)
        require(0 < self.quantile_rank < 1, f"{key}.quantile_rank", "a rank in (0, 1)", self.quantile_rank)
        _severity(self.severity, f"{key}.severity")
        _severity(self.quantile_severity, f"{key}.quantile_severity")


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


@dataclass
class ContractConfig(StageConfig):
    """contract: base checkpoint (A) vs training config (B) vs dataset (C). Thresholds and why."""

    # cpus: one thread decodes parquet row groups while the other reduces them; memory is one row
    # group plus 65536 counters per dim, whatever the dataset size
    resources: Resources = field(default_factory=lambda: Resources(time_min=30, cpus_per_task=2, mem_gb=4))
    rank_error: float = (
        0.001  # recomputed quantiles: at most 0.1 % of the rows between reported and true rank
    )
    dynamics_rows: int = 50000  # consecutive rows kept for the absolute-vs-delta action check (bounded)
    # info.json total_frames/episodes vs what the parquet holds (LeRobot indexes by them)
    frames_severity: str = "hard"
    degenerate: DegenerateConfig = field(default_factory=DegenerateConfig)
    stale: StaleConfig = field(default_factory=StaleConfig)
    shift: ShiftConfig = field(default_factory=ShiftConfig)
    permutation: PermutationConfig = field(default_factory=PermutationConfig)
    units: UnitsConfig = field(default_factory=UnitsConfig)

    def validate(self, key: str) -> None:
        super().validate(key)
        require(0 < self.rank_error <= 0.5, f"{key}.rank_error", "a rank error in (0, 0.5]", self.rank_error)
        require(self.dynamics_rows >= 1, f"{key}.dynamics_rows", "a row count >= 1", self.dynamics_rows)
        _severity(self.frames_severity, f"{key}.frames_severity")
        for name in ("degenerate", "stale", "shift", "permutation", "units"):
            getattr(self, name).validate(f"{key}.{name}")


def _severity(value: str, key: str) -> None:
    require(value in SEVERITIES, key, " | ".join(SEVERITIES), value)
