"""One training run of the determinism stage: a twin, the control, or the DDP smoke run.

Each runs as its own part job (on Slurm: its own job, so the twins can run at the same time on two
GPUs or nodes). The user's command is an argv template; placeholders are substituted per element and
never joined into a shell string. The determinism switches are set in the child's environment, so
they are in place before torch is imported there, and `part.json` records exactly what was set.
The bare pair (`bare_a`, `bare_b`) runs instead with the training job's environment
(`conditions.pair_env`): none of the injected variables unless the job sets them. A failed run's log
is read for its cause: the op torch refused under deterministic algorithms, or the last exception.
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from pipeline.errors import InputError
from pipeline.progress import progress
from pipeline.readers import lerobot_command
from pipeline.stages import StageContext
from pipeline.stages.config import settings
from pipeline.stages.determinism import conditions
from pipeline.stages.determinism.config import NAME, DeterminismConfig
from pipeline.storage import atomic_write_json
from pipeline.trainlog.spec import ENV_AFTER, ENV_HORIZON, ENV_MIN_STEPS, NONDET_RE

PART_FILE = "part.json"
LOG_FILE = "train.log"
PLACEHOLDERS = (
    "python",
    "seed",
    "steps",
    "out",
    "dataset",
    "model",
    "training",
    "fault",
    "save_normalization_stats",
)
_FIELD_RE = re.compile(r"\{([^{}]*)\}")
TRAINER = "pipeline.trainers.lerobot_train"
# the smoke run of a lerobot-train command (no train_cmd set): the wrapper, then the user's flags as typed
LEROBOT_TRAIN_CMD = (
    "{python}", "-m", TRAINER,
    "--seed", "{seed}", "--steps", "{steps}", "--out", "{out}", "--dataset", "{dataset}",
)  # fmt: skip
FAULTS = ("none", "unseeded_shuffle", "clock_seed")
BARE = ("bare_a", "bare_b")
_REFUSED_RE = re.compile(r"^.*?(\S+ does not have a deterministic implementation, but you set .*)$", re.M)
_EXC_RE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)\b:?.*)$", re.M)


def stage_config(cfg: DictConfig, given: Any = None) -> DeterminismConfig:
    """The job's typed config (`ctx.config`), or `cfg`'s section typed here for a direct call."""
    return settings(DeterminismConfig, cfg, given, NAME)


def fault_for(cfg: DictConfig, config: DeterminismConfig | None = None) -> str:
    """The `{fault}` placeholder: a nondeterminism the command is asked to plant (none by default)."""
    fault = (config or stage_config(cfg)).fault or "none"
    if fault not in FAULTS:
        raise InputError(
            f"stages.{NAME}.fault: {fault!r} is not one of {', '.join(FAULTS)}",
            field=f"stages.{NAME}.fault",
        )
    return fault


def substitute(template: Sequence[Any], values: Mapping[str, str], key: str) -> list[str]:
    """Fill `{name}` placeholders element by element; an unknown name is an error, not a literal."""
    if isinstance(template, (str, bytes)) or not isinstance(template, Sequence) or not template:
        raise InputError(
            f"{key}: expected a non-empty argv list "
            f"(e.g. [python, train.py, --seed, '{{seed}}']), "
            f"got {template!r}; a shell string is not accepted",
            field=key,
        )
    argv = []
    for index, item in enumerate(template):
        if not isinstance(item, (str, int, float)):
            raise InputError(f"{key}[{index}]: expected a string, got {type(item).__name__}", field=key)
        text = str(item)
        for name in _FIELD_RE.findall(text):
            if name not in values:
                raise InputError(
                    f"{key}[{index}]: unknown placeholder {{{name}}} in {text!r}; known: "
                    f"{', '.join('{' + p + '}' for p in values)}",
                    field=key,
                )
        argv.append(_FIELD_RE.sub(lambda m: values[m.group(1)], text))
    return argv


def uses_placeholder(template: Any, name: str) -> bool:
    """Whether an argv template hands the command `{name}` anywhere (a promise about its output that
    only a command told the value can keep)."""
    items = template if isinstance(template, Sequence) and not isinstance(template, str) else [template]
    return any(name in _FIELD_RE.findall(str(item)) for item in items)


def placeholder_values(cfg: DictConfig, config: DeterminismConfig, seed: int, out: Path) -> dict[str, str]:
    paths = {kind: (cfg.get(kind) or {}).get("path") for kind in ("model", "dataset", "training")}
    return {
        "python": sys.executable,
        "seed": str(seed),
        "steps": str(config.max_steps if config.horizon_events else config.steps),
        "out": str(out),
        **{k: "" if v is None else str(v) for k, v in paths.items()},
        "fault": fault_for(cfg, config),
        "save_normalization_stats": str(config.reload.save_normalization_stats).lower(),
    }


def child_env(config: DeterminismConfig) -> tuple[dict[str, str], dict[str, str]]:
    """The child's environment and the subset this stage set (recorded as evidence)."""
    chosen = {**conditions.injected(config), **horizon_env(config)}
    return {**os.environ, **chosen}, chosen


