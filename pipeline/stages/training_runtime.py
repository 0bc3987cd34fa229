"""The training command's own runtime, probed where the jobs run: can lerobot-train start at all?

A lerobot-train line that the gate clears still crashes at its first batch when the environment lacks
what lerobot loads lazily: the policy type's modules (and what they import), and the video decoder. On a
machine without FFmpeg's shared libraries lerobot 0.4.4 picks torchcodec (its
`get_safe_default_codec`: torchcodec whenever `importlib.util.find_spec("torchcodec")` finds it, else
pyav; `--dataset.video_backend` overrides), whose core library then cannot load, and every training
crashes in the data loader. So the probe runs, in a fresh process of the interpreter lerobot-train
itself runs with (its script's `#!` line, or the `python` of `python -m ...`) and under `training.env`:
the policy type's class through lerobot's own factory, then one frame of the dataset's first camera
through lerobot's own `decode_video_frames` with the backend lerobot would pick. A failure is one hard
row naming the library that did not load and the Debian package that provides it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from pipeline.errors import InputError
from pipeline.readers import LeRobotData, lerobot_command
from pipeline.readers.base import read_json
from pipeline.record.records import Check, Rows
from pipeline.storage.files import read_bytes

ROWS = Rows("container_check", "container")
ROW = "training_runtime"
TIMEOUT_S = 30.0  # importing a policy and decoding one frame takes seconds; a hang must not hold the gate
SHEBANG_MAX = 256  # bytes of a `#!` line Linux reads (BINPRM_BUF_SIZE): a longer one does not run
SCRIPT_MAX = 2**20  # a console script is a few hundred bytes
MARK = "PREFLIGHT_PROBE="
# FFmpeg's shared libraries as Debian 12 ships them (FFmpeg 5.1), what torchcodec's core loads
FFMPEG_DEBIAN12 = (
    "libavcodec59", "libavformat59", "libavutil57", "libswscale6", "libswresample4", "libavdevice59",
    "libavfilter8",
)  # fmt: skip
MISSING_LIB = re.compile(r"([\w.+-]+\.so(?:\.\d+)*): cannot open shared object file")
CORE_LIB = re.compile(r"(libtorchcodec_core\d*\.so)")
FFMPEG_LIBS = ("libavcodec", "libavformat", "libavutil", "libswscale", "libswresample", "libavdevice",
               "libavfilter", "libpostproc")  # fmt: skip

# Runs in lerobot-train's interpreter: argv = policy type ('' none), video ('' none), timestamp,
# tolerance, backend ('' lerobot's default). Prints one JSON line after MARK.
PROBE = """
import json, sys
policy_type, video, ts, tolerance, backend = sys.argv[1:6]
out = {}
def step(name, fn):
    try:
        out[name] = {"ok": True, "value": fn()}
    except BaseException as exc:
        out[name] = {"ok": False, "error": type(exc).__name__ + ": " + str(exc)}
    return out[name]["ok"]
def policy():
    import lerobot
    import lerobot.policies
    if not policy_type:
        return lerobot.__version__
    from lerobot.policies.factory import get_policy_class
    return get_policy_class(policy_type).__module__
def decode():
    from lerobot.datasets.video_utils import decode_video_frames, get_safe_default_codec
    out["backend"] = backend or get_safe_default_codec()
    frames = decode_video_frames(video, [float(ts)], float(tolerance), out["backend"])
    return list(frames.shape)
if step("policy", policy) and video:
    step("decode", decode)
print("PREFLIGHT_PROBE=" + json.dumps(out))
"""


def runtime_checks(cfg: Any) -> list[Check]:
    """The probe's one row where the training line is a lerobot-train line; none otherwise."""
    argv = lerobot_command.training_argv(cfg)
    command = lerobot_command.parse(argv) if argv else None
    if command is None:
        return []
    env = job_env(cfg)
    python, why = locate(argv, env)
    if python is None:
        return [unprobed_row(argv[0], why)]
    args = probe_args(cfg, command)
    result = run_probe(python, args, env)
    return [runtime_row(python, args, result, command)]


def job_env(cfg: Any) -> dict[str, str]:
    """This job's environment with `training.env` over it (null unsets), as the chained job gets it."""
    block = (cfg.get("training") or {}).get("env") or {}
    plain = OmegaConf.to_container(block, resolve=True) if OmegaConf.is_config(block) else block
    env = dict(os.environ)
    for name, value in (plain if isinstance(plain, dict) else {}).items():
        if value is None:
            env.pop(str(name), None)
        else:
            env[str(name)] = str(value)
    return env


