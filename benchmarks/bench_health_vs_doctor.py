"""The health rows against `lerobot-doctor`, fault by fault, on the same planted copies of real datasets.

    LEROBOT_DOCTOR=/tmp/ldvenv/bin/lerobot-doctor python benchmarks/bench_health_vs_doctor.py

`lerobot-doctor` (0.2.0) lives in its own venv (`python -m venv /tmp/ldvenv &&
/tmp/ldvenv/bin/pip install lerobot-doctor==0.2.0`), never in the project's. For each planted fault of
`tests/stages/contract/health_faults.py` (both datasets, v2.1 and v3.0): what the doctor says on the
planted copy that it did not say on the clean copy (its WARN/FAIL messages, exact text: a fault it
"notices"), and whether our health row for that fault fires. Prints a table (rich) and one JSON line:
faults, noticed by the doctor, named by us, noticed by the doctor but not named by us (must be none).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from pipeline.readers.base import Contract, Feature  # noqa: E402
from pipeline.readers.dataset import read_dataset  # noqa: E402
from pipeline.stages.contract.config import ContractConfig  # noqa: E402
from pipeline.stages.contract.health import health_rows  # noqa: E402
from pipeline.stages.contract.rows import Sources  # noqa: E402
from tests.stages.contract.health_faults import DATASETS, FAULTS, planted  # noqa: E402


def doctor() -> str | None:
    return os.environ.get("LEROBOT_DOCTOR") or shutil.which("lerobot-doctor")


def doctor_says(exe: str, dataset: Path) -> set[tuple[str, str]]:
    """The doctor's WARN and FAIL messages on `dataset`, as (check, message)."""
    proc = subprocess.run([exe, "check", str(dataset), "--json"], capture_output=True, text=True, timeout=300)
    report = json.loads(proc.stdout)
    return {
        (check["name"], m["message"])
        for check in report.get("checks", [])
        for m in check.get("messages", [])
        if m.get("severity") in ("WARN", "FAIL")
    }


def our_row(dataset: Path, work: Path, row_id: str) -> str:
    model = work / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps({"chunk_size": 50, "n_obs_steps": 1}))
    a = Contract("A", "lerobot", str(model), {"observation.state": Feature("observation.state", "state")})
    c = read_dataset(str(dataset), {"rank_error": 0.001, "dynamics_rows": 1000, "health_episodes": 1000})
    rows = {r.id: r for r in health_rows(Sources(a, Contract("B", "lerobot", ""), c, ContractConfig()))}
    row = rows.get(row_id)
    return f"{row.verdict} ({row.severity})" if row else "absent"


def compare(exe: str, work: Path) -> list[dict[str, object]]:
    out = []
    for version in sorted(DATASETS):
        clean = doctor_says(exe, planted(version, "clean", work / version / "clean")[0])
        for fault, (_, row_id, _) in FAULTS.items():
            dataset, _ = planted(version, fault, work / version / fault)
            new = sorted(doctor_says(exe, dataset) - clean)
            ours = our_row(dataset, work / version / fault, row_id)
            out.append(
                {
                    "version": version,
                    "fault": fault,
                    "doctor": [m for _, m in new][:2],
                    "doctor_noticed": bool(new),
                    "row": row_id,
                    "ours": ours,
                    "named": ours.startswith("mismatch"),
                }
            )
    return out


def main() -> int:
    exe = doctor()
    if exe is None:
        print("lerobot-doctor not found: set LEROBOT_DOCTOR or put it on PATH (see this file's docstring)")
        return 2
    with tempfile.TemporaryDirectory(prefix="health-vs-doctor-") as tmp:
        results = compare(exe, Path(tmp))
    table = Table(title="planted faults: lerobot-doctor vs the contract's health rows")
    for column in ("data", "fault", "lerobot-doctor (new WARN/FAIL)", "our row", "verdict"):
        table.add_column(column, overflow="fold")
    for r in results:
        said = "; ".join(r["doctor"])[:120] or "-"  # type: ignore[arg-type]
        table.add_row(str(r["version"]), str(r["fault"]), said, str(r["row"]), str(r["ours"]))
    Console(width=200).print(table)
    missed = [f"{r['version']}:{r['fault']}" for r in results if r["doctor_noticed"] and not r["named"]]
    summary = {
        "faults": len(results),
        "doctor_noticed": sum(bool(r["doctor_noticed"]) for r in results),
        "named_by_us": sum(bool(r["named"]) for r in results),
        "doctor_only": missed,
        "us_only": [
            f"{r['version']}:{r['fault']}" for r in results if r["named"] and not r["doctor_noticed"]
        ],
    }
    print(json.dumps(summary))
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
