"""The training job's conditions: the environment and resources the real run will have.

The twins run with determinism switches the stage sets (`stages.determinism.env` and
`PREFLIGHT_DETERMINISTIC`); a training job that sets none of them can differ run to run where the
twins do not (a batch order taken from a set of strings differs per process when `PYTHONHASHSEED` is
unset). So a second pair (`bare_a`, `bare_b`) runs with the job's environment instead, and the record
states the exact conditions each pair proved.

The job's environment is, most specific last: the chained sbatch script's `export NAME=value`,
`unset NAME` and `#SBATCH --export=` lines (parsed as argv, never executed), the `training.env`
block, and `stages.determinism.job_env`. With none of them, the job is taken to set none of the
injected variables (what a plain `sbatch train.sbatch` does).
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from pipeline.errors import InputError
from pipeline.stages.determinism.config import NAME, DeterminismConfig
from pipeline.trainlog.spec import ENV_MODE

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_REF_RE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")
MEANING = {
    "PYTHONHASHSEED": "unset means str/bytes hash() is salted per process: the iteration order of a set "
    "of strings (and anything derived from it) changes from run to run",
    "OMP_NUM_THREADS": "unset means torch uses every core the job is given: CPU reductions depend on the "
    "thread count",
    "CUBLAS_WORKSPACE_CONFIG": "unset means cuBLAS may choose nondeterministic reduction paths on CUDA "
    "(torch refuses them only under deterministic algorithms)",
    ENV_MODE: "unset means the stage does not switch torch.use_deterministic_algorithms on in the job",
}


@dataclass
class JobConditions:
    """What the training job's environment holds for the injected variables, and where that came from."""

    values: dict[str, str | None] = field(default_factory=dict)  # None: unset in the job
    sources: list[str] = field(default_factory=list)
    unresolved: dict[str, str] = field(default_factory=dict)  # NAME -> raw text the parser cannot expand
    resources: dict[str, Any] = field(default_factory=dict)  # cpus_per_task, gpus from #SBATCH lines

    def describe(self) -> dict[str, Any]:
        return {
            "values": self.values,
            "sources": self.sources or ["none given: the job is taken to set none of the injected variables"],
            "unresolved": self.unresolved,
            "resources": self.resources,
        }


def injected(config: DeterminismConfig) -> dict[str, str]:
    """What the stage sets in the twins: `env` plus the deterministic-algorithms switch."""
    chosen = {k: v for k, v in config.env.items() if v is not None}
    if config.warn_only:
        chosen[ENV_MODE] = "warn"
    else:
        chosen[ENV_MODE] = "1" if config.deterministic_algorithms else "0"
    return chosen


def _assign(text: str, into: dict[str, str | None], unresolved: dict[str, str], res: dict[str, Any]) -> None:
    name, _, value = text.partition("=")
    if not _NAME_RE.match(name):
        return
    refs = _REF_RE.findall(value)
    if refs == ["SLURM_CPUS_PER_TASK"] and res.get("cpus_per_task"):
        value = _REF_RE.sub(str(res["cpus_per_task"]), value)
    elif refs:
        unresolved[name] = value
    into[name] = value


def _sbatch_option(words: list[str], res: dict[str, Any], into: dict, unresolved: dict) -> None:
    for word in words:
        key, _, value = word.partition("=")
        if key in ("--cpus-per-task", "-c") and value.isdigit():
            res["cpus_per_task"] = int(value)
        elif key in ("--gpus-per-node", "--gpus", "--gres"):
            res["gpus"] = value
        elif key == "--export":
            for item in value.split(","):
                if "=" in item:
                    _assign(item, into, unresolved, res)
                elif item in ("ALL", "NONE"):
                    res["export"] = item


def parse_sbatch(path: Path) -> tuple[dict[str, str | None], dict[str, str], dict[str, Any]]:
    """`export`/`unset`/`#SBATCH` lines of a batch script, split as argv (the script never runs)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InputError(f"chain.sbatch: cannot read {path}: {exc}", path=path, field="chain.sbatch") from exc
    values: dict[str, str | None] = {}
    unresolved: dict[str, str] = {}
    res: dict[str, Any] = {}
    for line in text.splitlines():
        stripped = line.strip()
        try:
            if stripped.startswith("#SBATCH"):
                _sbatch_option(shlex.split(stripped[len("#SBATCH") :]), res, values, unresolved)
                continue
            words = shlex.split(stripped, comments=True)
        except ValueError:
            continue
        if words[:1] == ["export"]:
            for word in words[1:]:
                if "=" in word:
                    _assign(word, values, unresolved, res)
        elif words[:1] == ["unset"]:
            values.update({w: None for w in words[1:] if _NAME_RE.match(w)})
    return values, unresolved, res


def _block(value: Any, key: str) -> dict[str, str | None]:
    plain = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
    if not isinstance(plain, dict):
        raise InputError(f"{key}: expected a mapping NAME -> value (null: unset), got {plain!r}", field=key)
    return {str(k): None if v is None else str(v) for k, v in plain.items()}


def job_conditions(cfg: DictConfig, config: DeterminismConfig) -> JobConditions:
    """The training job's environment from the sbatch script, `training.env` and `job_env`."""
    job = JobConditions()
    script = (cfg.get("chain") or {}).get("sbatch")
    if script:
        values, job.unresolved, job.resources = parse_sbatch(Path(script))
        job.values.update(values)
        job.sources.append(f"chain.sbatch ({script})")
    training_env = (cfg.get("training") or {}).get("env")
    if training_env:
        job.values.update(_block(training_env, "training.env"))
        job.sources.append("training.env")
    if config.job_env is not None:
        job.values.update(_block(config.job_env, f"stages.{NAME}.job_env"))
        job.sources.append(f"stages.{NAME}.job_env")
    return job


def _same(name: str, stage: str | None, job: str | None) -> bool:
    if name == "PYTHONHASHSEED":  # "random" is what unset means; "0" disables salting
        stage, job = (None if v in (None, "random") else v for v in (stage, job))
    return stage == job


def pair_values(config: DeterminismConfig, job: JobConditions) -> dict[str, str | None]:
    """Each injected variable as the job will have it (None: unset); an unexpandable value keeps the
    stage's (assumed fixed; the record says so)."""
    out: dict[str, str | None] = {}
    stage = injected(config)
    for name in stage:
        value = job.values.get(name)
        out[name] = stage[name] if name in job.unresolved else value
    return out


def differing(config: DeterminismConfig, job: JobConditions) -> dict[str, dict[str, str | None]]:
    """The injected variables whose value the training job does not share."""
    stage, pair = injected(config), pair_values(config, job)
    return {
        name: {"stage": stage[name], "job": pair[name]}
        for name in stage
        if not _same(name, stage[name], pair[name])
    }


def pair_env(config: DeterminismConfig, job: JobConditions) -> tuple[dict[str, str], dict[str, str | None]]:
    """The bare pair's environment: this process's, minus every injected variable, plus the job's."""
    env = {k: v for k, v in os.environ.items() if k not in injected(config)}
    values = pair_values(config, job)
    other = {k: v for k, v in job.values.items() if k not in values and k not in job.unresolved}
    for name, value in other.items():  # the job's other variables (an `unset` one is removed)
        if value is None:
            env.pop(name, None)
    env.update({k: v for k, v in {**other, **values}.items() if v is not None})
    return env, {**other, **values}
