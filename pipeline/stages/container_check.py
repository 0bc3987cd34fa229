"""container_check: is the environment the stage jobs run in the one the training expects?

It runs first, inside whatever the other stages run in (the host, or the image with
`container=apptainer`), so every later finding is about the model and the data, not the software.
Where the training line is a lerobot-train line it also probes that command's own runtime
(training_runtime.py: the policy modules, one frame through lerobot's video decoder); a launch of one
other stage (`stage=contract`) runs it for that probe alone, since the chained training needs it.
The torch/CUDA and GL probes are measured once per node, image and installed software and then taken
from the output root's probe cache (`probe_cache.py`), the rows saying so; the runtime probe, the
packages and the folders are measured on every run.
"""

from __future__ import annotations

import contextlib
import importlib.metadata as metadata
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from pipeline.errors import InputError, RecordError
from pipeline.record.records import Check, Rows, StageResult
from pipeline.record.runfolder import probe_cache_file
from pipeline.stages import StageContext, container_image, probe_cache, training_runtime
from pipeline.stages.config import settings
from pipeline.stages.settings import ContainerCheckConfig

NAME = "container_check"
SOFTWARE_RENDERERS = ("llvmpipe", "softpipe", "swrast", "software rasterizer")
ROWS = Rows(NAME, "container")


# Runs in a fresh interpreter: MUJOCO_GL and PyOpenGL's platform are fixed at import time.
_GL_PROBE = """
import mujoco
ctx = mujoco.GLContext(16, 16)
ctx.make_current()
from OpenGL import GL
for name in ("GL_RENDERER", "GL_VENDOR", "GL_VERSION"):
    value = GL.glGetString(getattr(GL, name))
    print(name + "=" + (value.decode() if value else ""))
ctx.free()
"""


def run(cfg: DictConfig, ctx: StageContext) -> StageResult:
    config = settings(ContainerCheckConfig, cfg, ctx.config, NAME)
    if str((cfg.get("stage") or {}).get("name") or "full") not in ("full", NAME):
        return StageResult.from_checks(NAME, training_runtime.runtime_checks(cfg))  # the line's probe alone
    checks = [_python_check(config)]
    checks += [_package_check(name, spec) for name, spec in config.packages.items()]
    where = Probes.of(cfg, ctx, reuse=config.reuse)
    checks.append(_gpu_check(config, where))
    checks.append(_gl_check(config, where))
    dirs = {"run_dir": cfg.run_dir, "audit_dir": cfg.audit_dir, "checkpoint_dir": cfg.checkpoint_dir}
    checks += [_dir_check(label, Path(path), config.min_free_gb) for label, path in dirs.items()]
    checks += container_image.image_checks(cfg, ctx.run_dir)  # the image: promoted, readable, running in it
    checks += training_runtime.runtime_checks(cfg)
    return StageResult.from_checks(NAME, checks)


@dataclass(frozen=True)
class Probes:
    """Where this job keeps its node measurements, and the image they are measured in."""

    cache: Path | None
    image: str | None
    reuse: bool = True

    @classmethod
    def of(cls, cfg: DictConfig, ctx: StageContext, reuse: bool = True) -> Probes:
        """The output root's cache; the image as the launch digested it (`plan.json`), else the path
        the job runs in. `stages.container_check.reuse=false` measures again (and keeps the result)."""
        root = cfg.get("output_root")
        image = None
        with contextlib.suppress(RecordError, InputError, OSError, AttributeError, TypeError):
            image = ctx.folder.load_plan().get("image_digest")
        image = image or os.environ.get("APPTAINER_CONTAINER") or os.environ.get("SINGULARITY_CONTAINER")
        return cls(probe_cache_file(root) if root else None, image, reuse)

    def probed(
        self, kind: str, measure: Callable[[], tuple[dict[str, Any], bool]], **extra: Any
    ) -> probe_cache.Probed:
        digest = probe_cache.probe_digest(kind, self.image, **extra)
        return probe_cache.probed(self.cache, digest, measure, self.reuse)


def _spec(name: str, spec: str | None) -> SpecifierSet:
    try:
        return SpecifierSet(spec or "")
    except InvalidSpecifier as exc:
        raise InputError(
            f"stages.{NAME}.packages.{name}: {spec!r} is not a version specifier (expected e.g. '>=2.3,<3')",
            field=f"stages.{NAME}.packages.{name}",
        ) from exc


def _python_check(config: ContainerCheckConfig) -> Check:
    spec = _spec("python", config.python)
    actual = platform.python_version()
    return ROWS.judge(
        "python",
        "python",
        Version(actual) in spec,
        f"Python {actual} against '{spec or 'any'}'",
        expected=str(spec) or "any",
        actual=actual,
        evidence={"executable": sys.executable},
    )


def _package_check(name: str, raw_spec: str | None) -> Check:
    spec = _spec(name, raw_spec)
    feature, expected = f"package:{name}", str(spec) or "installed"
    try:
        actual = metadata.version(name)
    except metadata.PackageNotFoundError:
        message = f"{name} is not installed in this environment"
        return ROWS(feature, feature, "mismatch", message, expected=expected, actual=None)
    try:
        ok = spec.contains(Version(actual), prereleases=True)
    except InvalidVersion:
        ok = not str(spec)
    message = f"{name} {actual} against '{spec or 'any'}'"
    return ROWS.judge(feature, feature, ok, message, expected=expected, actual=actual)


