"""`pip install .` (not editable) into a fresh venv, then `python -m pipeline.launch stage=full` from an
empty folder outside the repo: the shipped configs and schemas travel inside the wheel and the demo
builds itself under output_root, so a cluster image or a user's venv needs nothing from the checkout.

To avoid reinstalling torch & co., the fresh venv sees this venv's site-packages through one `.pth`
line; `.pth` files inside that folder are not processed from there, so this checkout's editable install
does not leak in (asserted: `pipeline` imports from the fresh venv).

The full run uses a small demo (4 episodes of 60 steps, a narrower policy; it clears as the full-size
one does), the render_cache stage's tiny demo sizes (as its own launch tests do), 3 smoke steps and one
pair of twins (no second pair under the job's environment: the same trainer again, which the
determinism tests cover): what the wheel must prove is that every stage runs from the install, not how
big the demo is.
"""

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = {"preflight-launch": "pipeline.launch:cli", "preflight-status": "pipeline.status:main"}
SMALL = (  # a small demo, the render_cache launch tests' tiny one (their local run clears with it), 3 steps
    "demo.episodes=4",
    "demo.steps=60",
    "demo.train_steps=150",
    "demo.hidden=32",
    "demo.seed=3",
    "demo.render_cache.episodes=2",
    "demo.render_cache.steps=4",
    "demo.render_cache.budgets=[1,2]",
    "demo.render_cache.hires=0",
    "demo.render_cache.raw_frames=0",
    "stages.determinism.steps=3",
    "stages.determinism.job_pair=false",
    "launcher.poll_s=0.2",
)


def run(*argv, **kwargs) -> subprocess.CompletedProcess[str]:
    kwargs.setdefault("env", clean_env())
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=False, **kwargs)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def fresh_python(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("wheel")
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", root, REPO)
    (wheel,) = root.glob("hpc_preflight-*.whl")
    run(sys.executable, "-m", "venv", "--without-pip", root / "venv")
    python = root / "venv" / "bin" / "python"
    run(sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index", wheel)
    site = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip()
    (Path(site) / "_preflight_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def clean_env(**extra: str) -> dict[str, str]:
    """No PYTHONPATH: a checkout on it (with the egg-info the wheel build leaves) would make pip think the
    package is already installed and skip the wheel, and would let `pipeline` import from the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, "COLUMNS": "200", **extra}


def test_wheel_ships_configs_and_schemas(fresh_python, tmp_path):
    code = (
        "import pipeline, pipeline.launch, pipeline.record.records as r, pipeline.record.runfolder as f; "
        "print(pipeline.__file__); print(r.SCHEMA_PATH.is_file(), (f.CONF_DIR / 'config.yaml').is_file())"
    )
    out = run(fresh_python, "-c", code, cwd=tmp_path, env=clean_env()).stdout.split()
    assert Path(out[0]).is_relative_to(fresh_python.parents[1]), out
    assert out[1:] == ["True", "True"]


def test_wheel_carries_every_file_of_the_package(fresh_python, tmp_path):
    """Every module and data file of the checkout's pipeline/ is in the install (a new data file left
    out of package-data fails here, not only in whichever stage reads it)."""
    installed = Path(out_of(fresh_python, "import pipeline; print(pipeline.__file__)", tmp_path)).parent
    shipped = {p.relative_to(installed).as_posix() for p in package_files(installed)}
    assert {p.relative_to(REPO / "pipeline").as_posix() for p in package_files(REPO / "pipeline")} <= shipped


def package_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts]


def out_of(python: Path, code: str, cwd: Path) -> str:
    return run(python, "-c", code, cwd=cwd, env=clean_env()).stdout.strip()


def test_wheel_install_clears_the_demo_from_an_empty_folder(fresh_python, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    env = clean_env(PREFLIGHT_OUTPUT_ROOT=str(tmp_path / "out"))
    proc = subprocess.run(
        [str(fresh_python), "-m", "pipeline.launch", "stage=full", "launcher=local", *SMALL],
        cwd=empty,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    (gate_file,) = (tmp_path / "out" / "runs").glob("*/gate.json")
    gate = json.loads(gate_file.read_text())
    assert gate["gate"] == "clear"
    assert {s["stage"] for s in gate["stages"]} >= {"container_check", "contract", "determinism"}
    assert (tmp_path / "out" / "demo").is_dir() and (empty / "audit_logs" / "timeline.md").is_file()
    pages = list((empty / "audit_logs").glob("*_audit.html"))  # rendered from the templates in the wheel
    assert len(pages) == 1 and (empty / "audit_logs" / "index.html").is_file()


# The console scripts the README names, as pip installs them from the wheel: `preflight-launch` (a Hydra
# main, so overrides must pass through) and `preflight-status`.
def test_the_wheel_declares_the_entry_points(fresh_python: Path) -> None:
    code = (
        "import importlib.metadata as m, json; "
        "print(json.dumps({e.name: e.value for e in m.entry_points(group='console_scripts')}))"
    )
    out = json.loads(run(fresh_python, "-c", code, env=clean_env()).stdout)
    assert {k: v for k, v in out.items() if k.startswith("preflight-")} == SCRIPTS


def test_console_scripts_take_overrides_and_arguments(fresh_python: Path, tmp_path: Path) -> None:
    bin_dir = fresh_python.parent
    env = clean_env(PREFLIGHT_OUTPUT_ROOT=str(tmp_path / "out"))
    launch = subprocess.run(
        [str(bin_dir / "preflight-launch"), "stage=full", "dry_run=true", "~demo", "launcher=slurm"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert launch.returncode == 0, launch.stdout[-2000:] + launch.stderr[-2000:]
    assert "#SBATCH --dependency=afterany:" in launch.stdout and "dry run: nothing submitted" in launch.stdout
    status = subprocess.run(
        [str(bin_dir / "preflight-status"), "no-such-run"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert status.returncode == 2 and status.stderr.startswith("status: "), status.stderr
