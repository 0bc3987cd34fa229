"""Executors: submit a plan's jobs to Slurm (this module), or run them here (`pipeline.run.local_runner`).

All are submitit executors. On Slurm the dependencies are real `--dependency` clauses and the
scheduler orders the jobs; a stage's job array is one `sbatch --array` (submitit's `map_array`).
"""

from __future__ import annotations

import math
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import submitit
from omegaconf import DictConfig

from pipeline.errors import SubmissionError, one_line
from pipeline.record.runfolder import RunFolder
from pipeline.run.jobs import ArrayTaskJob, GateJob, StageJob
from pipeline.run.plan import JobSpec

FINAL_OK = "COMPLETED"
TERMINAL = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "OUT_OF_MEMORY",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "REVOKED",
}


JOB_MAIN = "pipeline.run.job_main"  # a job's entry point: submitit's, with a quick exit (see that module)


def job_command(python: str, folder: Path) -> str:
    """The command a job's srun step runs: `python -u -m pipeline.run.job_main <submitit folder>`."""
    return " ".join([python, f"-u -m {JOB_MAIN}", shlex.quote(str(folder))])


class JobMainCommand:
    """Mixed into a submitit executor: its jobs start through `job_main` instead of
    `submitit.core._submit` (no interpreter teardown for dependants to wait on)."""

    python: str
    folder: Path

    @property
    def _submitit_command_str(self) -> str:
        return job_command(self.python, Path(self.folder))


class SlurmExecutor(JobMainCommand, submitit.SlurmExecutor):
    """submitit's Slurm executor, its jobs started through `job_main`."""


def job_callable(spec: JobSpec, folder: RunFolder) -> Any:
    if spec.kind == "gate":
        return GateJob(str(folder.root))
    return StageJob(str(folder.root), str(spec.stage), spec.part)


class ArrayJobs:
    """The tasks of one submitted job array, seen as one job: Slurm's array id (`<id>` of `<id>_<task>`),
    one state, one cancel. Dependants wait on the whole array (`afterany:<id>`)."""

    def __init__(self, jobs: list[Any]) -> None:
        self.jobs = jobs
        self.job_id = str(jobs[0].job_id).split("_")[0]

    @property
    def task_ids(self) -> list[str]:
        return [str(job.job_id) for job in self.jobs]

    @property
    def state(self) -> str:
        states = [str(job.state).split()[0] for job in self.jobs]
        if any(st not in TERMINAL for st in states):
            return "RUNNING" if any(st == "RUNNING" for st in states) else "PENDING"
        return FINAL_OK if all(st == FINAL_OK for st in states) else "FAILED"

    def done(self) -> bool:
        return all(job.done() for job in self.jobs)

    def cancel(self, check: bool = False) -> None:
        for job in self.jobs:
            job.cancel(check=check)


def current_states(submitted: dict[str, Any]) -> dict[str, str]:
    """Every submitted job's state from one `sacct` call made now, for a follower that polls at its own
    interval (`launcher.poll_s`). submitit's `job.state` asks sacct itself only when its cache is older
    than half the time since the last submission (2 s, 4 s, 8 s ... up to 10 min), so a follower that
    read it saw a job end up to half the run's age late: ~10 s on a 20 s launch."""
    watchers = {id(w): w for w in (_watcher(job) for job in submitted.values()) if w is not None}
    for watcher in watchers.values():
        watcher.update()  # one sacct for every job it follows; `job.state` then reads that answer
    return {name: str(job.state) for name, job in submitted.items()}


def _watcher(job: Any) -> Any:
    first = job.jobs[0] if isinstance(job, ArrayJobs) else job
    return getattr(first, "watcher", None)


def submit_array(executor: submitit.Executor, spec: JobSpec, run_dir: Path) -> ArrayJobs:
    """One `sbatch --array=0-<n-1>` (submitit's map_array); locally, n processes of the same tasks."""
    task = ArrayTaskJob(str(run_dir), str(spec.stage), str(spec.part))
    return ArrayJobs(executor.map_array(task, range(spec.array)))