def interpreter(argv: Sequence[str], env: Mapping[str, str]) -> str | None:
    """The Python lerobot-train runs with (see `locate`), or None."""
    return locate(argv, env)[0]


def locate(argv: Sequence[str], env: Mapping[str, str]) -> tuple[str | None, str]:
    """(the Python lerobot-train runs with: its console script's `#!` interpreter, or argv[0] itself for
    `python -m <module>`; "") or (None, what is wrong: `not found` on the job's PATH, else why the script
    cannot start: a FIFO or an oversized file, a `#!` line Linux would not run, an interpreter that is
    not there)."""
    found = shutil.which(argv[0], path=env.get("PATH"))
    if found is None:
        return None, NOT_FOUND
    if Path(argv[0]).name not in lerobot_command.PROGRAMS:
        return found, ""
    try:  # the first line only, through the safe reader: a FIFO or a 2 GB file is never read
        first = read_bytes(Path(found), "the lerobot-train console script", SCRIPT_MAX).split(b"\n", 1)[0]
    except InputError as exc:
        return None, f"{found} cannot be read: {str(exc).removeprefix(f'{found}: ')}"
    if not first.startswith(b"#!"):
        return None, f"{found} has no #! line naming its interpreter"
    if len(first) >= SHEBANG_MAX:
        return None, f"{found}: its #! line is {len(first)} bytes, past the {SHEBANG_MAX} Linux reads of it"
    words = first[2:].decode(errors="replace").split()
    program = _env_program(words[1:]) if words and Path(words[0]).name == "env" else (words or [None])[0]
    python = shutil.which(program, path=env.get("PATH")) if program else None
    if python is None:
        return (
            None,
            f"{found}: its #! line ({first.decode(errors='replace')[:120]}) names no interpreter there",
        )
    return python, ""


NOT_FOUND = "not found"


def _env_program(args: Sequence[str]) -> str | None:
    """The program `#!/usr/bin/env [-S] [-i] [NAME=VALUE ...] program` runs."""
    i = 0
    while i < len(args) and (args[i].startswith("-") or "=" in args[i]):
        i += 2 if args[i] in ("-u", "--unset", "-C", "--chdir") else 1
    return args[i] if i < len(args) else None


def unprobed_row(program: str, why: str) -> Check:
    """The row where the probe could not start: soft where the program is not on the jobs' PATH (the
    chained job may run elsewhere), hard where the script is there and cannot start."""
    evidence = {"argv0": program, "problem": why}
    if why == NOT_FOUND:
        message = (
            f"{program} (the training command) is not on PATH where the jobs run: its runtime (the policy "
            "modules, the video decoder) was not probed; the chained training needs it where it runs"
        )
        return ROWS(ROW, ROW, "mismatch", message, severity="soft", evidence=evidence)
    message = f"{program} (the training command) cannot start where the jobs run: {why}"
    return ROWS(ROW, ROW, "mismatch", message, expected="the training command starts", evidence=evidence)


def probe_args(cfg: Any, command: Any) -> list[str]:
    """Policy type, the first camera's video and its first frame's time, the tolerance lerobot uses
    (1/fps - 1e-4) and the backend typed (empty: lerobot's own choice)."""
    kind = command.policy_type or _base_type(cfg)
    video, ts, tolerance = "", "0", "0"
    dataset = (cfg.get("dataset") or {}).get("path")
    try:
        data = LeRobotData(str(dataset)) if dataset else None
        keys = data.video_keys() if data is not None else []
        if data is not None and keys:
            episode = int(data.frames(["episode_index"], limit=1)["episode_index"][0])
            path, start, _ = data.video_location(keys[0], episode)
            fps = float(data.info.get("fps") or 30)
            video, ts, tolerance = str(path), repr(float(start)), repr(1 / fps - 1e-4)
    except (InputError, OSError, ValueError, KeyError, IndexError):
        video = ""  # an unreadable dataset is the contract stage's and the readers' row
    return [kind or "", video, ts, tolerance, command.get("dataset.video_backend") or ""]


def _base_type(cfg: Any) -> str | None:
    path = (cfg.get("model") or {}).get("path")
    config = Path(str(path)) / "config.json" if path else None
    if config is None or not config.is_file():
        return None
    try:
        data = read_json(config, "a LeRobot policy config.json")
    except InputError:
        return None
    kind = data.get("type") if isinstance(data, dict) else None
    return kind if isinstance(kind, str) else None


