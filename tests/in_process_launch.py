"""`python -m pipeline.launch ...` run in the test's own process: the same entry (`launch.cli`), the same
command line, the same run folder, records, output and exit code, without a fresh interpreter.

Why: a launching test paid an interpreter and the launcher's imports (Hydra, the stage configs) each
time, and a launch that runs the contract in process (`pipeline/run/inprocess.py`) paid the contract's
own libraries (scipy, matplotlib, PyAV) again in each launch; here they are paid once per test process.
Used where what a test reads is the launch's outcome (its exit code, its lines, its files), not the
process boundary itself: a test of `python -m` as a user types it, of a killed launcher, or of what a
fresh interpreter imports still launches a subprocess (tests/conftest.py `launch`).

What a subprocess gave for free is restored here after each call: the working directory, `sys.argv`,
`sys.path`, the environment its jobs inherit, a Hydra initialization the test holds (set aside during
the launch), the stage registry and Hydra's `stages/registered` node (a plugin registered by one launch
is not there for the next), and the plugin modules the launch imported (so a later launch imports and
registers them again, as its own process would).
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests import build_ledger
from tests.build_ledger import LEDGER
from tests.conftest import NO_SEED, PLUGINS


def launch_here(cwd: Path, *overrides: str, seed_demo: bool = True) -> subprocess.CompletedProcess[str]:
    """As tests/conftest.py `launch(cwd, *overrides)`, in this process (the module's docstring says why);
    the demo is seeded from the session's cache alike."""
    cache = build_ledger.SESSION_DEMOS
    seeded = seed_demo and cache is not None and not any(o.startswith(NO_SEED) for o in overrides)
    if seeded:
        cache.seed(cwd, *overrides)
    before = build_ledger.markers(cwd / "preflight")
    out, err = io.StringIO(), io.StringIO()
    with _as_a_process(cwd, overrides), _hydra_set_aside():
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = _exit_code()
    for digest, variant in build_ledger.launch_builds(cwd / "preflight", before):
        LEDGER.record(digest, variant, f"launch {' '.join(overrides)}")
        if seeded:
            LEDGER.duplicates.append(f"{LEDGER.current}: the launch rebuilt the {variant} demo it was seeded")
    argv = [sys.executable, "-m", "pipeline.launch", *overrides]
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def _exit_code() -> int:
    from pipeline import launch

    try:
        launch.cli()
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


@contextlib.contextmanager
def _as_a_process(cwd: Path, overrides: tuple[str, ...]) -> Iterator[None]:
    """cwd, argv, the import path (`python -m` puts the working directory first; the test plugins as the
    subprocess's PYTHONPATH has them), the stage registry and the plugin modules, restored after."""
    from pipeline import stages
    from pipeline.stages.config import store_registered

    registry, modules = dict(stages.load()), set(sys.modules)
    saved_argv, saved_path, saved_cwd = list(sys.argv), list(sys.path), os.getcwd()
    saved_env = {k: os.environ.get(k) for k in ("PYTHONPATH", "COLUMNS")}
    sys.argv = ["pipeline.launch", *overrides]
    sys.path[:0] = [str(cwd), str(PLUGINS)]
    # what conftest's `launch` gives its process, for the job processes this launch starts
    os.environ["PYTHONPATH"] = os.pathsep.join([str(PLUGINS), saved_env["PYTHONPATH"] or ""])
    os.environ["COLUMNS"] = "200"
    os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        sys.argv, sys.path[:] = saved_argv, saved_path
        for name in set(sys.modules) - modules:
            if _imported_from(sys.modules[name], (cwd, PLUGINS)):
                del sys.modules[name]
        stages._REGISTRY.clear()
        stages._REGISTRY.update(registry)
        store_registered({n: s.config for n, s in registry.items() if s.config is not None})


@contextlib.contextmanager
def _hydra_set_aside() -> Iterator[None]:
    """A test's own Hydra initialization (a module fixture composing configs) set aside while the launch
    composes its command line, as a fresh process has none, and put back after."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.singleton import Singleton

    held = Singleton._instances.pop(GlobalHydra, None)
    try:
        yield
    finally:
        Singleton._instances.pop(GlobalHydra, None)
        if held is not None:
            Singleton._instances[GlobalHydra] = held


def _imported_from(module: object, folders: tuple[Path, ...]) -> bool:
    where = getattr(module, "__file__", None)
    return bool(where) and any(Path(where).resolve().is_relative_to(f.resolve()) for f in folders)
