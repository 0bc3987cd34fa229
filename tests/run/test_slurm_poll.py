"""The follower of a Slurm launch reads every job's state from one `sacct` call per poll, made when it
polls: submitit's own `job.state` keeps an answer for up to half the time since the last submission, so a
job that had ended was seen ended seconds late. No cluster: `sacct` is a `printf` of its table."""

from __future__ import annotations

from pathlib import Path

from submitit.slurm.slurm import SlurmInfoWatcher, SlurmJob

from pipeline.run.executors import ArrayJobs, current_states


class TableSacct(SlurmInfoWatcher):
    """submitit's watcher whose `sacct` prints `self.rows` (`JobID|State|NodeList` lines)."""

    def __init__(self) -> None:
        super().__init__(delay_s=600)
        self.rows: list[str] = []

    def _make_command(self) -> list[str] | None:
        return ["printf", "%s\\n", "JobID|State|NodeList", *self.rows]


class TableJob(SlurmJob):
    watcher = TableSacct()


def test_one_sacct_per_poll_sees_a_job_end_that_submitit_still_has_as_running(tmp_path: Path) -> None:
    watcher = TableJob.watcher
    watcher.rows = ["41|RUNNING|vm", "42_0|COMPLETED|vm", "42_1|RUNNING|vm"]
    single = TableJob(folder=tmp_path, job_id="41")
    array = ArrayJobs([TableJob(folder=tmp_path, job_id="42_0"), TableJob(folder=tmp_path, job_id="42_1")])
    assert single.state == "RUNNING" and array.state == "RUNNING"
    calls = watcher.num_calls
    watcher.rows = ["41|COMPLETED|vm", "42_0|COMPLETED|vm", "42_1|FAILED|vm"]
    assert single.state == "RUNNING"  # submitit's cached answer: it asks sacct again only seconds later
    assert current_states({"one": single, "array": array}) == {"one": "COMPLETED", "array": "FAILED"}
    assert watcher.num_calls == calls + 1  # both jobs share the watcher: one sacct for the poll
