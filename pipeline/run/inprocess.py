"""A local launch that runs no GPU stage and no container runs its jobs here, in the launcher's process.

Why: a dataset alone (`stage=contract launcher=local dataset.path=...`) is a DAG of two jobs, the
contract and the gate. Run as the local runner runs them, each is a process that starts Python and
imports the stage registry again before it reads a row: seconds of fixed cost that give the user
nothing, on a check a dataset doctor answers in one. Here the same two calls the jobs make
(`jobs.run_stage`, `gate.run_gate`) run in order in this process, so the run folder, the stage JSON,
the gate record, the audit history and the exit code are the ones the jobs write: they are the same
code reading the same `config.yaml` and `plan.json`.

The rule (`chosen`): `launcher=local` (or `auto` that resolved to it), no container, no job of an
earlier launch still running, `launcher.in_process` not false, and every job this launch runs is the
gate or the main job of a stage in `IN_PROCESS` without parts or job array. Anything else (a GPU stage,
container_check, determinism's twins, an Apptainer image) keeps the local runner's DAG.

What differs, by nature: each job's id in `jobs.json` is the launcher's pid (no child process), with no
process start time, so a later launch of the run id never adopts it; the jobs' output goes to
`submitit/<pid>/<job>_log.out` in the run folder, as a job's goes to its submitit log; there is no
per-job time limit (the launch itself is what the user waits for).
"""

from __future__ import annotations

import contextlib
import os
import traceback
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig

from pipeline.errors import ConfigError
from pipeline.record.runfolder import RunFolder
from pipeline.run.executors import FINAL_OK
from pipeline.run.follow import Follower, console, say
from pipeline.run.local_runner import LocalState
from pipeline.run.plan import GATE, JobSpec

# the stages whose main job runs in the launcher: CPU only, no parts, nothing to isolate from it
IN_PROCESS = frozenset({"contract"})


def setting(cfg: DictConfig) -> bool:
    """`launcher.in_process` (default true); false keeps the DAG of job processes."""
    value = (cfg.get("launcher") or {}).get("in_process", True)
    if not isinstance(value, bool):
        raise ConfigError("launcher.in_process", f"expected true or false, got {value!r}")
    return value


def chosen(jobs: list[JobSpec], cfg: DictConfig, executor: str, adopted: bool) -> bool:
    """Whether this launch's jobs run here (the module's docstring gives the rule and why)."""
    if not setting(cfg) or executor != "local" or adopted:
        return False
    if str((cfg.get("container") or {}).get("kind") or "none") != "none":
        return False
    running = [job for job in jobs if not job.reused]
    return all(job.kind == "gate" or _in_process_stage(job) for job in running)


def _in_process_stage(job: JobSpec) -> bool:
    return job.kind == "stage" and job.stage in IN_PROCESS and not job.array


def run(jobs: list[JobSpec], cfg: DictConfig, folder: RunFolder) -> int:
    """Run the jobs in plan order here (the stages, then the gate), writing `jobs.json` as the local
    runner does, then report the gate: its exit code is the launch's."""
    states = {job.name: LocalState(job, FINAL_OK, reason="reused") if job.reused else LocalState(job)
              for job in jobs}  # fmt: skip
    pid = str(os.getpid())
    with Follower(jobs, folder, f"run {cfg.run_id} (local, in process)", live=False) as view:

        def changed() -> None:
            rows = {name: state.row() for name, state in states.items()}
            folder.write_jobs(rows)
            view.update(rows)

        for state in states.values():
            if state.state != "PENDING":
                continue
            state.state, state.job_id = "RUNNING", pid
            changed()
            state.state = _call(state.spec, folder, pid)
            changed()
    folder.sweep_partial()
    console.print()
    console.print(f"gate job: {states[GATE].job_id} (in process)")
    return folder.report_gate(say)


def _call(spec: JobSpec, folder: RunFolder, pid: str) -> str:
    """One job's call, its output into its log; its end state as the local runner records a job's
    (COMPLETED, or FAILED: a crash, whose traceback is in the log, or a non-zero exit)."""
    log = folder.root / "submitit" / pid / f"{spec.name}_log.out"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as out, contextlib.redirect_stdout(out):
        with contextlib.redirect_stderr(out):
            try:
                code = _job(spec)(folder.root)
            # a crash (or a library's sys.exit) ends that job FAILED, as a job process would, never the
            # launch: the gate still runs and records it
            except (Exception, SystemExit) as exc:  # noqa: BLE001
                traceback.print_exc()
                print(f"job {spec.name} failed: {type(exc).__name__}: {exc}")
                return "FAILED"
    return FINAL_OK if code == 0 else "FAILED"


def _job(spec: JobSpec) -> Callable[[Path], int]:
    """What the job process would have called: the stage's run (a result file; a crash raises after it
    was recorded) or the gate (its exit code)."""
    if spec.kind == "gate":
        from pipeline.run.gate import run_gate

        return run_gate
    from pipeline.run.jobs import run_stage

    def stage(run_dir: Path) -> int:
        run_stage(run_dir, str(spec.stage))
        return 0

    return stage
