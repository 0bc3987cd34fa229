"""The determinism stage's settings: the smoke training it runs, how, and the reload round trip.

Each run is its own part job (determinism.twin_a / twin_b / control / ddp, and bare_a / bare_b: the
pair under the training job's environment), so on Slurm the twins are
separate jobs that can run at the same time; every part gets `resources` (1 CPU by default) and, over
them, its own `part_resources.<part>`. Defaults live here only; Hydra composes them from this dataclass.
The command templates are checked where they are filled (`runner.substitute`): a shell string or an
unknown placeholder is an `InputError` naming `stages.determinism.train_cmd`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from pipeline.stages.config import Resources, StageConfig, require

NAME = "determinism"
SEVERITIES = ("hard", "soft")
_EVENT_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


def _env() -> dict[str, str | None]:
    return {
        "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
        "PYTHONHASHSEED": "0",
        "OMP_NUM_THREADS": "1",  # same thread count on every node: CPU reductions depend on it
    }


@dataclass
class ReloadConfig:
    """The train -> eval reload round trip of twin A's checkpoint."""

    enabled: bool = True
    # module:function(checkpoint_dir, dataset_dir) -> pipeline.trainlog.Reloaded, the code eval reloads
    # with; None: the round trip is one soft `unverifiable` row naming this key
    loader: str | None = None
    dataset: str | None = None  # the dataset eval re-injects stats from; default dataset.path
    save_normalization_stats: bool = False  # the smoke save strips the stats; the reload must re-inject them
    norm_key_pattern: str = r"(^|\.)(un)?normalize_[^.]*\.buffer_"  # normalization keys inside model weights
    norm_file_pattern: str = r"normalizer_processor\.safetensors$"  # files whose every key is a statistic
    stats_atol: float = 0.0  # re-injected stats must equal training's exactly

    def validate(self, key: str) -> None:
        if self.loader is not None:
            module, _, function = self.loader.partition(":")
            require(bool(module and function), f"{key}.loader", "module:function", self.loader)
        for name in ("norm_key_pattern", "norm_file_pattern"):
            try:
                re.compile(getattr(self, name))
            except re.error as exc:
                require(False, f"{key}.{name}", f"a regular expression ({exc})", getattr(self, name))
        require(self.stats_atol >= 0, f"{key}.stats_atol", "a tolerance >= 0", self.stats_atol)