def run_probe(python: str, args: Sequence[str], env: Mapping[str, str]) -> dict[str, Any]:
    """The probe's JSON, or `{"probe": {ok: False, error}}` when the interpreter itself failed or did not
    answer in `TIMEOUT_S` (its whole process group is killed: a child it started cannot keep it open)."""
    try:
        proc = subprocess.Popen(
            [python, "-c", PROBE, *args], env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, errors="replace", start_new_session=True,
        )  # fmt: skip
    except OSError as exc:
        return {"probe": {"ok": False, "error": f"{python} cannot start: {exc.strerror or exc}"}}
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"probe": {"ok": False, "error": f"{python} did not answer in {TIMEOUT_S:g} s (it hangs)"}}
    line = next((ln for ln in reversed(out.splitlines()) if ln.startswith(MARK)), None)
    if line is None:
        tail = (err or out).strip()[-600:]
        return {"probe": {"ok": False, "error": f"exit {proc.returncode}: {tail}"}}
    try:
        return json.loads(line[len(MARK) :])
    except ValueError:
        return {"probe": {"ok": False, "error": f"its answer is not the probe's JSON: {line[:200]}"}}


def missing_libraries(text: str) -> list[str]:
    """Each shared library a loader error says it could not open, in order, once; torchcodec's core
    where only torch's wrapper line survived ("Could not load this library: .../libtorchcodec_core4.so")."""
    found = MISSING_LIB.findall(text) or CORE_LIB.findall(text)
    return list(dict.fromkeys(found))


def debian_package(library: str) -> str | None:
    """Debian's name for the package of an FFmpeg library: `libavutil.so.57` -> `libavutil57`."""
    match = re.fullmatch(r"(lib[a-z]+)\.so\.(\d+)(?:\.\d+)*", library)
    return f"{match.group(1)}{match.group(2)}" if match and match.group(1) in FFMPEG_LIBS else None


def runtime_row(python: str, args: Sequence[str], result: Mapping[str, Any], command: Any) -> Check:
    kind, video, backend = args[0] or "(any)", args[1], result.get("backend") or args[4] or None
    failed = {k: v["error"] for k, v in result.items() if isinstance(v, dict) and not v.get("ok")}
    evidence = {"python": python, "policy_type": args[0] or None, "video": video or None,
                "backend": backend, "probe": dict(result)}  # fmt: skip
    if not failed:
        said = f"policy type {kind} imports" + (
            f"; {backend} decodes one frame of {video}" if video else " (no video in the dataset)"
        )
        return ROWS(ROW, ROW, "match", f"lerobot-train's runtime ({python}): {said}", evidence=evidence)
    text = " ".join(failed.values())
    libraries = missing_libraries(text)
    evidence["missing_libraries"] = libraries
    what = "importing the policy type " + kind if "decode" not in failed else f"decoding with {backend}"
    where = python
    if "probe" in failed:  # the interpreter itself: it could not start, or hangs
        what = "to start"
        where += f", which {command.argv[0] if command is not None else 'the training command'} runs with"
    message = f"lerobot-train's runtime ({where}) fails {what}: {_brief(text)}"
    if libraries:
        message += "; " + _libraries_said(libraries, backend)
    return ROWS(ROW, ROW, "mismatch", message, expected="the training command starts", actual=failed,
                evidence=evidence)  # fmt: skip


def _libraries_said(libraries: list[str], backend: str | None) -> str:
    """The libraries that did not load, each with its Debian package, and the way out."""
    named = ", ".join(
        f"{lib} (Debian package {pkg})" if (pkg := debian_package(lib)) else lib for lib in libraries
    )
    said = f"did not load: {named}"
    if any(debian_package(lib) or CORE_LIB.fullmatch(lib) for lib in libraries):
        said += (
            "; FFmpeg's shared libraries are missing (Debian 12: apt-get install "
            f"{' '.join(FFMPEG_DEBIAN12)}; conda: ffmpeg)"
        )
        if backend == "torchcodec":
            said += "; or train with --dataset.video_backend=pyav, whose wheel carries its own FFmpeg"
    return said


def _brief(text: str) -> str:
    """The loader error's first sentence (torchcodec's goes on with its likely causes and a traceback
    per FFmpeg version it tried, whose libraries the row names)."""
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return first.split(" Likely causes")[0][:300]
