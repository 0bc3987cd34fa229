"""Shared fixtures: the real data folder, a launcher that runs `python -m pipeline.launch` as a user
would (a subprocess in a scratch directory), and the local Slurm cluster."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from omegaconf import DictConfig

from tests import build_ledger
from tests.build_ledger import LEDGER

REPO = Path(__file__).resolve().parents[1]
# ../shared beside the repo; PREFLIGHT_REAL_DATA points elsewhere (a git worktree one level deeper)
REAL_DATA = Path(os.environ.get("PREFLIGHT_REAL_DATA") or REPO.parent / "shared" / "data" / "real")
PLUGINS = Path(__file__).resolve().parent / "plugins"


@pytest.fixture(autouse=True)
def _normal_scheduling() -> Iterator[None]:
    """A test that encodes AV1 in this process (PyAV's libsvtav1, run as root) leaves this thread at
    SCHED_FIFO 99, and every job the later tests start would inherit it (pipeline.demo.videos)."""
    yield
    from pipeline.demo.videos import restore_scheduling

    restore_scheduling()


@pytest.fixture(scope="session", autouse=True)
def _torch_threads_per_worker() -> None:
    """Under pytest-xdist each worker's in-process torch gets its share of the cores, as a job gets its
    CPUs (teacher_forced's `fit_threads`): two workers with a thread per core each spin against each
    other on a 2-core machine (the stage measured 2.5x the CPU that way)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    if workers > 1:
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


@pytest.fixture(scope="session")
def real_data() -> Path:
    if not REAL_DATA.is_dir():
        pytest.skip(f"real test files not present: {REAL_DATA} (../shared/data/real beside the repo)")
    return REAL_DATA


@pytest.fixture
def plugin_stages(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Plugin stages (tests/plugins) importable, and gone with the test: the registry and Hydra's
    `stages/registered` node as they were, so a later compose on the same xdist worker sees the
    built-in stages only (a leaked plugin section failed test_stage_configs in a full run)."""
    from pipeline import stages
    from pipeline.stages.config import store_registered

    builtin = dict(stages.load())
    monkeypatch.syspath_prepend(str(PLUGINS))
    monkeypatch.setattr(stages, "_REGISTRY", dict(builtin))
    yield
    store_registered({n: s.config for n, s in builtin.items() if s.config is not None})


def slurm_answers() -> bool:
    if shutil.which("sinfo") is None or not os.environ.get("SLURM_CONF"):
        return False
    return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=20, check=False).returncode == 0


@pytest.fixture(scope="session")
def slurm() -> None:
    if not slurm_answers():
        pytest.skip(
            "local Slurm cluster not running (scripts/slurm_local.sh up; SLURM_CONF unset or sinfo fails)"
        )


def other_stages(*keep: str) -> str:
    """A `skip=[...]` override leaving out every registered stage except `keep` (plugins aside)."""
    from pipeline import stages

    names = [n for n in stages.load() if n not in keep]
    return f"skip=[{','.join(names)}]"


# overrides after which a launch builds no demo where the session's would be copied (its inputs are given,
# its output root is elsewhere, or `~demo` removed the demo)
NO_SEED = ("dataset.path=", "model.path=", "training.path=", "output_root=", "~demo")


def launch(
    cwd: Path, *overrides: str, timeout: float = 600, seed_demo: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run the launcher exactly as a user would; test plugin stages are importable through PYTHONPATH.

    The demo such a launch would build is first copied in from the session's cache (`DemoCache`), where
    the launch reuses it as a second launch in the same folder would: built once per session and
    settings, not once per test (with cameras a build is ~35 s). `seed_demo=False` leaves the folder
    empty for tests of the build itself."""
    cache = build_ledger.SESSION_DEMOS
    seeded = seed_demo and cache is not None and not any(o.startswith(NO_SEED) for o in overrides)
    if seeded:
        cache.seed(cwd, *overrides)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(PLUGINS), os.environ.get("PYTHONPATH", "")]),
        "COLUMNS": "200",
    }
    before = build_ledger.markers(cwd / "preflight")
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.launch", *overrides],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    for digest, variant in build_ledger.launch_builds(cwd / "preflight", before):
        LEDGER.record(digest, variant, f"launch {' '.join(overrides)}")
        if seeded:  # the seed was built for nothing: `demo_config` composed other settings than the launch
            LEDGER.duplicates.append(
                f"{LEDGER.current}: the launch rebuilt the {variant} demo the session seeded"
            )
    return proc


