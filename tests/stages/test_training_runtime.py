"""The training command's own runtime, probed by container_check for a lerobot-train line: the
interpreter lerobot-train runs with, the policy type's import, one frame through lerobot's decoder.
Here (no lerobot in this venv) the probe runs for real where it can (a `python -m` line whose lerobot is
missing); a loader error is read as torchcodec words it when FFmpeg's libraries are absent. The probe
against real lerobot and torchcodec is tests/stages/test_training_runtime_lerobot.py."""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import OmegaConf

from pipeline.stages import training_runtime as rt

# torchcodec 0.10's loader error under torch 2.10 on this Debian 12 machine without FFmpeg's shared
# libraries, as lerobot 0.4.4's decode_video_frames raised it (abridged: three of the five versions tried)
TORCHCODEC = (
    "RuntimeError: Could not load libtorchcodec. Likely causes:\n"
    "          1. FFmpeg is not properly installed in your environment. We support\n"
    "[start of libtorchcodec loading traceback]\nFFmpeg version 6:\nTraceback (most recent call last):\n"
    "OSError: libavutil.so.58: cannot open shared object file: No such file or directory\n\n"
    "The above exception was the direct cause of the following exception:\n\n"
    "OSError: Could not load this library: /venv/site-packages/torchcodec/libtorchcodec_core6.so\n\n"
    "FFmpeg version 5:\nTraceback (most recent call last):\n"
    "OSError: libavutil.so.57: cannot open shared object file: No such file or directory\n\n"
    "OSError: Could not load this library: /venv/site-packages/torchcodec/libtorchcodec_core5.so\n\n"
    "FFmpeg version 4:\nTraceback (most recent call last):\n"
    "OSError: libavutil.so.56: cannot open shared object file: No such file or directory\n\n"
    "OSError: Could not load this library: /venv/site-packages/torchcodec/libtorchcodec_core4.so\n"
    "[end of libtorchcodec loading traceback]."
)


def cfg(command: list[str], env: dict | None = None) -> object:
    return OmegaConf.create({"training": {"command": command, "env": env or {}}, "dataset": {}, "model": {}})


def test_a_line_that_is_not_lerobot_train_gets_no_row():
    assert rt.runtime_checks(cfg(["python", "train.py"])) == []


def test_lerobot_train_not_on_the_jobs_path_is_a_soft_row_saying_nothing_was_probed(tmp_path):
    rows = rt.runtime_checks(cfg(["lerobot-train", "--policy.type=act"], {"PATH": str(tmp_path)}))
    assert len(rows) == 1 and (rows[0].verdict, rows[0].severity) == ("mismatch", "soft")
    assert "not on PATH" in rows[0].message and not rows[0].blocking


def test_the_interpreter_is_the_console_scripts_shebang(tmp_path):
    script = tmp_path / "lerobot-train"
    script.write_text(f"#!{sys.executable}\nimport sys\n")
    script.chmod(0o755)
    assert rt.interpreter(["lerobot-train"], {"PATH": str(tmp_path)}) == sys.executable
    script.write_text("#!/usr/bin/env python3\n")
    assert Path(rt.interpreter(["lerobot-train"], {"PATH": f"{tmp_path}:/usr/bin"}) or "").name == "python3"


def test_an_interpreter_without_lerobot_is_one_hard_row_naming_the_import():
    line = [sys.executable, "-m", "lerobot.scripts.lerobot_train", "--policy.type=act"]
    (row,) = rt.runtime_checks(cfg(line))
    assert row.blocking and row.id == "container_check.training_runtime"
    assert "importing the policy type act" in row.message and "No module named 'lerobot'" in row.message