def python_argv(cfg: DictConfig) -> list[str]:
    """The interpreter a job starts: the current one, or `python` inside the Apptainer image.

    Every element comes from the config as one argv item; submitit needs a string, so it is joined
    with `shlex.join`, which quotes each item: a config value can never become shell syntax.
    """
    if cfg.container.kind != "apptainer":
        return [sys.executable]
    argv = [str(cfg.container.binary), "exec"]
    if cfg.container.nv:
        argv.append("--nv")
    binds = dict.fromkeys(
        [
            str(cfg.run_dir),
            str(cfg.audit_dir),
            str(cfg.checkpoint_dir),
            *(str(b) for b in cfg.container.binds),
        ]
    )
    for bind in binds:
        argv += ["--bind", bind if ":" in bind else f"{bind}:{bind}"]
    argv += ["--bind", f"{cfg.container.image}:{cfg.container.image}:ro"]  # hashed in the job
    key = (cfg.get("audit") or {}).get("key_file")
    if key:  # the gate seals its record and the envelope verifies twins with it, inside the image
        argv += ["--bind", f"{key}:{key}:ro"]
    argv += [str(a) for a in cfg.container.extra_args]
    return [*argv, str(cfg.container.image), str(cfg.container.python)]


def slurm_mem(mem_gb: float) -> str:
    """sbatch's --mem takes whole units: typed configs give floats (2.0 -> "2GB", 0.5 -> "512M")."""
    gb = float(mem_gb)
    return f"{int(gb)}GB" if gb.is_integer() else f"{math.ceil(gb * 1024)}M"


def slurm_parameters(spec: JobSpec, cfg: DictConfig, dependency: str | None) -> dict[str, Any]:
    """sbatch options in submitit's Slurm names; `None` means "leave it to the cluster's default"."""
    res = spec.resources
    params: dict[str, Any] = {
        "job_name": f"preflight-{spec.name}",
        "time": int(res["time_min"]),
        "cpus_per_task": int(res["cpus_per_task"]),
        "mem": slurm_mem(res["mem_gb"]),
        "partition": res.get("partition"),
        "account": res.get("account"),
        "qos": res.get("qos"),
        "dependency": dependency,
        "signal_delay_s": int(cfg.launcher.signal_delay_s),
        "stderr_to_stdout": True,
    }
    if res.get("gpus_per_node"):
        params["gpus_per_node"] = int(res["gpus_per_node"])
    extra = cfg.launcher.get("additional_parameters")
    if extra:
        params["additional_parameters"] = dict(extra)
    return {k: v for k, v in params.items() if v is not None}


def dependency_clause(spec: JobSpec, ids: dict[str, str]) -> str | None:
    """`afterok:1:2,afterany:3`: Slurm's syntax; commas mean every clause must hold."""
    by_kind: dict[str, list[str]] = {}
    for name, kind in spec.deps:
        if name in ids:
            by_kind.setdefault(kind, []).append(ids[name])
    return ",".join(f"{kind}:{':'.join(job_ids)}" for kind, job_ids in by_kind.items()) or None


def submit_slurm(
    jobs: list[JobSpec], cfg: DictConfig, folder: RunFolder, on_submit: Callable[[JobSpec, Any], None]
) -> dict[str, Any]:
    submitted: dict[str, Any] = {}
    for spec in jobs:
        if spec.reused:
            continue
        ids = {name: job.job_id for name, job in submitted.items()}
        # one executor per job: update_parameters accumulates, and a dependency must not leak
        executor = SlurmExecutor(
            folder=folder.submitit_dir,
            max_num_timeout=int(cfg.launcher.requeue_max),
            python=shlex.join(python_argv(cfg)),
        )
        executor.update_parameters(**slurm_parameters(spec, cfg, dependency_clause(spec, ids)))
        try:
            if spec.array:
                submitted[spec.name] = submit_array(executor, spec, folder.root)
            else:
                submitted[spec.name] = executor.submit(job_callable(spec, folder))
        except Exception as exc:  # noqa: BLE001 - submitit raises several types for an sbatch refusal
            for job in submitted.values():
                job.cancel(check=False)
            why = None if submitted else slurm_unreachable()
            if why is not None:  # not the job's resources: the controller went away (or never was)
                raise SubmissionError(unreachable_message(f"sbatch: {one_line(exc)}; {why}")) from exc
            raise SubmissionError(
                f"sbatch refused job {spec.name} (resources {spec.resources}): {exc}; "
                f"cancelled the {len(submitted)} job(s) already queued"
            ) from exc
        on_submit(spec, submitted[spec.name])
    return submitted


