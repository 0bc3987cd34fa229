"""Following a launched run (`wait=true`): the job table live on a terminal, one line per change elsewhere.

rich's Live on a console that is not a terminal prints only its last frame, so a launch in a pipe, a CI
log or `| tee` used to say nothing until the gate had decided. There the follower writes one line per
job state change instead (`12:01:03 twin_a RUNNING job 4242`, and the stage's result once it has one)
and the full table once at the end. On a terminal the table is redrawn in place, with the time since
the launch in its title so that a long stage never looks like a hang.
"""

from __future__ import annotations

import datetime as dt
import time
from types import TracebackType
from typing import Any

from omegaconf import DictConfig
from rich.console import Console
from rich.live import Live
from rich.table import Table

from pipeline.progress import make_console
from pipeline.record.runfolder import RunFolder
from pipeline.run.executors import TERMINAL, current_states
from pipeline.run.local_runner import run_dag
from pipeline.run.plan import JobSpec
from pipeline.run.status import build_table, stage_status, table_rows

console = make_console()


def job_rows(jobs: list[JobSpec], rows: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The table's rows: every planned job with its recorded job id and state."""
    return table_rows([job.to_dict() for job in jobs], rows)


def say(line: str) -> None:
    console.print(line, markup=False)


class Follower:
    """The live view of one run: `update(rows)` whenever jobs.json changes."""

    def __init__(
        self,
        jobs: list[JobSpec],
        folder: RunFolder,
        title: str,
        out: Console | None = None,
        live: bool = True,
    ) -> None:
        self.jobs, self.folder, self.title = jobs, folder, title
        self.console = out or console
        self.use_live = live and self.console.is_terminal
        self.rows: list[dict[str, Any]] = job_rows(jobs, {})
        self.seen: dict[str, tuple[str, str]] = {}
        self.started = time.monotonic()
        self.live: Live | None = None

    def __enter__(self) -> Follower:
        if self.use_live:
            self.live = Live(
                get_renderable=self._table, console=self.console, refresh_per_second=2, auto_refresh=True
            )
            self.live.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.live is not None:
            self.live.refresh()
            self.live.__exit__(kind, exc, tb)
        elif kind is None:  # in a log: the whole table once, after the per-change lines
            self.console.print(build_table(self.folder, self.rows, self.title))

    def update(self, rows: dict[str, dict[str, Any]]) -> None:
        self.rows = job_rows(self.jobs, rows)
        if self.live is not None:
            self.live.refresh()
            return
        for row in self.rows:
            self._line(row)

    def _line(self, row: dict[str, Any]) -> None:
        spec = row["spec"]
        state = str(row.get("state") or "")
        result = stage_status(self.folder, spec["stage"], row) if spec["kind"] != "part" else ""
        if not state or self.seen.get(spec["name"]) == (state, result):
            return
        self.seen[spec["name"]] = (state, result)
        job = f" job {row['job_id']}" if row.get("job_id") else ""
        shown = f" -> {result}" if result else ""
        self.console.print(f"{dt.datetime.now():%H:%M:%S} {spec['name']} {state}{job}{shown}", markup=False)

    def _table(self) -> Table:
        elapsed = time.monotonic() - self.started
        return build_table(self.folder, self.rows, f"{self.title} - {elapsed:.0f} s")


def follow_slurm(
    jobs: list[JobSpec],
    submitted: dict[str, Any],
    folder: RunFolder,
    rows: dict[str, dict[str, Any]],
    cfg: DictConfig,
) -> int:
    """Poll the submitted jobs' states until every one has ended, then report the gate."""
    with Follower(jobs, folder, f"run {cfg.run_id}") as view:
        while True:
            for name, state in current_states(submitted).items():
                rows[name]["state"] = state
            view.update(rows)
            if all(rows[name]["state"].split()[0] in TERMINAL for name in submitted):  # not the chained
                break
            time.sleep(float(cfg.launcher.poll_s))
    console.print()
    folder.write_jobs(rows)
    return folder.report_gate(say)


def launch_local(
    jobs: list[JobSpec], cfg: DictConfig, folder: RunFolder, executor: str, adopt: dict[str, Any]
) -> int:
    """Run the plan on this machine (local_runner.run_dag), following it, then report the gate."""
    for name, job in adopt.items():
        console.print(f"{name}: adopting job {job.job_id} of an earlier launch of this run (still running)")
    # debug runs the stages in this process: their own progress bars and pdb need the terminal, so lines
    with Follower(jobs, folder, f"run {cfg.run_id} ({executor})", live=executor != "debug") as view:

        def on_change(states: dict[str, Any]) -> None:
            rows = {n: s.row() for n, s in states.items()}
            folder.write_jobs(rows)
            view.update(rows)

        states = run_dag(jobs, cfg, folder, executor, on_change, adopt)
    folder.sweep_partial()
    console.print()
    console.print(f"gate job: {states['gate'].job_id}")
    return folder.report_gate(say)
