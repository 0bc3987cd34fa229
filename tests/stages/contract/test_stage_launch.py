"""The contract stage run as a user runs it: `python -m pipeline.launch stage=contract ...` in a scratch
directory, on the embedded demo (default clears, faulty blocks with one hard row per planted fault), on
real files, and on malformed inputs (an error row and a gate record, never only a traceback).

The faulty demo's rows are read from the session's full faulty launch (tests/conftest.py `faulty_full`,
which runs this stage on the same demo), and the real files' rows from the stage and the gate's merge run
in this process (tests/stages/contract/in_process.py): neither tests the launch, and a launch of their
own cost ~17 s each."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import FAULTY_FULL_GROUP, FAULTY_WAIVED, DemoCache, Launched, gate_of, run_dir_of
from tests.in_process_launch import launch_here
from tests.stages.contract.in_process import contract_run

PLANTED = {
    "contract.layout.permutation:observation.state": ("observation.state", "[3]", "cycles"),
    "contract.units.scale:action": ("action", "3", "matches"),
    "contract.normalization.mode:STATE": ("STATE", "q01/q99", "dataset_has_quantiles"),
    "contract.normalization.mode:ACTION": ("ACTION", "q01/q99", "dataset_has_quantiles"),
    "contract.normalization.passthrough:observation.environment_state": (
        "observation.environment_state",
        "pass this feature through",
        "stats_keys",
    ),
    "contract.health.time.order": ("timestamp", "backwards", "first_backwards_frame"),
    "contract.health.episodes.duplicates": ("episode", "5 = 20", "groups"),
    # the front camera recorded BGR, then the two keys exchanged: the BGR frames sit under `wrist`
    "contract.frames.channels:observation.images.wrist": ("observation.images.wrist", "BGR", "base"),
    "contract.frames.swapped:observation.images.front|observation.images.wrist": (
        "observation.images.front|observation.images.wrist",
        "exchanged",
        "assignment",
    ),
    # ... and the frames under the front key then recorded 3 frames late (issue 34)
    "contract.frames.lag:observation.images.front": (
        "observation.images.front",
        "lags the state by 3 frame(s) (0.300 s)",
        "bootstrap",
    ),
    # D, the env the demo's policy runs in, renders the front camera at 96 px: trained on 64
    "contract.deploy.env.input:observation.images.front": ("observation.images.front", "96x96x3", "d_keys"),
}


@pytest.fixture(scope="module")
def cwd(tmp_path_factory: pytest.TempPathFactory, demo_cache: DemoCache) -> Path:
    """One scratch folder for the module, the session's built default demo already in it."""
    folder = tmp_path_factory.mktemp("launch")
    demo_cache.seed(folder)
    return folder


def _contract(run_dir: Path) -> dict:
    return json.loads((run_dir / "stages" / "contract.json").read_text())


def test_demo_default_clears(cwd: Path) -> None:
    proc = launch_here(cwd, "launcher=local", "launcher.poll_s=0.2", "stage=contract")
    run_dir = run_dir_of(cwd, proc)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert gate_of(run_dir)["gate"] == "clear"
    result = _contract(run_dir)
    # the demo's oracle saturates its actions at +-1 and snaps its gripper: its profile, not findings
    assert not [c["id"] for c in result["checks"] if c["verdict"] not in ("match", "skipped")]
    deployed = [c for c in result["checks"] if c["id"].startswith("contract.deploy.env.")]  # D is present
    assert len(deployed) > 4 and all(c["verdict"] == "match" for c in deployed)
    pngs = [p for p in result["artifacts"].values() if p.endswith(".png")]
    assert len(pngs) == 5 and all(Path(p).read_bytes()[:4] == b"\x89PNG" for p in pngs)
    assert json.loads(Path(result["artifacts"]["profile"]).read_text())["schema"] == "preflight.profile/1"
    record = next((cwd / "audit_logs").glob(f"*{run_dir.name}_audit.md")).read_text()
    assert "ranges_action.png" in record and "Physical checks" in record
    assert "## Dataset profile" in record and "profile_plot" in record