def sbatch_preview(spec: JobSpec, cfg: DictConfig, folder: RunFolder, ids: dict[str, str]) -> str:
    """The sbatch script `submit_slurm` would write for this job (dry_run), without needing `srun`."""
    from submitit.slurm.slurm import _make_sbatch_string  # submitit's own renderer, as it submits

    command = job_command(shlex.join(python_argv(cfg)), folder.submitit_dir)
    params = slurm_parameters(spec, cfg, dependency_clause(spec, ids))
    if spec.array:
        params["map_count"] = spec.array  # renders #SBATCH --array=0-<n-1>%<parallelism>, as map_array does
    return _make_sbatch_string(command=command, folder=folder.submitit_dir, **params)


def chain_argv(
    script: Path, gate_job_id: str, args: Sequence[str] = (), command: Sequence[str] = ()
) -> list[str]:
    """The sbatch call of the chained job: the user's options first and the dependency after them (so
    an option in `args` cannot loosen it), then the script and its arguments (the training command's
    argv, each item one argument: sbatch hands them to the script as they are)."""
    return ["sbatch", "--parsable", *args, f"--dependency=afterok:{gate_job_id}", str(script), *command]


def chain_sbatch(
    script: Path, gate_job_id: str, args: Sequence[str] = (), command: Sequence[str] = ()
) -> str:
    """Queue the user's training job `afterok` on the gate, with the user's own sbatch options (`args`,
    argv items: resources such as `--partition=gpu`); a refusal is a SubmissionError that carries
    sbatch's own stderr (the gate and the stages are already queued: the caller says so)."""
    try:
        out = subprocess.run(
            chain_argv(script, gate_job_id, args, command),
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
    except subprocess.CalledProcessError as exc:
        said = one_line(exc.stderr or exc.stdout or f"exit {exc.returncode}")
        raise SubmissionError(f"sbatch refused the chained job {script}: {said}", path=script) from None
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SubmissionError(f"cannot run sbatch for the chained job {script}: {exc}", path=script) from None
    return out.strip().split(";")[0]


def slurm_unreachable() -> str | None:
    """Why this machine cannot submit to Slurm, quoting `sinfo`'s own stderr; None when it answers."""
    if shutil.which("sinfo") is None:
        return "sinfo is not on PATH (no Slurm client on this machine)"
    try:
        proc = subprocess.run(
            ["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"sinfo did not answer: {exc}"
    if proc.returncode == 0:
        return None
    return f"sinfo exited {proc.returncode}: {one_line(proc.stderr or proc.stdout or 'no message')}"


def unreachable_message(why: str) -> str:
    """The one line for "no controller answers": the client's own words, then where its address comes
    from (`SLURM_CONF`), so nobody goes looking at resources or partitions first."""
    conf = os.environ.get("SLURM_CONF")
    where = f"SLURM_CONF={conf}" if conf else "SLURM_CONF is unset, so the default slurm.conf is used"
    return (
        f"Slurm is not reachable: {why}; check that {where} names a running slurmctld "
        "(`scontrol ping`), or run here with launcher=local; nothing was submitted"
    )


def require_slurm() -> None:
    """launcher=slurm: a SubmissionError before anything is written when no controller answers."""
    why = slurm_unreachable()
    if why is not None:
        raise SubmissionError(unreachable_message(why))


def slurm_available() -> bool:
    """`launcher=auto` submits to Slurm only where a controller answers."""
    return slurm_unreachable() is None