def horizon_env(config: DeterminismConfig) -> dict[str, str]:
    """What `trainlog.MetricsLog.stop` reads: the events to reach and the steps to log after them."""
    if not config.horizon_events:
        return {}
    return {
        ENV_HORIZON: ",".join(config.horizon_events),
        ENV_AFTER: str(config.horizon_after),
        ENV_MIN_STEPS: str(config.steps),
    }


def part_env(
    cfg: DictConfig, config: DeterminismConfig, part: str
) -> tuple[dict[str, str], dict[str, Any], str | None]:
    """(environment, what to record, why the part is skipped or None) for one part."""
    if part not in BARE:
        env, chosen = child_env(config)
        return env, {"env_set": chosen, "conditions": "stage"}, None
    if not config.job_pair:
        return {}, {}, f"stages.{NAME}.job_pair=false"
    job = conditions.job_conditions(cfg, config)
    differ = conditions.differing(config, job)
    if not differ:
        return (
            {},
            {"job_conditions": job.describe()},
            (
                "the training job sets every injected variable as the stage does: "
                "the twins prove its conditions"
            ),
        )
    env, values = conditions.pair_env(config, job)
    env.update(horizon_env(config))
    record = {
        "env_set": {k: v for k, v in values.items() if v is not None} | horizon_env(config),
        "env_unset": sorted(k for k, v in values.items() if v is None),
        "conditions": "job",
        "job_conditions": job.describe(),
        "differing": differ,
    }
    return env, record, None


def lerobot_flags(cfg: Any) -> list[str] | None:
    """The flags of a lerobot-train `training.command` (the command typed after `--`), as typed; None
    when there is none or it is another program (which the stage cannot shorten to a smoke run)."""
    argv = lerobot_command.training_argv(cfg)
    parsed = lerobot_command.parse(argv) if argv else None
    return None if parsed is None else parsed.args


def derived(cfg: Any) -> tuple[str, ...]:
    """`train_cmd` counts as set when the stage can derive it: a lerobot-train training command."""
    return (f"stages.{NAME}.train_cmd",) if lerobot_flags(cfg) is not None else ()


def train_argv(cfg: Any, config: DeterminismConfig, values: Mapping[str, str]) -> list[str]:
    """The smoke run's argv: `train_cmd` filled in, else the lerobot-train command typed after `--` run
    through `pipeline.trainers.lerobot_train` (lerobot's own main, in-process, with the metrics hooks):
    the stage's seed, steps, output folder and dataset put in by the wrapper, the user's flags after
    `--` unsubstituted (a `{` in `--rename_map={...}` is JSON, not a placeholder)."""
    key = f"stages.{NAME}.train_cmd"
    flags = None if config.train_cmd else lerobot_flags(cfg)
    if flags is None:
        return substitute(plain(config.train_cmd), values, key)
    return [*substitute(LEROBOT_TRAIN_CMD, values, key), "--", *flags]


def ddp_argv(config: DeterminismConfig, argv: list[str], values: Mapping[str, str]) -> list[str]:
    """`torchrun --nproc_per_node=N` around the training command (python -m torch.distributed.run).

    A user command that starts with `<python> -m module` or `<python> script.py` is re-launched as
    that module/script under torchrun; anything else needs an explicit `ddp_cmd`.
    """
    nproc = config.ddp_procs
    if config.ddp_cmd:
        return substitute(plain(config.ddp_cmd), {**values, "nproc": str(nproc)}, f"stages.{NAME}.ddp_cmd")
    head = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    if len(argv) >= 3 and Path(argv[0]).name.startswith("python") and argv[1] == "-m":
        return [*head, "-m", *argv[2:]]
    if len(argv) >= 2 and Path(argv[0]).name.startswith("python") and argv[1].endswith(".py"):
        return [*head, *argv[1:]]
    raise InputError(
        f"stages.{NAME}.train_cmd: cannot derive a torchrun command from {argv[:3]!r}; set "
        f"stages.{NAME}.ddp_cmd (an argv list; {{nproc}} is the process count)",
        field=f"stages.{NAME}.ddp_cmd",
    )


def part_seed(config: DeterminismConfig, part: str) -> int:
    return config.control_seed if part == "control" else config.seed