def _torch_facts() -> tuple[dict[str, Any], bool]:
    """What torch sees of the node's GPUs (the measurement `probe_cache` keeps)."""
    import torch  # imported here: container_check must still report when torch itself is broken

    available = torch.cuda.is_available()
    count = torch.cuda.device_count() if available else 0
    devices = [
        {
            "name": torch.cuda.get_device_name(i),
            "capability": ".".join(map(str, torch.cuda.get_device_capability(i))),
        }
        for i in range(count)
    ]
    facts = {
        "available": available,
        "count": count,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "devices": devices,
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    return facts, True


def _gpu_check(config: ContainerCheckConfig, where: Probes) -> Check:
    probe = where.probed("cuda", _torch_facts)
    facts = probe.facts
    available, count, devices = bool(facts["available"]), int(facts["count"]), list(facts["devices"])
    evidence = {
        **{k: facts.get(k) for k in ("torch", "cuda", "devices", "CUDA_VISIBLE_DEVICES")},
        "probe": probe.evidence(),
    }
    expected = {
        "require_gpu": config.require_gpu,
        "min_gpus": config.min_gpus,
        "min_capability": config.min_capability,
    }
    problems = _gpu_problems(expected, count, devices)
    message = "; ".join(problems) or f"{count} CUDA device(s); GPU required: {expected['require_gpu']}"
    message += probe.note()
    actual = {"available": available, "count": count}
    return ROWS.judge(
        "cuda", "cuda", not problems, message, expected=expected, actual=actual, evidence=evidence
    )


def _gpu_problems(expected: dict[str, Any], count: int, devices: list[dict[str, str]]) -> list[str]:
    if not expected["require_gpu"]:
        return []
    if count < expected["min_gpus"]:
        return [f"GPU required but torch sees {count} CUDA device(s) (need {expected['min_gpus']})"]
    floor = expected["min_capability"]
    if floor is None:
        return []
    return [
        f"device {i} ({d['name']}) has compute capability {d['capability']} < {floor}"
        for i, d in enumerate(devices)
        if Version(d["capability"]) < Version(str(floor))
    ]


def _gl_probe(backend: str, timeout_s: float) -> tuple[str, int]:
    """Output and exit code of the GL probe in a fresh interpreter under MUJOCO_GL=`backend`."""
    env = {**os.environ, "MUJOCO_GL": backend, "PYOPENGL_PLATFORM": backend}
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _GL_PROBE],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"GL probe timed out after {timeout_s:g} s", -1
    return proc.stdout + proc.stderr, proc.returncode


def _gl_facts(backend: str, timeout_s: float) -> tuple[dict[str, Any], bool]:
    output, rc = _gl_probe(backend, timeout_s)
    renderer = any(line.startswith("GL_RENDERER=") and line[12:] for line in output.splitlines())
    return {"output": output, "rc": rc}, rc == 0 and renderer


def _gl_check(config: ContainerCheckConfig, where: Probes) -> Check:
    backend = config.mujoco_gl
    probe = where.probed("gl", lambda: _gl_facts(backend, config.gl_timeout_s), backend=backend)
    output, rc = str(probe.facts["output"]), int(probe.facts["rc"])
    info = dict(line.split("=", 1) for line in output.splitlines() if line.startswith("GL_") and "=" in line)
    renderer = info.get("GL_RENDERER", "")
    software = any(s in renderer.lower() for s in SOFTWARE_RENDERERS)
    expected = "hardware renderer" if config.require_gpu else "any renderer"
    if rc != 0 or not renderer:
        verdict, expected, actual = "mismatch", backend, None
        message = f"MuJoCo could not open a {backend} GL context: {output.strip()[-400:]}"
    elif software and config.require_gpu:
        verdict, actual = "mismatch", renderer
        message = (
            f"GL_RENDERER is '{renderer}' (software) on a node that "
            "should render on its GPU: frame caches would render slowly and may differ"
        )
    else:
        verdict, actual = "match", renderer
        message = f"GL_RENDERER '{renderer}' under MUJOCO_GL={backend}"
    return ROWS(
        "gl_renderer",
        "gl_renderer",
        verdict,
        message + probe.note(),
        severity="hard" if config.require_gl else "soft",
        expected=expected,
        actual=actual,
        evidence={"MUJOCO_GL": backend, **info, "probe": probe.evidence()},
    )


def _dir_check(label: str, path: Path, min_free_gb: float) -> Check:
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".preflight-write-test-") as handle:
            handle.write(b"ok")
            handle.flush()
            os.fsync(handle.fileno())
        free_gb = shutil.disk_usage(path).free / 2**30
    except OSError as exc:
        message = f"{path} is not writable: {exc}"
        evidence = {"path": str(path)}
        return ROWS(
            label,
            label,
            "mismatch",
            message,
            category="storage",
            expected="writable",
            actual=str(exc),
            evidence=evidence,
        )
    ok = free_gb >= min_free_gb
    message = f"{path} writable, {free_gb:.1f} GiB free" + ("" if ok else f" (< {min_free_gb} GiB)")
    return ROWS.judge(
        label,
        label,
        ok,
        message,
        category="storage",
        expected=f">= {min_free_gb} GiB free",
        actual=f"{free_gb:.2f} GiB free",
        evidence={"path": str(path), "free_gb": round(free_gb, 3)},
    )
