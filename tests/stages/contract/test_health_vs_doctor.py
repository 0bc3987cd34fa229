"""Every planted fault `lerobot-doctor` notices, the health rows name too: the comparison of
benchmarks/bench_health_vs_doctor.py, run as a test where the doctor is installed in its own venv
(LEROBOT_DOCTOR=<its executable>)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.stages.contract.health_faults import DATASETS

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_health_vs_doctor.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_health_vs_doctor", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_fault_the_doctor_notices_we_name(tmp_path: Path) -> None:
    bench = _bench()
    exe = bench.doctor()
    if exe is None:
        pytest.skip(
            "lerobot-doctor not installed (pip install lerobot-doctor==0.2.0 in a scratch venv, "
            "then LEROBOT_DOCTOR=<venv>/bin/lerobot-doctor)"
        )
    if not all(p.is_dir() for p in DATASETS.values()):
        pytest.skip(f"real LeRobot datasets not found under {next(iter(DATASETS.values())).parent}")
    results = bench.compare(exe, tmp_path)
    assert [r for r in results if r["doctor_noticed"] and not r["named"]] == []
    assert all(r["named"] for r in results)
