"""The typed configs of the single-module stages (container_check, checkpoint_storage), apart from their
code: a launch validates every stage's settings and Hydra types every `stages.<name>` key from these
classes, and neither should import a stage (the stages bring the readers and numpy).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version

from pipeline.errors import ConfigError
from pipeline.stages.config import Resources, StageConfig, require

GL_BACKENDS = ("egl", "osmesa", "glfw")


def _packages() -> dict[str, str | None]:
    return {
        "hpc-preflight": "",
        "torch": ">=2.3",
        "numpy": "",
        "mujoco": ">=3.1",
        "submitit": ">=1.5",
        "safetensors": "",
        "pyarrow": "",
    }


@dataclass
class ContainerCheckConfig(StageConfig):
    """container_check: the environment every stage runs in."""

    resources: Resources = field(default_factory=lambda: Resources(time_min=15))
    require_gpu: bool = False  # a GPU node must show CUDA devices to torch
    min_gpus: int = 1
    min_capability: str | None = None  # e.g. "8.0"
    mujoco_gl: str = "egl"  # the backend MuJoCo renders with in the jobs: egl | osmesa | glfw
    require_gl: bool = True  # no GL context is a hard finding (the render stage needs one)
    gl_timeout_s: float = 120.0
    min_free_gb: float = 1.0  # on the run, audit and checkpoint directories
    python: str = ">=3.10"
    # distribution name: version specifier ("" = installed, any version); a bad specifier is an
    # InputError naming stages.container_check.packages.<name> when the stage runs
    packages: dict[str, str | None] = field(default_factory=_packages)

    def validate(self, key: str) -> None:
        super().validate(key)
        require(self.min_gpus >= 0, f"{key}.min_gpus", "a count >= 0", self.min_gpus)
        require(self.mujoco_gl in GL_BACKENDS, f"{key}.mujoco_gl", " | ".join(GL_BACKENDS), self.mujoco_gl)
        require(self.gl_timeout_s > 0, f"{key}.gl_timeout_s", "seconds > 0", self.gl_timeout_s)
        require(self.min_free_gb >= 0, f"{key}.min_free_gb", "GiB >= 0", self.min_free_gb)
        if self.min_capability is not None:
            try:
                Version(self.min_capability)
            except InvalidVersion:
                require(False, f"{key}.min_capability", "a capability such as '8.0'", self.min_capability)


ITEMSIZE = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
}


@dataclass
class CheckpointStorageConfig(StageConfig):
    """How the run checkpoints, so the stage can tell whether it fits."""

    resources: Resources = field(default_factory=lambda: Resources(time_min=10))
    keep: int = 3  # checkpoints on disk at once (the run's keep-last-K)
    margin: float = 0.1  # headroom over the estimate (sidecars, a save in flight, growth)
    severity: str = "block"  # warn | block: what not fitting does to the gate
    size_bytes: int | None = None  # one checkpoint's size, when known (overrides every estimate)
    dtype: str | None = None  # the dtype the run saves parameters in (F32, BF16, ...); null: as stored
    state_multiplier: float = 1.0  # bytes per parameter byte saved: 1 weights only, ~3 with Adam moments
    require_quota: bool = False  # true: no quota tool on the node is unverifiable (else a note)
    fallbacks: list[str] = field(default_factory=list)  # folders save_checkpoint falls back to

    def validate(self, key: str) -> None:
        super().validate(key)
        if self.keep < 1:
            raise ConfigError(f"{key}.keep", f"expected an integer >= 1, got {self.keep}")
        if self.margin < 0:
            raise ConfigError(f"{key}.margin", f"expected a fraction >= 0, got {self.margin}")
        if self.severity not in ("warn", "block"):
            raise ConfigError(f"{key}.severity", f"expected warn or block, got {self.severity!r}")
        if self.size_bytes is not None and self.size_bytes <= 0:
            raise ConfigError(f"{key}.size_bytes", f"expected a size in bytes > 0, got {self.size_bytes}")
        if self.dtype is not None and self.dtype.upper() not in ITEMSIZE:
            raise ConfigError(f"{key}.dtype", f"expected one of {', '.join(ITEMSIZE)}, got {self.dtype!r}")
        if self.state_multiplier <= 0:
            raise ConfigError(f"{key}.state_multiplier", f"expected > 0, got {self.state_multiplier}")
