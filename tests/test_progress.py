"""Progress while a run runs: the launcher's follow output shows intermediate job states (a live table on
a terminal, one line per change in a pipe), and long work inside a job reports progress in the job log."""

import io
import re

from rich.console import Console

from pipeline.progress import LineProgress, make_console, progress, track
from pipeline.record.runfolder import RunFolder
from pipeline.run.follow import Follower
from pipeline.run.plan import JobSpec
from tests.conftest import other_stages, run_dir_of
from tests.in_process_launch import launch_here

RES = {"cpus_per_task": 1, "mem_gb": 1, "gpus_per_node": 0, "time_min": 5, "partition": None}
JOBS = [
    JobSpec("check_a", "stage", "check_a", resources=RES),
    JobSpec("gate", "gate", None, deps=(("check_a", "afterany"),), resources=RES),
]
STATES = [
    {"check_a": {"job_id": "11", "state": "RUNNING"}, "gate": {"state": "PENDING"}},
    {"check_a": {"job_id": "11", "state": "COMPLETED"}, "gate": {"job_id": "12", "state": "RUNNING"}},
    {"check_a": {"job_id": "11", "state": "COMPLETED"}, "gate": {"job_id": "12", "state": "COMPLETED"}},
]


def test_live_table_on_a_terminal_shows_every_state_it_went_through(tmp_path):
    out = Console(record=True, force_terminal=True, width=160, file=io.StringIO())
    with Follower(JOBS, RunFolder(tmp_path / "runs" / "r1"), "run r1", out) as view:
        for rows in STATES:
            view.update(rows)
    text = out.export_text()
    assert "RUNNING" in text and "PENDING" in text and "COMPLETED" in text
    assert text.count("run r1") >= len(STATES)  # redrawn once per change at least


def test_follow_in_a_pipe_writes_one_line_per_state_change_then_the_table(tmp_path):
    out = Console(record=True, force_terminal=False, width=160, file=io.StringIO())
    with Follower(JOBS, RunFolder(tmp_path / "runs" / "r1"), "run r1", out) as view:
        for rows in [*STATES, STATES[-1]]:  # an unchanged update writes nothing
            view.update(rows)
    lines = out.export_text().splitlines()
    changes = [line.split(" ", 1)[1] for line in lines if re.match(r"\d\d:\d\d:\d\d ", line)]
    assert changes == [
        "check_a RUNNING job 11",
        "gate PENDING",
        "check_a COMPLETED job 11",
        "gate RUNNING job 12",
        "gate COMPLETED job 12",
    ]
    assert "run r1" in lines[len(changes)]  # the whole table follows the lines


def test_piped_local_launch_shows_running_before_completed(piped_container_check):
    proc = piped_container_check.proc  # launcher=local ~demo min_free_mb=1, container_check alone
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    running = re.search(r"^\d\d:\d\d:\d\d container_check RUNNING job \d+$", out, re.M)
    done = re.search(r"^\d\d:\d\d:\d\d container_check COMPLETED job \d+ -> pass$", out, re.M)
    gate = re.search(r"^\d\d:\d\d:\d\d gate COMPLETED job \d+ -> clear$", out, re.M)
    assert running and done and gate, out
    assert running.start() < done.start() < gate.start() < out.index("gate: clear")


def test_line_progress_writes_quarters_not_every_step():
    stream = io.StringIO()
    with progress("stats pass", 40, every_s=1e9, stream=stream, terminal=False) as advance:
        for _ in range(40):
            advance()
    lines = stream.getvalue().splitlines()
    assert lines[0] == "stats pass: started (40 steps)"
    assert [line.split(" s")[0].rsplit(" ", 1)[0] for line in lines[1:]] == [
        "stats pass: 25% (10/40)",
        "stats pass: 50% (20/40)",
        "stats pass: 75% (30/40)",
        "stats pass: 100% (40/40)",
    ]


def test_line_progress_without_a_total_says_how_far_it_got():
    stream = io.StringIO()
    lines = LineProgress("rows read", None, every_s=0.0, stream=stream)  # 0: a line at every advance
    lines.start()
    lines.advance(100)
    lines.advance(50)
    lines.finish()
    text = stream.getvalue()
    assert "rows read: 100 so far" in text and "rows read: 150 so far" in text
    assert "rows read: 150 done" in text


def test_nested_bars_on_a_terminal_share_one_display():
    stream = io.StringIO()
    with progress("outer", 2, stream=stream, terminal=True) as outer:
        for _ in track(range(3), "inner", terminal=True):  # would raise LiveError with two displays
            pass
        outer()


def test_progress_lines_appear_in_the_job_log(tmp_path):
    proc = launch_here(
        tmp_path,
        "launcher=local",
        "~demo",
        "min_free_mb=1",
        "plugins=[preflight_progress_stage]",
        other_stages("progress_demo"),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    logs = "".join(p.read_text() for p in run_dir_of(tmp_path, proc).glob("submitit/*/*_log.out"))
    assert "progress_demo work: started (8 steps)" in logs
    assert "progress_demo work: 50% (4/8)" in logs and "progress_demo work: 100% (8/8)" in logs


def test_console_in_a_pipe_is_wide_enough_for_the_tables():
    assert make_console().width >= 200  # pytest's stdout is not a terminal