class ProbeSeed:
    """container_check's node measurements (torch and CUDA, the GL renderer) kept by the session's earlier
    Slurm launches, copied into each later Slurm launch's output root before it starts.

    Its job then reuses them as a user's second launch on the same node does (stages/probe_cache.py:
    kept under the digest of the host, image, installed software and the probes' environment, judged
    again every time), instead of importing torch and opening a GL context again: ~8-20 s of a job on the
    loaded 2-core machine, once per session instead of once per Slurm test. Every earlier launch's
    entries are gathered, not only the first's: a test that imports MuJoCo in this process sets
    PYOPENGL_PLATFORM, which later launches inherit, and that is another digest (measured once more)."""

    def __init__(self) -> None:
        self.roots: list[Path] = []  # output roots planted so far (their jobs may have kept more since)

    def plant(self, root: Path) -> None:
        from pipeline.stages.probe_cache import SCHEMA, read_cache

        cache = probe_cache_of(root)
        entries = {k: e for r in self.roots for k, e in read_cache(probe_cache_of(r)).items()}
        if entries and not cache.exists():
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(json.dumps({"schema": SCHEMA, "entries": entries}))
        self.roots.append(root)


def probe_cache_of(output_root: Path) -> Path:
    from pipeline.record.runfolder import probe_cache_file

    return probe_cache_file(output_root)


PROBE_SEED = ProbeSeed()


