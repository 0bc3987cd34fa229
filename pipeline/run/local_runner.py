"""The local DAG runner: `launcher=local|debug` run the plan's jobs on this machine, as Slurm would.

submitit's LocalExecutor ignores dependencies (and kills a job after two minutes unless told otherwise),
so `run_dag` plays the scheduler: it starts a job when its dependencies ended, applies
`afterok`/`afterany` the way Slurm does with `kill_invalid_depend` (a dependant of a failed `afterok` job
is cancelled), runs independent jobs in parallel up to `max_parallel`, and gives every job an explicit
time limit.

A local job is a child process whose id is its pid; `jobs.json` records the pid and the kernel's start
time of each one. If the launcher dies (SIGKILL), its jobs run on; a relaunch of the same run id adopts
a job that is still alive (same pid, same start time, so never a reused pid) and waits for it instead of
starting a duplicate.
"""

from __future__ import annotations

import contextlib
import os
import shlex
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

from pipeline.record.runfolder import RunFolder
from pipeline.run.executors import (
    FINAL_OK,
    TERMINAL,
    ArrayJobs,
    JobMainCommand,
    job_callable,
    python_argv,
    submit_array,
)
from pipeline.run.plan import JobSpec


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


class _LocalExecutor(JobMainCommand, submitit.LocalExecutor):
    """submitit's, with its job controller started as `pipeline.run.local_controller`, which makes the job's
    folder itself before it opens its log there (see that module for the race it closes), and its jobs
    started through `job_main` as a Slurm job's are (no interpreter teardown for dependants to wait on)."""

    def _submit_command(self, command: str) -> LocalJob:
        ntasks = self.parameters.get("tasks_per_node", 1)
        n_gpus, visible = self.parameters.get("gpus_per_node", 0), self.parameters.get("visible_gpus", ())
        gpus = range(n_gpus) if visible == () else visible[:n_gpus]
        env = {
            **os.environ,
            "SUBMITIT_LOCAL_NTASKS": str(ntasks),
            "SUBMITIT_LOCAL_COMMAND": command,
            "SUBMITIT_LOCAL_TIMEOUT_S": str(int(60 * self.parameters.get("timeout_min", 2.0))),
            "SUBMITIT_LOCAL_SIGNAL_DELAY_S": str(int(self.parameters.get("signal_delay_s", 30))),
            "SUBMITIT_LOCAL_NODEID": "0",
            "SUBMITIT_LOCAL_JOB_NUM_NODES": "1",
            "SUBMITIT_STDERR_TO_STDOUT": "1" if self.parameters.get("stderr_to_stdout", False) else "",
            "SUBMITIT_EXECUTOR": "local",
            "CUDA_VISIBLE_DEVICES": ",".join(str(k) for k in gpus),
            "SUBMITIT_LOCAL_WITH_SHELL": "",
        }
        argv = [sys.executable, "-m", "pipeline.run.local_controller", str(self.folder)]
        process = subprocess.Popen(argv, env=env)  # noqa: S603 - a fixed argv, no shell
        return LocalJob(
            folder=self.folder, job_id=str(process.pid), process=process, tasks=list(range(ntasks))
        )


def _local_executor(kind: str, cfg: DictConfig, folder: RunFolder) -> submitit.Executor:
    if kind == "debug":
        return submitit.DebugExecutor(folder=folder.submitit_dir)
    return _LocalExecutor(
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
