"""Declared against stored, planted into whole copies of real datasets: a float32 feature stored as
float64 (LeRobot casts it: soft), and the columns LeRobot reads per sample dropped from the data files
(it fails naming them: hard). The rows come from the files' footers, no row read."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from pipeline.readers.lerobot_data import LeRobotData
from pipeline.record.records import Check
from pipeline.stages.contract.health.declared import declared_rows
from tests.conftest import REAL_DATA

V21, V30 = REAL_DATA / "YifanTian07__G1-policy-train", REAL_DATA / "SamueleSandrini__record-test"
needs_real = pytest.mark.skipif(not V21.is_dir(), reason=f"real test files not present: {V21}")


def rewrite(src: Path, dest: Path, edit: Callable[[pa.Table], pa.Table]) -> Path:
    shutil.copytree(src, dest)
    for path in sorted((dest / "data").rglob("*.parquet")):
        pq.write_table(edit(pq.read_table(path)), path)
    return dest


def rows(root: Path) -> dict[str, Check]:
    data = LeRobotData(root)
    return {c.id: c for c in declared_rows(data, data.column_types())}


@needs_real
@pytest.mark.parametrize("root", [V21, V30], ids=["v2.1", "v3.0"])
def test_the_real_datasets_store_what_they_declare(root: Path) -> None:
    found = rows(root)
    assert [c.verdict for c in found.values()] == ["match", "match"]


@needs_real
def test_float64_stored_where_float32_is_declared_is_cast_soft(tmp_path: Path) -> None:
    def widen(table: pa.Table) -> pa.Table:
        i = table.schema.get_field_index("observation.state")
        column = pc.cast(table["observation.state"], pa.list_(pa.float64()))
        return table.set_column(i, "observation.state", column)

    row = rows(rewrite(V21, tmp_path / "wide", widen))["contract.health.meta.dtypes"]
    assert (row.verdict, row.severity) == ("mismatch", "soft")
    assert "observation.state stored float64, declared float32" in row.message
    assert "casts them" in row.message


@needs_real
@pytest.mark.parametrize("root", [V21, V30], ids=["v2.1", "v3.0"])
def test_missing_index_and_task_index_fail_naming_the_keys(root: Path, tmp_path: Path) -> None:
    copy = rewrite(root, tmp_path / "bare", lambda t: t.drop_columns(["index", "task_index"]))
    info = json.loads((copy / "meta/info.json").read_text())
    for key in ("index", "task_index"):  # as the real dataset of the report: not declared either
        info["features"].pop(key)
    (copy / "meta/info.json").write_text(json.dumps(info))
    row = rows(copy)["contract.health.meta.required"]
    assert (row.verdict, row.severity) == ("mismatch", "hard")
    assert row.evidence["missing"] == ["index", "task_index"]
    assert "item['index']" in row.message and "fails" in row.message