@pytest.mark.xdist_group(FAULTY_FULL_GROUP)
def test_demo_faulty_blocks_with_one_row_per_fault(faulty_full: Launched) -> None:
    """The stage's own result (`stages/contract.json`, before the gate applies the launch's waiver)."""
    proc = faulty_full.proc
    run_dir = run_dir_of(faulty_full.cwd, proc)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    gate = gate_of(run_dir)
    assert gate["gate"] == "blocked"
    hard = {
        c["id"]: c
        for c in _contract(run_dir)["checks"]
        if c["verdict"] == "mismatch" and c["severity"] == "hard"
    }
    assert set(hard) == set(PLANTED)
    for check_id, (feature, text, evidence_key) in PLANTED.items():
        row = hard[check_id]
        assert row["feature"] == feature and text in row["message"] and evidence_key in row["evidence"]
    assert hard["contract.layout.permutation:observation.state"]["evidence"]["cycles"] == [[3, 4]]
    assert list(hard["contract.units.scale:action"]["evidence"]["matches"]) == ["3"]
    assert hard["contract.health.time.order"]["evidence"]["episodes"] == [7]
    assert hard["contract.health.episodes.duplicates"]["evidence"]["groups"] == [[5, 20]]
    front, wrist = "observation.images.front", "observation.images.wrist"
    assert hard[f"contract.frames.channels:{wrist}"]["evidence"]["base"]["fits"] == front
    assert hard[f"contract.frames.swapped:{front}|{wrist}"]["evidence"]["assignment"] == {
        front: wrist,
        wrist: front,
    }
    # every planted fault blocks the gate, but the one the faulty launch waives: the gate records it waived
    blocking = set(PLANTED) - {FAULTY_WAIVED}
    assert all(any(check_id in reason for reason in gate["reasons"]) for check_id in blocking)
    waived = [c for s in gate["stages"] for c in s["checks"] if c["verdict"] == "waived"]
    assert [c["id"] for c in waived] == [FAULTY_WAIVED]


def test_real_files(tmp_path: Path, real_data: Path) -> None:
    pour = real_data / "Bestpart-Irene__RoboPour"
    code, _, checks = contract_run(
        tmp_path,
        f"model.path={pour}",
        f"training.path={pour / 'train_config.json'}",
        f"dataset.path={real_data / 'SamueleSandrini__record-test'}",
    )
    assert code == 3, sorted(checks)
    wrist = checks[
        "contract.layout.key:observation.images.wrist"
    ]  # ACT wants a wrist camera; record has front/top
    assert (wrist["verdict"], wrist["severity"], wrist["actual"]) == ("mismatch", "hard", None)
    assert checks["contract.layout.key:observation.images.top"]["severity"] == "soft"  # 720x1280 vs 480x640
    assert checks["contract.reload.state:pre"]["verdict"] == "unverifiable"  # LFS-only safetensors not copied
    assert checks["contract.normalization.mode:STATE"]["verdict"] == "match"
    assert checks["contract.normalization.stale:action"]["verdict"] == "match"


def _bad_model(cwd: Path, name: str) -> Path:
    source = cwd / "preflight" / "demo" / "default" / "model"
    target = cwd / name
    shutil.copytree(source, target)
    return target


@pytest.mark.parametrize(
    "corrupt, expected",
    [
        ("truncate", "exceed the"),
        ("header", "header length"),
        ("json", "invalid JSON"),
        # a missing dataset path is refused at launch now (exit 2): tests/run/test_input_checks.py
    ],
)
def test_malformed_inputs_give_an_error_row_and_a_gate_record(cwd: Path, corrupt: str, expected: str) -> None:
    model = _bad_model(cwd, f"bad-{corrupt}")
    state = model / "policy_preprocessor_step_2_normalizer_processor.safetensors"
    demo = cwd / "preflight" / "demo" / "default"  # a named model turns the demo off: name all three
    overrides = [
        f"model.path={model}",
        f"training.path={demo / 'training.yaml'}",
        f"dataset.path={demo / 'dataset'}",
    ]
    if corrupt == "truncate":
        state.write_bytes(state.read_bytes()[:-16])
    elif corrupt == "header":
        state.write_bytes((10**9).to_bytes(8, "little") + state.read_bytes()[8:])
    else:
        (model / "policy_preprocessor.json").write_text('{"steps": [')
    proc = launch_here(cwd, "launcher=debug", "stage=contract", *overrides)
    run_dir = run_dir_of(cwd, proc)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert gate_of(run_dir)["gate"] == "blocked"
    checks = _contract(run_dir)["checks"]
    assert [c["verdict"] for c in checks] == ["error"] and expected in checks[0]["message"]
    assert checks[0]["evidence"]["path"] and checks[0]["evidence"]["exception"] == "InputError"
    record = next((cwd / "audit_logs").glob(f"*{run_dir.name}_audit.md")).read_text()
    assert "contract.error" in record