def run_part(cfg: DictConfig, ctx: StageContext) -> dict[str, Any]:
    """Run one training command to completion and leave its stream, log and `part.json` behind.

    A non-zero exit is raised after `part.json` is written, so the part job fails (no `done.json`)
    and the merge reports the twin as crashed with the exit code and the log's tail.
    """
    config = stage_config(cfg, ctx.config)
    part = str(ctx.part)
    out = ctx.part_dir(part)
    if part == "ddp" and config.ddp_procs <= 1:
        return _write(out, {"part": part, "skipped": True, "reason": f"ddp_procs={config.ddp_procs}"})
    try:
        env, env_record, skipped = part_env(cfg, config, part)
    except InputError as exc:
        _write(out, {"part": part, "returncode": None, "log_tail": f"InputError: {exc}"})
        raise
    if skipped:
        return _write(out, {"part": part, "skipped": True, "reason": skipped, **env_record})
    shutil.rmtree(out / "run", ignore_errors=True)  # a requeued part starts its run afresh
    (out / "run").mkdir(parents=True, exist_ok=True)
    seed = part_seed(config, part)
    values = placeholder_values(cfg, config, seed, out / "run")
    try:
        argv = train_argv(cfg, config, values)
        if part == "ddp":
            argv = ddp_argv(config, argv, values)
    except InputError as exc:
        _write(out, {"part": part, "seed": seed, "returncode": None, "log_tail": f"InputError: {exc}"})
        raise
    record = {
        "part": part,
        "seed": seed,
        "argv": argv,
        **env_record,
        "cwd": str(out / "run"),
        "host": socket.gethostname(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "gpu": gpu_info(),
        "versions": _versions(),
        "ddp_procs": config.ddp_procs if part == "ddp" else 1,
    }
    with progress(f"determinism {part}: training command (its output: {out / LOG_FILE})", None):
        record.update(_execute(argv, env, out, config.timeout_s))
    _write(out, record)
    if record["returncode"] != 0:
        raise RuntimeError(f"{part}: training command exited {record['returncode']}: {record['log_tail']}")
    return record


def _execute(argv: list[str], env: dict[str, str], out: Path, timeout_s: float) -> dict[str, Any]:
    started = time.time()
    log_path = out / LOG_FILE
    with open(log_path, "wb") as log:
        code = _run_group(argv, env, out / "run", log, timeout_s)
    text = log_path.read_text(encoding="utf-8", errors="replace")
    return {
        "returncode": code,
        "started": started,
        "ended": time.time(),
        "log": str(log_path),
        "log_tail": text[-2000:],
        "nondeterministic_ops_in_log": sorted(set(NONDET_RE.findall(text))),
        "cause": crash_cause(text) if code else None,
    }


def crash_cause(text: str) -> dict[str, Any] | None:
    """Why a run failed, from its log: the op torch refused under deterministic algorithms (with
    torch's message), else the last exception line; None when the log names neither."""
    refused = _REFUSED_RE.findall(text)
    if refused:
        message = refused[-1].strip()
        return {"kind": "nondeterministic_op", "op": message.split(" ", 1)[0], "message": message}
    raised = _EXC_RE.findall(text)
    return {"kind": "exception", "message": raised[-1].strip()[:500]} if raised else None


def _run_group(argv: list[str], env: dict[str, str], cwd: Path, log: Any, timeout_s: float) -> int:
    """Run in its own process group so a time-out also ends torchrun's worker processes."""
    try:
        proc = subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    except OSError as exc:
        log.write(f"cannot start {argv[0]!r}: {exc}\n".encode())
        return 127
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log.write(f"timed out after {timeout_s} s (stages.{NAME}.timeout_s)\n".encode())
        return 124


def _write(out: Path, record: dict[str, Any]) -> dict[str, Any]:
    atomic_write_json(out / PART_FILE, record)
    return record


def gpu_info() -> list[dict[str, str]]:
    """GPU model and driver from nvidia-smi (without importing torch in the job itself)."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    rows = [line.split(",") for line in out.splitlines() if "," in line]
    return [{"name": r[0].strip(), "driver": r[1].strip()} for r in rows]


def _versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in ("torch", "numpy"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def plain(value: Any) -> Any:
    """A config list as a Python list (a string stays a string, so it is rejected, not split into chars)."""
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def validate(cfg: DictConfig, config: DeterminismConfig) -> list[str]:
    """Check the command template in the main job too, so a bad one is an InputError naming the key."""
    values = placeholder_values(cfg, config, config.seed, Path("<out>"))
    argv = train_argv(cfg, config, values)
    if config.ddp_procs > 1:
        ddp_argv(config, argv, values)
    return argv