def test_a_torchcodec_without_ffmpeg_names_each_library_and_its_debian_package():
    result = {"policy": {"ok": True, "value": "x"}, "backend": "torchcodec",
              "decode": {"ok": False, "error": TORCHCODEC}}  # fmt: skip
    row = rt.runtime_row("/venv/bin/python", ["act", "/d/v.mp4", "0.0", "0.03", ""], result, None)
    assert row.blocking and "decoding with torchcodec" in row.message
    assert "libavutil.so.57 (Debian package libavutil57)" in row.message
    assert "apt-get install libavcodec59 libavformat59 libavutil57" in row.message
    assert "--dataset.video_backend=pyav" in row.message
    assert row.evidence["missing_libraries"] == ["libavutil.so.58", "libavutil.so.57", "libavutil.so.56"]
    assert "RuntimeError: Could not load libtorchcodec." in row.message and "Likely" not in row.message


def test_only_torchs_wrapper_line_still_names_torchcodecs_core():
    text = "OSError: Could not load this library: /v/torchcodec/libtorchcodec_core4.so"
    result = {"policy": {"ok": True}, "backend": "torchcodec", "decode": {"ok": False, "error": text}}
    row = rt.runtime_row("/venv/bin/python", ["act", "/d/v.mp4", "0.0", "0.03", ""], result, None)
    assert "did not load: libtorchcodec_core4.so" in row.message and "libavutil57" in row.message
    assert rt.debian_package("libswscale.so.6") == "libswscale6" and rt.debian_package("libfoo.so.1") is None


def _script(folder: Path, first_line: bytes) -> Path:
    script = folder / "lerobot-train"
    script.write_bytes(first_line + b"\nimport sys\n")
    script.chmod(0o755)
    return script


def test_a_console_script_that_cannot_start_blocks_naming_it_and_why(tmp_path):
    """A FIFO, a `#!` line past what Linux reads, a `#!` naming nothing there: hard rows, never "not on
    PATH" and never a probe that blocks on the FIFO."""
    import os

    env = {"PATH": str(tmp_path)}
    line = cfg(["lerobot-train", "--policy.type=act"], env)
    cases = {
        b"#!" + b"/x" * 2**20: "cannot be read: 2097166 bytes, more than the 1048576 bytes allowed",
        b"#!" + b"/x" * 150: "its #! line is 302 bytes, past the 256 Linux reads",
        b"#!/no/such/python3": "names no interpreter there",
        b"#!/usr/bin/env -S": "names no interpreter there",
        b"echo no shebang": "has no #! line",
    }
    for first, why in cases.items():
        script = _script(tmp_path, first)
        (row,) = rt.runtime_checks(line)
        assert row.blocking and str(script) in row.message and why in row.message, row.message
        script.unlink()
    os.mkfifo(tmp_path / "lerobot-train")
    (tmp_path / "lerobot-train").chmod(0o755)
    (row,) = rt.runtime_checks(line)
    assert row.blocking and "FIFO" in row.message and "cannot start" in row.message


def test_env_dash_s_runs_the_program_after_its_options(tmp_path):
    _script(tmp_path, f"#!/usr/bin/env -S PYTHONHASHSEED=0 {Path(sys.executable).name} -u".encode())
    path = f"{tmp_path}:{Path(sys.executable).parent}"
    assert rt.interpreter(["lerobot-train"], {"PATH": path}) == str(
        Path(sys.executable).parent / Path(sys.executable).name
    )


def test_the_probe_is_bounded_at_30_seconds():
    assert rt.TIMEOUT_S == 30.0


def test_a_runtime_that_hangs_blocks_after_the_bound_with_a_short_message(tmp_path, monkeypatch):
    sleeper = tmp_path / "python3"
    sleeper.write_text("#!/bin/sh\nsleep 600 &\nsleep 600\n")  # a child holding the pipe open too
    sleeper.chmod(0o755)
    _script(tmp_path, f"#!{sleeper}".encode())
    monkeypatch.setattr(rt, "TIMEOUT_S", 1.0)
    (row,) = rt.runtime_checks(
        cfg(["lerobot-train", "--policy.type=act"], {"PATH": f"{tmp_path}:/usr/bin:/bin"})
    )
    assert (
        row.blocking
        and "did not answer in 1 s (it hangs)" in row.message
        and "lerobot-train runs with" in row.message
    )
    assert "PREFLIGHT_PROBE" not in row.message and len(row.message) < 400  # not the probe script