def slurm_launch(cwd: Path, *overrides: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`launch` on the local Slurm cluster, its container_check reusing the session's node measurements
    (`ProbeSeed`); the output root is the default one under `cwd` unless an override moves it."""
    root = next((o.split("=", 1)[1] for o in overrides if o.startswith("output_root=")), "preflight")
    PROBE_SEED.plant(cwd / root)
    return launch(cwd, *overrides, timeout=timeout)


@dataclass(frozen=True)
class Launched:
    """One launch in its own folder, shared by the tests that read different parts of it."""

    cwd: Path
    proc: subprocess.CompletedProcess[str]


@pytest.fixture(scope="session")
def piped_container_check(tmp_path_factory: pytest.TempPathFactory) -> Launched:
    """A clear local launch of container_check alone, run id p1, its output piped: the progress lines it
    printed (test_progress) and the status table of its run (test_status_table) read the same run. The
    launcher's entry runs in the test process (tests/in_process_launch.py), its output captured as a
    pipe would; the job is a process of the local executor."""
    from tests.in_process_launch import launch_here

    cwd = tmp_path_factory.mktemp("piped_container_check")
    overrides = ("launcher=local", "~demo", "min_free_mb=1", "run_id=p1", other_stages("container_check"))
    return Launched(cwd, launch_here(cwd, *overrides))


# the xdist group of the tests that read `faulty_full`: one worker launches it, once per session
FAULTY_FULL_GROUP = "faulty_full"
FAULTY_WAIVED = "contract.units.scale:action"
FAULTY_WAIVERS = f"""waivers:
  - check: "{FAULTY_WAIVED}"
    justification: the golden record shows a waived row
    who: tests
    date: 2026-12-01
"""


@pytest.fixture(scope="session")
def faulty_full() -> Iterator[Launched]:
    """One real `launcher=local stage=full demo=faulty` launch (render_cache, the slowest stage, skipped),
    made to show every kind of row: the planted faults (mismatch), a waiver for one of them (waived),
    `require_quota` on a node without a quota tool (unverifiable), a stage that crashes (error), and the
    rows that match. The golden record (tests/record/test_record_golden.py) and the stage tests that read
    the faulty demo's rows through the launcher read this one run; each such test is marked
    `xdist_group(FAULTY_FULL_GROUP)`, so one worker launches it. Its folder has a fixed-length name under
    /tmp, so cells that cut a path at a fixed width cut it at the same place in every run."""
    import secrets
    import tempfile

    tmp = Path("/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir())
    cwd = tmp / f"pf-golden-{secrets.token_hex(4)}"
    cwd.mkdir()  # no `_` in the name: the markdown would show it escaped
    try:
        (cwd / "configs").mkdir()
        (cwd / "configs" / "waivers.yaml").write_text(FAULTY_WAIVERS)
        proc = launch(
            cwd,
            "launcher=local",
            "stage=full",
            "demo=faulty",
            "skip=[render_cache]",
            "plugins=[preflight_crash_stage]",
            "stages.checkpoint_storage.require_quota=true",
            "gate.junit=reports/gate.xml",
        )
        yield Launched(cwd, proc)
    finally:
        shutil.rmtree(cwd, ignore_errors=True)


@dataclass
class Faulty:
    """The faulty launch as the record's tests read it: its markdown record and the record read back
    from its JSON twin (the golden markdown, tests/record/test_record_golden.py, and its HTML page in a
    browser, tests/record/test_html_browser.py)."""

    cwd: Path
    proc: subprocess.CompletedProcess[str]
    markdown: Path
    record: Any


@pytest.fixture(scope="session")
def faulty(faulty_full: Launched) -> Faulty:
    from pipeline.record import history

    cwd, proc = faulty_full.cwd, faulty_full.proc
    markdown = next((cwd / "audit_logs").glob("*_audit.md"), None)
    assert markdown is not None, proc.stdout + proc.stderr
    return Faulty(cwd, proc, markdown, history.twin_record(markdown.with_suffix(".json")))


def run_dir_of(cwd: Path, proc: subprocess.CompletedProcess[str]) -> Path:
    runs = sorted((cwd / "preflight" / "runs").iterdir(), key=lambda p: p.stat().st_mtime)
    assert runs, proc.stdout + proc.stderr
    return runs[-1]


def gate_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "gate.json").read_text())


def demo_config(*overrides: str) -> DictConfig:
    """`cfg.demo` as a launch composes it from the same `demo=<variant>` / `demo.<key>=<value>` overrides
    (the shipped demo file plus the dotted overrides), so the digest the launch checks is the same."""
    from omegaconf import OmegaConf

    from pipeline.record.runfolder import CONF_DIR

    variant = next((o.split("=", 1)[1] for o in overrides if o.startswith("demo=")), "default")
    dots = [o.removeprefix("demo.") for o in overrides if o.startswith("demo.")]
    cfg = OmegaConf.merge(OmegaConf.load(CONF_DIR / "demo" / f"{variant}.yaml"), OmegaConf.from_dotlist(dots))
    assert isinstance(cfg, DictConfig)
    return cfg


class DemoCache:
    """Each embedded demo (per variant and settings) built once per session, then copied into a launch's
    `output_root/demo` before it starts, where the launch reuses it exactly as a second launch in the
    same folder would (same marker digest). A launch that wants other settings still rebuilds it, so a
    mismatch here costs time, never correctness. Tests of the build itself (tests/demo, test_wheel)
    build fresh instead."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def seed(self, cwd: Path, *overrides: str) -> Path:
        """Copy the demo that `launch(cwd, *overrides)` would build into `cwd/preflight/demo`."""
        from pipeline import demo
        from pipeline.demo.build import digest, settings

        cfg = demo_config(*overrides)
        wanted = settings(cfg)
        variant = str(wanted["variant"])
        built = self.root / f"{variant}-{digest(wanted)}"
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / f".{variant}.lock", "w") as lock:  # xdist workers share the cache: one builds
            fcntl.flock(lock, fcntl.LOCK_EX)
            demo.ensure(cfg, built)  # a no-op once built
        target = cwd / "preflight" / "demo" / variant
        if not target.exists():
            shutil.copytree(built / variant, target)
        return target


