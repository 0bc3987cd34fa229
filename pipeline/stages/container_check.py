"""container_check: is the environment the stage jobs run in the one the training expects?

It runs first, inside whatever the other stages run in (the host, or the image with
`container=apptainer`), so every later finding is about the model and the data, not the software.
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from pipeline.errors import InputError
from pipeline.records import Check, StageResult
from pipeline.stages import Stage, StageContext, container_image, register

NAME = "container_check"
SOFTWARE_RENDERERS = ("llvmpipe", "softpipe", "swrast", "software rasterizer")

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
    scfg = cfg.stages[NAME]
    checks = [_python_check(scfg)]
    checks += [_package_check(name, spec) for name, spec in scfg.packages.items()]
    checks.append(_gpu_check(scfg))
    checks.append(_gl_check(scfg))
    dirs = {"run_dir": cfg.run_dir, "audit_dir": cfg.audit_dir, "checkpoint_dir": cfg.checkpoint_dir}
    checks += [_dir_check(label, Path(path), float(scfg.min_free_gb)) for label, path in dirs.items()]
    checks += container_image.image_checks(cfg, ctx.run_dir)  # the image: promoted, readable, running in it
    return StageResult.from_checks(NAME, checks)


def _row(
    feature: str,
    verdict: str,
    message: str,
    severity: str = "hard",
    category: str = "container",
    **fields: Any,
) -> Check:
    return Check(
        id=f"{NAME}.{feature}",
        stage=NAME,
        category=category,
        feature=feature,
        verdict=verdict,
        severity=severity,
        message=message,
        **fields,
    )


def _spec(name: str, spec: str | None) -> SpecifierSet:
    try:
        return SpecifierSet(spec or "")
    except InvalidSpecifier as exc:
        raise InputError(
            f"stages.{NAME}.packages.{name}: {spec!r} is not a version specifier (expected e.g. '>=2.3,<3')",
            field=f"stages.{NAME}.packages.{name}",
        ) from exc


def _python_check(scfg: DictConfig) -> Check:
    spec = _spec("python", scfg.get("python"))
    actual = platform.python_version()
    ok = Version(actual) in spec
    return _row(
        "python",
        "match" if ok else "mismatch",
        f"Python {actual} against '{spec or 'any'}'",
        expected=str(spec) or "any",
        actual=actual,
        evidence={"executable": sys.executable},
    )


def _package_check(name: str, raw_spec: str | None) -> Check:
    spec = _spec(name, raw_spec)
    try:
        actual = metadata.version(name)
    except metadata.PackageNotFoundError:
        return _row(
            f"package:{name}",
            "mismatch",
            f"{name} is not installed in this environment",
            expected=str(spec) or "installed",
            actual=None,
        )
    try:
        ok = spec.contains(Version(actual), prereleases=True)
    except InvalidVersion:
        ok = not str(spec)
    verdict = "match" if ok else "mismatch"
    return _row(
        f"package:{name}",
        verdict,
        f"{name} {actual} against '{spec or 'any'}'",
        expected=str(spec) or "installed",
        actual=actual,
    )


def _gpu_check(scfg: DictConfig) -> Check:
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
    evidence = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "devices": devices,
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    expected = {
        "require_gpu": bool(scfg.require_gpu),
        "min_gpus": int(scfg.min_gpus),
        "min_capability": scfg.get("min_capability"),
    }
    problems = _gpu_problems(expected, count, devices)
    verdict = "mismatch" if problems else "match"
    message = "; ".join(problems) or f"{count} CUDA device(s); GPU required: {expected['require_gpu']}"
    return _row(
        "cuda",
        verdict,
        message,
        expected=expected,
        actual={"available": available, "count": count},
        evidence=evidence,
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


def _gl_check(scfg: DictConfig) -> Check:
    backend = str(scfg.mujoco_gl)
    env = {**os.environ, "MUJOCO_GL": backend, "PYOPENGL_PLATFORM": backend}
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _GL_PROBE],
            env=env,
            capture_output=True,
            text=True,
            timeout=float(scfg.gl_timeout_s),
            check=False,
        )
        output, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired:
        output, rc = f"GL probe timed out after {scfg.gl_timeout_s} s", -1
    info = dict(line.split("=", 1) for line in output.splitlines() if line.startswith("GL_") and "=" in line)
    renderer = info.get("GL_RENDERER", "")
    severity = "hard" if scfg.require_gl else "soft"
    evidence = {"MUJOCO_GL": backend, **info}
    if rc != 0 or not renderer:
        return _row(
            "gl_renderer",
            "mismatch",
            f"MuJoCo could not open a {backend} GL context: {output.strip()[-400:]}",
            severity=severity,
            expected=backend,
            actual=None,
            evidence=evidence,
        )
    software = any(s in renderer.lower() for s in SOFTWARE_RENDERERS)
    if software and scfg.require_gpu:
        return _row(
            "gl_renderer",
            "mismatch",
            f"GL_RENDERER is '{renderer}' (software) on a node that "
            "should render on its GPU: frame caches would render slowly and may differ",
            severity=severity,
            expected="hardware renderer",
            actual=renderer,
            evidence=evidence,
        )
    return _row(
        "gl_renderer",
        "match",
        f"GL_RENDERER '{renderer}' under MUJOCO_GL={backend}",
        severity=severity,
        expected="hardware renderer" if scfg.require_gpu else "any renderer",
        actual=renderer,
        evidence=evidence,
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
        return _row(
            label,
            "mismatch",
            f"{path} is not writable: {exc}",
            category="storage",
            expected="writable",
            actual=str(exc),
            evidence={"path": str(path)},
        )
    ok = free_gb >= min_free_gb
    message = f"{path} writable, {free_gb:.1f} GiB free" + ("" if ok else f" (< {min_free_gb} GiB)")
    return _row(
        label,
        "match" if ok else "mismatch",
        message,
        category="storage",
        expected=f">= {min_free_gb} GiB free",
        actual=f"{free_gb:.2f} GiB free",
        evidence={"path": str(path), "free_gb": round(free_gb, 3)},
    )


register(
    Stage(
        name=NAME,
        run=run,
        after=(),
        description="the environment the stages run in: packages, CUDA, GL renderer, writable dirs",
    )
)
