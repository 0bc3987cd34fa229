"""`stage=teacher_forced demo=faulty` through the launcher (local executor): the gate blocks, and the
tampered and the collapsed checkpoint each name their own reason."""

from __future__ import annotations

import json

from tests.conftest import gate_of, launch, run_dir_of
from tests.stages.teacher_forced.helpers import SMALL_OVERRIDES as SMALL


def test_faulty_demo_blocks_on_its_own_rows(tmp_path):
    proc = launch(tmp_path, "stage=teacher_forced", "demo=faulty", "launcher=local", *SMALL, timeout=900)
    run_dir = run_dir_of(tmp_path, proc)
    gate = gate_of(run_dir)
    assert proc.returncode == 3 and gate["gate"] == "blocked", proc.stdout + proc.stderr
    reasons = gate["reasons"]
    assert any(r.startswith("teacher_forced.provenance.tampered") for r in reasons), reasons
    assert any(r.startswith("teacher_forced.collapse.collapsed") for r in reasons), reasons
    assert not any(".base" in r or ".noise_injected" in r for r in reasons if "provenance" in r)
    result = json.loads((run_dir / "stages" / "teacher_forced.json").read_text())
    assert (run_dir / "artifacts" / "teacher_forced" / "per_dim_l1.png").is_file()
    assert any(c["id"] == "teacher_forced.compare.noise_injected_vs_base" for c in result["checks"])
