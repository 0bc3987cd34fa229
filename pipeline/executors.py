"""Executors: submit a plan's jobs to Slurm, or run them here in dependency order.

All three are submitit executors. On Slurm the dependencies are real `--dependency` clauses and the
scheduler orders the jobs. submitit's LocalExecutor ignores dependencies (and kills a job after two
minutes unless told otherwise), so for `local` and `debug` `run_dag` plays the scheduler: it starts a
job when its dependencies ended, applies `afterok`/`afterany` the way Slurm does with
`kill_invalid_depend` (a dependant of a failed `afterok` job is cancelled), runs independent jobs in
parallel up to `max_parallel`, and gives every job an explicit time limit.

A local job is a child process whose id is its pid; `jobs.json` records the pid and the kernel's start
time of each one. If the launcher dies (SIGKILL), its jobs run on; a relaunch of the same run id adopts
a job that is still alive (same pid, same start time, so never a reused pid) and waits for it instead of
starting a duplicate.
"""

from __future__ import annotations

import contextlib
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import submitit
from omegaconf import DictConfig
from submitit.local.local import LocalJob

from pipeline.errors import SubmissionError, one_line
from pipeline.jobs import ArrayTaskJob, GateJob, StageJob
from pipeline.plan import JobSpec
from pipeline.runfolder import RunFolder

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
        executor = submitit.SlurmExecutor(
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
            raise SubmissionError(
                f"sbatch refused job {spec.name} (resources {spec.resources}): {exc}; "
                f"cancelled the {len(submitted)} job(s) already queued"
            ) from exc
        on_submit(spec, submitted[spec.name])
    return submitted


def sbatch_preview(spec: JobSpec, cfg: DictConfig, folder: RunFolder, ids: dict[str, str]) -> str:
    """The sbatch script `submit_slurm` would write for this job (dry_run), without needing `srun`."""
    from submitit.slurm.slurm import _make_sbatch_string  # submitit's own renderer, as it submits

    command = " ".join(
        [shlex.join(python_argv(cfg)), "-u -m submitit.core._submit", shlex.quote(str(folder.submitit_dir))]
    )
    params = slurm_parameters(spec, cfg, dependency_clause(spec, ids))
    if spec.array:
        params["map_count"] = spec.array  # renders #SBATCH --array=0-<n-1>%<parallelism>, as map_array does
    return _make_sbatch_string(command=command, folder=folder.submitit_dir, **params)


def chain_sbatch(script: Path, gate_job_id: str) -> str:
    """Queue the user's training job `afterok` on the gate; a refusal is a SubmissionError that carries
    sbatch's own stderr (the gate and the stages are already queued: the caller says so)."""
    try:
        out = subprocess.run(
            ["sbatch", "--parsable", f"--dependency=afterok:{gate_job_id}", str(script)],
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


def slurm_available() -> bool:
    """`launcher=auto` submits to Slurm only where a controller answers."""
    if shutil.which("sinfo") is None:
        return False
    try:
        return (
            subprocess.run(
                ["sinfo", "-h", "-o", "%P"], capture_output=True, timeout=15, check=False
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


# ----------------------------------------------------------------------------------------- local


@dataclass
class LocalState:
    spec: JobSpec
    state: str = "PENDING"
    job: Any = None
    job_id: str | None = None
    reason: str = ""
    started: int | None = None  # the process's start time (clock ticks after boot): pid + this = one job

    def row(self) -> dict[str, Any]:
        """The job's line in `jobs.json`: what `status` shows and what a relaunch adopts."""
        state = self.state + (f" ({self.reason})" if self.reason else "")
        return {"job_id": self.job_id, "state": state, "pid": self.job_id, "started": self.started}


def process_start(pid: int) -> int | None:
    """A live process's start time from /proc (field 22 of stat); None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return None if fields[0] == "Z" else int(fields[19])


class AdoptedJob(LocalJob):
    """A local job started by an earlier launch of this run: not our child, so followed through /proc;
    its outcome is the result file submitit's own job process writes."""

    def __init__(self, folder: Path, job_id: str, started: int):
        super().__init__(folder, job_id)
        self.started = started

    def alive(self) -> bool:
        return process_start(int(self.job_id)) == self.started

    def get_info(self, mode: str = "force") -> dict[str, str]:  # noqa: ARG002 - submitit's signature
        if self.alive():
            return {"jobState": "RUNNING"}
        return {"jobState": "FINISHED" if self.paths.result_pickle.exists() else "INTERRUPTED"}

    def cancel(self, check: bool = True) -> None:  # noqa: ARG002
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(self.job_id), signal.SIGINT)


def adoptable(previous: dict[str, dict[str, Any]], folder: RunFolder) -> dict[str, AdoptedJob]:
    """The jobs of an earlier local launch of this run that are still running, by job name."""
    found = {}
    for name, row in previous.items():
        pid, started = str(row.get("pid") or ""), row.get("started")
        if pid.isdigit() and isinstance(started, int) and process_start(int(pid)) == started:
            found[name] = AdoptedJob(folder.submitit_dir, pid, started)
    return found


def _local_executor(kind: str, cfg: DictConfig, folder: RunFolder) -> submitit.Executor:
    if kind == "debug":
        return submitit.DebugExecutor(folder=folder.submitit_dir)
    return submitit.LocalExecutor(
        folder=folder.submitit_dir,
        max_num_timeout=int(cfg.launcher.requeue_max),
        python=shlex.join(python_argv(cfg)),
    )


def _finished_state(job: Any) -> str | None:
    if not job.done():
        return None
    if isinstance(job, ArrayJobs):
        states = [_finished_state(task) for task in job.jobs]
        return FINAL_OK if all(st == FINAL_OK for st in states) else "FAILED"
    if not job.paths.result_pickle.exists():
        return "FAILED"
    return FINAL_OK if job.exception() is None else "FAILED"


def _start(executor: submitit.Executor, kind: str, item: LocalState, folder: RunFolder) -> None:
    res = item.spec.resources
    executor.update_parameters(timeout_min=float(res["time_min"]), name=f"preflight-{item.spec.name}")
    if item.spec.array:
        item.job = submit_array(executor, item.spec, folder.root)
    else:
        item.job = executor.submit(job_callable(item.spec, folder))
    item.job_id, item.state = str(item.job.job_id), "RUNNING"
    if kind == "local":
        item.started = process_start(int(item.job_id))
    if kind == "debug":  # DebugExecutor runs the call in this process when asked for its result
        try:
            for job in item.job.jobs if item.spec.array else [item.job]:
                job.result()
            item.state = FINAL_OK
        except SystemExit as exc:
            item.state, item.reason = "FAILED", f"exit {exc.code}"
        except Exception as exc:  # noqa: BLE001 - the stage recorded it; the gate reports it
            item.state, item.reason = "FAILED", f"{type(exc).__name__}: {exc}"


def _blocked_by(item: LocalState, states: dict[str, LocalState]) -> str | None:
    for name, kind in item.spec.deps:
        dep = states[name]
        if dep.state not in TERMINAL:
            return "waiting"
        if kind == "afterok" and dep.state != FINAL_OK:
            return f"DependencyNeverSatisfied ({name} {dep.state})"
    return None


def run_dag(
    jobs: list[JobSpec],
    cfg: DictConfig,
    folder: RunFolder,
    kind: str,
    on_change: Callable[[dict[str, LocalState]], None],
    adopt: dict[str, AdoptedJob] | None = None,
) -> dict[str, LocalState]:
    """Run the plan here, in dependency order, until every job has ended; `adopt`: jobs of an earlier
    launch of this run that are still running, followed instead of started again."""
    executor = _local_executor(kind, cfg, folder)
    states = {spec.name: _initial(spec, (adopt or {}).get(spec.name)) for spec in jobs}
    max_parallel = int(cfg.launcher.max_parallel or os.cpu_count() or 1)
    try:
        if adopt:  # record the adoption at once: jobs.json names the live jobs this launch follows
            on_change(states)
        while any(s.state not in TERMINAL for s in states.values()):
            if _advance(states, executor, kind, folder, max_parallel):
                on_change(states)
            time.sleep(float(cfg.launcher.poll_s))
    except BaseException:  # Ctrl-C included: leave no orphaned stage process behind
        _cancel_running(states)
        raise
    on_change(states)
    return states


def _cancel_running(states: dict[str, LocalState], grace_s: float = 15.0) -> None:
    """Interrupt every running job and give it a moment to end, so that what it writes as it ends
    (submitit's result file) is done before the launcher cleans up after it."""
    running = [s.job for s in states.values() if s.state == "RUNNING" and s.job is not None]
    for job in running:
        job.cancel(check=False)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and not all(job.done() for job in running):
        time.sleep(0.1)


def _initial(spec: JobSpec, adopted: AdoptedJob | None) -> LocalState:
    if spec.reused:
        return LocalState(spec, state=FINAL_OK, reason="reused")
    if adopted is not None:
        return LocalState(spec, "RUNNING", adopted, adopted.job_id, "adopted", adopted.started)
    return LocalState(spec)


def _advance(
    states: dict[str, LocalState],
    executor: submitit.Executor,
    kind: str,
    folder: RunFolder,
    max_parallel: int,
) -> bool:
    """One scheduling pass: collect ended jobs, cancel unsatisfiable ones, start ready ones."""
    changed = False
    for item in states.values():
        if item.state == "RUNNING" and (done := _finished_state(item.job)):
            item.state, changed = done, True
    running = sum(s.state == "RUNNING" for s in states.values())
    for item in states.values():
        if item.state != "PENDING":
            continue
        why = _blocked_by(item, states)
        if why and why != "waiting":
            item.state, item.reason, changed = "CANCELLED", why, True
        elif why is None and running < max_parallel:
            _start(executor, kind, item, folder)
            running += item.state == "RUNNING"
            changed = True
    return changed