@dataclass
class DeterminismConfig(StageConfig):
    """determinism: same-seed twin runs, a control run, DDP sanity and the train<->eval reload round trip."""

    resources: Resources = field(default_factory=lambda: Resources(time_min=30, cpus_per_task=1, mem_gb=2))
    # per part, over `resources`, e.g. stages.determinism.part_resources.ddp.gpus_per_node=8 with ddp_procs=8
    part_resources: dict[str, Resources] = field(default_factory=lambda: {"ddp": Resources()})
    seed: int = 0  # the twins' seed
    control_seed: int = 1  # must make the stream differ, or the check is unverifiable
    steps: int = 6  # optimizer steps per smoke run
    # The user's smoke training as an argv list (never a shell string); placeholders are substituted per
    # element: {python} {seed} {steps} {out} {dataset} {model} {training} {fault} {save_normalization_stats}.
    # The command must write <out>/<metrics_file> (pipeline.trainlog does it in two lines) and save its
    # checkpoint to <out>/<checkpoint_subdir>. Empty: a lerobot-train command typed after `--` is run
    # through pipeline.trainers.lerobot_train (runner.train_argv); with none, the stage has nothing to run
    # and is skipped (it never trains some other policy on the user's checkpoint). Typed Any so that a
    # shell string reaches the runner, which refuses it with a message naming the key.
    train_cmd: Any = field(default_factory=list)
    metrics_file: str = "metrics.jsonl"
    checkpoint_subdir: str = "checkpoint"
    timeout_s: float = 900.0  # per run; a run past it is killed (with its torchrun workers) and is an error
    # set in each run's environment before torch starts (recorded in part.json)
    env: dict[str, str | None] = field(default_factory=_env)
    deterministic_algorithms: bool = True  # torch.use_deterministic_algorithms in each run
    warn_only: bool = False  # true: deterministic algorithms that warn instead of raising; ops hit are listed
    fault: str = "none"  # none | unseeded_shuffle | clock_seed: a nondeterminism planted in the run ({fault})
    ddp_procs: int = 1  # > 1: one more job runs the command under torchrun --nproc_per_node=N
    ddp_cmd: Any = None  # argv list overriding the derived torchrun command ({nproc} + the placeholders)
    reload: ReloadConfig = field(default_factory=ReloadConfig)
    # The training job's conditions: a second pair (parts bare_a, bare_b) runs without the injected
    # variables, with the job's environment: the chained sbatch script's export lines, `training.env`,
    # then this mapping (NAME -> value; null: unset in the job). Same seed as the twins.
    job_pair: bool = True
    job_env: dict[str, str | None] | None = None
    conditions_severity: str = "hard"  # twins identical only under variables the job does not set
    # The horizon: events (trainlog `log.event(name)`: epoch_end, eval, checkpoint_save, lr_change) the
    # smoke run must reach. With any named, each run gets {steps}=max_steps and stops (`log.stop`) once
    # they were seen and `horizon_after` more steps were logged; `steps` stays the least.
    horizon_events: list[str] = field(default_factory=list)
    horizon_after: int = 2
    max_steps: int = 64
    worker_rng_severity: str = "soft"  # a random stream identical in several DataLoader workers
    # The loss envelope (envelope.py says why this band): twin A's loss per step against earlier clear
    # runs in audit_dir whose fingerprints equal this run's on `envelope_match`; the curve is kept in the
    # row's evidence so later runs can read it. Band per step: mean +- max(k*sd*sqrt(1+1/n), floors);
    # k: Student's t for envelope_alpha split over the steps, unless envelope_k sets it.
    envelope_enabled: bool = True
    envelope_severity: str = "soft"  # hard: a curve outside the envelope blocks
    envelope_k: float | None = None
    envelope_alpha: float = 0.01
    envelope_rel_floor: float = 0.02  # the least half-width, as a fraction of the mean loss
    envelope_abs_floor: float = 1e-6
    envelope_min_runs: int = 2  # fewer earlier runs: an informative row, no comparison
    envelope_max_runs: int = 20  # the newest ones
    envelope_match: list[str] = field(default_factory=lambda: ["training"])  # fingerprints that must match

    def validate(self, key: str) -> None:
        super().validate(key)
        require(self.steps >= 1, f"{key}.steps", "a step count >= 1", self.steps)
        require(self.timeout_s > 0, f"{key}.timeout_s", "seconds > 0", self.timeout_s)
        require(self.ddp_procs >= 1, f"{key}.ddp_procs", "a process count >= 1", self.ddp_procs)
        for name in ("metrics_file", "checkpoint_subdir"):
            value = getattr(self, name)
            inside = bool(value) and not value.startswith("/") and ".." not in value.split("/")
            require(inside, f"{key}.{name}", "a relative name inside <out>", value)
        self.reload.validate(f"{key}.reload")
        self._validate_envelope(key)
        for name in ("conditions_severity", "worker_rng_severity", "envelope_severity"):
            value = getattr(self, name)
            require(value in SEVERITIES, f"{key}.{name}", "one of hard, soft", value)
        for index, event in enumerate(self.horizon_events):
            ok = isinstance(event, str) and bool(_EVENT_RE.match(event))
            require(ok, f"{key}.horizon_events[{index}]", "an event name such as epoch_end", event)
        require(self.horizon_after >= 1, f"{key}.horizon_after", "a step count >= 1", self.horizon_after)
        require(
            self.max_steps >= self.steps or not self.horizon_events,
            f"{key}.max_steps",
            f"a step cap >= steps ({self.steps})",
            self.max_steps,
        )

    def _validate_envelope(self, key: str) -> None:
        require(
            0 < self.envelope_alpha < 1, f"{key}.envelope_alpha", "a level in (0, 1)", self.envelope_alpha
        )
        k = self.envelope_k
        require(k is None or k > 0, f"{key}.envelope_k", "null or a multiplier > 0", k)
        for name in ("envelope_rel_floor", "envelope_abs_floor"):
            require(getattr(self, name) >= 0, f"{key}.{name}", "a floor >= 0", getattr(self, name))
        require(self.envelope_min_runs >= 2, f"{key}.envelope_min_runs", "2 or more", self.envelope_min_runs)
        require(
            self.envelope_max_runs >= self.envelope_min_runs,
            f"{key}.envelope_max_runs",
            f"at least envelope_min_runs ({self.envelope_min_runs})",
            self.envelope_max_runs,
        )
        known = ("model", "training", "dataset", "config", "container")
        bad = [m for m in self.envelope_match if m not in known]
        require(not bad, f"{key}.envelope_match", f"names among {', '.join(known)}", self.envelope_match)
