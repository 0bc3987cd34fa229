"""teacher_forced on `demo=faulty` through the launcher (local executor): the gate blocks, and the
tampered and the collapsed checkpoint each name their own reason."""

from __future__ import annotations

import json

import pytest

from tests.conftest import FAULTY_FULL_GROUP, Launched, gate_of, run_dir_of
from tests.in_process_launch import launch_here


@pytest.mark.xdist_group(FAULTY_FULL_GROUP)
def test_faulty_demo_blocks_on_its_own_rows(faulty_full: Launched):
    """Read from the session's full faulty launch (tests/conftest.py `faulty_full`, the golden record's),
    which runs this stage on the faulty demo through the launcher: a launch of its own built a second
    (small) faulty demo and trained its models for the same rows."""
    proc = faulty_full.proc
    run_dir = run_dir_of(faulty_full.cwd, proc)
    gate = gate_of(run_dir)
    assert proc.returncode == 3 and gate["gate"] == "blocked", proc.stdout + proc.stderr
    reasons = gate["reasons"]
    assert any(r.startswith("teacher_forced.provenance.tampered") for r in reasons), reasons
    assert any(r.startswith("teacher_forced.collapse.collapsed") for r in reasons), reasons
    assert not any(".base" in r or ".noise_injected" in r for r in reasons if "provenance" in r)
    result = json.loads((run_dir / "stages" / "teacher_forced.json").read_text())
    assert (run_dir / "artifacts" / "teacher_forced" / "per_dim_l1.png").is_file()
    assert any(c["id"] == "teacher_forced.compare.noise_injected_vs_base" for c in result["checks"])


def test_a_config_type_that_is_a_list_is_an_error_row_not_a_launch_traceback(tmp_path, real_data):
    """model.path's config.json with `type: ["act"]`: the loader lookup was `kind in frozenset` at
    launch (TypeError: unhashable, exit 1 with a traceback); now the stage's error row names the file,
    the field and the value, and the gate blocks."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(real_data / "lerobot-0.4.4" / "act" / "pretrained_model", model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps(config | {"type": ["act"]}))
    dataset = real_data / "SamueleSandrini__record-test"
    proc = launch_here(
        tmp_path,
        "stage=teacher_forced",
        "launcher=local",
        "~demo",
        f"model.path={model}",
        f"dataset.path={dataset}",
    )
    assert proc.returncode == 3 and "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    result = json.loads((run_dir_of(tmp_path, proc) / "stages" / "teacher_forced.json").read_text())
    (row,) = [c for c in result["checks"] if c["verdict"] == "error"]
    assert "config.json" in row["message"] and "field 'type' is ['act']" in row["message"], row
    assert (
        "expected a policy type name" in row["message"]
        and gate_of(run_dir_of(tmp_path, proc))["gate"] == "blocked"
    )