@pytest.fixture(scope="session", autouse=True)
def _session_demos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoCache]:
    """Under pytest-xdist the workers' base folders share a parent: one cache for all of them."""
    base = tmp_path_factory.getbasetemp()
    shared = os.environ.get("PYTEST_XDIST_WORKER") is not None
    cache = DemoCache(base.parent / "demo_cache" if shared else tmp_path_factory.mktemp("demo_cache"))
    build_ledger.SESSION_DEMOS = cache
    undo = build_ledger.install(lambda: LEDGER)
    yield cache
    undo()
    build_ledger.SESSION_DEMOS = None


@pytest.fixture(scope="session", autouse=True)
def _session_probe_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One container_check probe cache for the session's launches (`$PREFLIGHT_PROBE_CACHE`), each in a
    fresh folder: torch and the GL probe are measured once per session, not once per launch (~2-3 s of
    CPU each); the xdist workers share it, as jobs on many nodes share one (it is written under a lock).
    Tests of the cache itself unset it."""
    from pipeline.record.runfolder import PROBE_CACHE_ENV

    base = tmp_path_factory.getbasetemp()
    shared = os.environ.get("PYTEST_XDIST_WORKER") is not None
    path = (base.parent if shared else base) / "probe_cache.json"
    before = os.environ.get(PROBE_CACHE_ENV)
    os.environ[PROBE_CACHE_ENV] = before or str(path)
    yield Path(os.environ[PROBE_CACHE_ENV])
    if before is None:
        os.environ.pop(PROBE_CACHE_ENV, None)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before any fixture of the test is set up: its builds (module fixtures' too) are its own."""
    LEDGER.current = item.nodeid
    item.stash[_SEEN] = len(LEDGER.duplicates)


_SEEN = pytest.StashKey[int]()


@pytest.fixture(autouse=True)
def _no_duplicate_demo_build(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails the test during which a demo was built that this session had already built (see
    tests/build_ledger.py): the same settings built twice cost a build each time, and it adds up."""
    yield
    found = LEDGER.taken_since(request.node.stash.get(_SEEN, len(LEDGER.duplicates)))
    if found:
        pytest.fail(
            "a demo built twice in one session (share the session's: tests/conftest.py DemoCache):\n"
            + "\n".join(found)
        )


@pytest.fixture(scope="session")
def demo_cache(_session_demos: DemoCache) -> DemoCache:
    return _session_demos


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests on the local Slurm cluster run on one xdist worker (tests/xdist_scope.py)."""
    from tests.xdist_scope import SLURM_GROUP

    for item in items:
        if item.get_closest_marker("slurm") or "slurm" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group(SLURM_GROUP))


@pytest.fixture(autouse=True)
def _grouped_by_xdist(request: pytest.FixtureRequest) -> None:
    """A grouped test fails if xdist did not tag it: pytest 9.2 drops the tag (pytest-xdist #1386), and the
    Slurm tests then ran on both workers at once, crowding each other's jobs until they timed out."""
    node = request.node
    grouped = getattr(request.config.option, "loadgroup", False) and node.get_closest_marker("xdist_group")
    if grouped and "@" not in node.nodeid:
        pytest.fail(
            f"--dist loadgroup did not group {node.nodeid}: this pytest ({pytest.__version__}) drops "
            "pytest-xdist's group tag; install the pytest that pyproject.toml pins"
        )


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """`--dist loadgroup` splits by the scopes of tests/xdist_scope.py; any other mode is xdist's own."""
    if config.getoption("dist") != "loadgroup":
        return None
    from tests.xdist_scope import scheduler

    return scheduler(config, log)
