"""container_check probes a lerobot-train line's own runtime with real lerobot 0.4.4 and torchcodec:
`stage=contract` on the demo's video dataset blocks on one row naming the FFmpeg library that torchcodec
could not load, and clears where FFmpeg's shared libraries are installed. Optional: only where `lerobot`
is importable (scripts/test_lerobot.sh)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DemoCache, gate_of, launch, run_dir_of
from tests.trainers.helpers import LEROBOT_ONLY, OFFLINE

pytestmark = LEROBOT_ONLY
DATA_ID = "acme/so101_cams"
ROW = "container_check.training_runtime"
# what torchcodec 0.10 raises when libtorchcodec_core5.so cannot find FFmpeg 5's libavutil (abridged)
STAND_IN = """raise RuntimeError(
    "Could not load libtorchcodec. Likely causes: FFmpeg is not properly installed.\\n"
    "FFmpeg version 5:\\nOSError: libavutil.so.57: cannot open shared object file: No such file or directory"
)
"""


def ffmpeg_installed() -> bool:
    found = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    return "libavutil.so." in found


@pytest.fixture()
def line(tmp_path, monkeypatch, demo_cache: DemoCache) -> list[str]:
    """A lerobot-train line (the venv's own console script) on the demo's two-camera video dataset."""
    home = tmp_path / "hf" / "lerobot"
    shutil.copytree(demo_cache.seed(tmp_path / "seed") / "dataset", home / DATA_ID)
    monkeypatch.setenv("HF_LEROBOT_HOME", str(home))
    for name, value in OFFLINE.items():
        monkeypatch.setenv(name, value)
    program = str(Path(sys.executable).parent / "lerobot-train")
    return [program, "--policy.type=act", f"--dataset.repo_id={DATA_ID}", "--policy.push_to_hub=false"]


def contract(cwd: Path, line: list[str], *overrides: str) -> dict:
    cwd.mkdir()
    proc = launch(
        cwd, "stage=contract", "launcher=local", "wait=true", *overrides, "--", *line, seed_demo=False
    )
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return gate_of(run_dir_of(cwd, proc))


def rows_of(gate: dict, stage: str) -> dict[str, dict]:
    return {c["id"]: c for s in gate["stages"] if s["stage"] == stage for c in s["checks"]}


def test_torchcodec_failing_to_load_ffmpeg_blocks_on_one_row_naming_it_stand_in_for_missing_ffmpeg(
    tmp_path, line
):
    """A stand-in `torchcodec` (first on the probe's path through training.env) raises what the real
    one raises without FFmpeg 5's libavutil, so the test holds whether or not this machine has FFmpeg."""
    stand_in = tmp_path / "stand_in" / "torchcodec"
    stand_in.mkdir(parents=True)
    (stand_in / "__init__.py").write_text(STAND_IN)
    gate = contract(tmp_path / "run", line, f"+training.env.PYTHONPATH={stand_in.parent}")
    assert gate["gate"] == "blocked"
    blocking = [r.partition(": ")[0] for r in gate["reasons"]]
    assert blocking == [ROW], gate["reasons"]
    row = rows_of(gate, "container_check")[ROW]
    assert "decoding with torchcodec" in row["message"]
    assert "libavutil.so.57 (Debian package libavutil57)" in row["message"]


def test_the_machines_own_ffmpeg_decides_clear_or_the_row_naming_what_is_missing(tmp_path, line):
    gate = contract(tmp_path / "run", line)
    row = rows_of(gate, "container_check")[ROW]
    if ffmpeg_installed():
        assert gate["gate"] == "clear", gate["reasons"]
        assert row["verdict"] == "match" and "decodes one frame" in row["message"]
    else:  # this Debian 12 machine without FFmpeg: the real torchcodec cannot load its core
        assert [r.partition(": ")[0] for r in gate["reasons"]] == [ROW], gate["reasons"]
        assert "libavutil.so.57 (Debian package libavutil57)" in row["message"]


def test_with_the_pyav_backend_typed_the_runtime_is_clear(tmp_path, line):
    gate = contract(tmp_path / "run", [*line, "--dataset.video_backend=pyav"])
    row = rows_of(gate, "container_check")[ROW]
    assert gate["gate"] == "clear", gate["reasons"]
    assert row["evidence"]["backend"] == "pyav" and "policy type act imports" in row["message"]
