"""`launcher=slurm` where no controller answers: one line that says so, quoting the Slurm client's own
stderr and naming SLURM_CONF, nothing submitted and nothing left behind. No mocks: SLURM_CONF points at
a copy of the local cluster's slurm.conf whose SlurmctldPort nobody listens on, and the real
sinfo/sbatch answer."""

from __future__ import annotations

import os
import re
import shutil
import socket
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from pipeline import launch
from pipeline.errors import SubmissionError
from pipeline.record.runfolder import RunFolder
from pipeline.run.executors import require_slurm, slurm_available, submit_slurm
from pipeline.run.plan import build_plan
from tests.conftest import launch as run_launch
from tests.conftest import other_stages


@pytest.fixture
def slurm_client() -> Path:
    """The Slurm client and the local cluster's slurm.conf, not the cluster: nothing here reaches a
    controller or queues a job, so these tests run beside the Slurm scope, not in it."""
    conf = os.environ.get("SLURM_CONF")
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        pytest.skip("Slurm client (sinfo, sbatch) not on PATH (scripts/install_system.sh)")
    if not conf or not Path(conf).is_file():
        pytest.skip('SLURM_CONF unset or not a file (eval "$(scripts/slurm_local.sh env)")')
    return Path(conf)


def free_port() -> int:
    """A port nobody listens on: bound once by the OS's choice, then closed."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def dead_conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slurm_client: Path) -> Path:
    """The local cluster's slurm.conf with the controller moved to a closed port, as SLURM_CONF. The
    clients retry a refused connection once a second for MessageTimeout seconds (10 by default): 2 here,
    so each sinfo/sbatch gives up after ~1 s instead of ~9 with the same message."""
    text = slurm_client.read_text()
    assert re.search(r"^SlurmctldPort=", text, flags=re.M), "the local slurm.conf sets SlurmctldPort"
    conf = tmp_path / "dead" / "slurm.conf"
    conf.parent.mkdir()
    text = re.sub(r"^MessageTimeout=.*$\n?", "", text, flags=re.M) + "MessageTimeout=2\n"
    conf.write_text(re.sub(r"^SlurmctldPort=.*$", f"SlurmctldPort={free_port()}", text, flags=re.M))
    monkeypatch.setenv("SLURM_CONF", str(conf))
    return conf


def test_launch_says_slurm_is_not_reachable_and_leaves_nothing(tmp_path: Path, dead_conf: Path) -> None:
    proc = run_launch(tmp_path, "launcher=slurm", "~demo", other_stages("container_check"))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in out, out
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, out
    line = lines[0]
    assert line.startswith("submission failed: Slurm is not reachable: sinfo exited "), line
    assert "Unable to contact slurm controller" in line, line  # sinfo's own stderr, quoted
    assert f"SLURM_CONF={dead_conf}" in line and "nothing was submitted" in line, line
    assert "resources" not in line and "sbatch refused" not in line, line
    assert not (tmp_path / "preflight").exists(), out


def test_auto_runs_here_and_require_slurm_names_the_config(dead_conf: Path) -> None:
    assert not slurm_available()  # launcher=auto falls back to local
    with pytest.raises(
        SubmissionError, match=r"Slurm is not reachable: .*Unable to contact slurm controller"
    ):
        require_slurm()


def test_sbatch_failing_on_the_first_job_is_not_blamed_on_resources(tmp_path: Path, dead_conf: Path) -> None:
    """If the controller goes away between the check and the first sbatch, submit_slurm asks sinfo
    again rather than printing the job's resources as the cause."""
    GlobalHydra.instance().clear()
    conf = Path(launch.__file__).parent / "conf"
    launch.stages.load()  # the stages' typed configs in Hydra's ConfigStore, as the launch's cli puts them
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose(
            "config",
            overrides=["launcher=slurm", "~demo", "stage=container_check", f"output_root={tmp_path}"],
        )
    GlobalHydra.instance().clear()
    rcfg = launch.resolved_config(cfg, "slurm")
    folder = RunFolder(Path(rcfg.run_dir))
    jobs = build_plan(rcfg, launch.load_registry(cfg), folder)
    with pytest.raises(SubmissionError) as info:
        submit_slurm(jobs, rcfg, folder, lambda spec, job: None)
    message = str(info.value)
    assert message.startswith("Slurm is not reachable: sbatch: "), message
    assert "Unable to contact slurm controller" in message and "resources {" not in message, message
