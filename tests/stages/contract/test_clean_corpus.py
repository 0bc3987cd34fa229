"""Clean data comes out clean: every real dataset the contract stage reads, and the embedded demo, each
checked alone as a user checks a freshly recorded dataset (`stage=contract dataset.path=<dataset>`, no
model), and the demo also with its own model. No row other than `match` or `skipped`, except the three
true findings of our copies, which must still be found exactly:

- our copies keep no mp4 files: the frames rows (`frames.unavailable`, `health.videos`) are unverifiable
  on the LeRobot datasets whose cameras have no videos here;
- rerun's v3.0 test asset is truncated (`layout.frames:dataset`: info.json says 14983 frames, 899 kept);
- open_50 ships a std that float32 cancellation broke (`normalization.stale`, with its diagnosis).

The datasets are found from `MANIFEST.tsv`: every LeRobot folder with its data files, every robomimic /
robosuite HDF5 file, every folder of `.npz` episodes. rerun's v2.0 and v2.1 copies keep metadata only (no
data file): they are checked on their own, for the same truncation and rows that say what the copy lacks.
Run in-process, no Slurm.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from pipeline.record.records import Check
from pipeline.stages.contract import load_sources, reconcile
from tests.conftest import REAL_DATA, DemoCache
from tests.stages.contract.helpers import STAGE_CFG

MANIFEST = REAL_DATA / "MANIFEST.tsv"
NO_VIDEOS = ("contract.frames.unavailable", "contract.health.videos")
TRUNCATED = "rerun-io__rerun/tests/assets/lerobot/v30_apple_storage"
OPEN_50 = "yipiandanxinxiangyangkai__open_50"
# open_50's shipped std, dim by dim: float32 cancellation, and one dim where only the std is off
OPEN_50_STALE = {
    "contract.normalization.stale:actions": {4: "float32_cancellation", 6: "std_only"},
    "contract.normalization.stale:state": {2: "float32_cancellation", 4: "float32_cancellation"},
}


def corpus() -> list[str]:
    """Each dataset the contract stage reads, as a path relative to the real-data folder."""
    if not MANIFEST.is_file():
        return []
    paths = [line.split("\t")[-1].strip().removeprefix("./") for line in MANIFEST.read_text().splitlines()]
    found = set()
    for path in paths:
        if path.endswith("/meta/info.json"):
            root = path.removesuffix("/meta/info.json")
            if any(p.startswith(f"{root}/data/") and p.endswith(".parquet") for p in paths):
                found.add(root)
        elif path.endswith((".hdf5", ".h5")):
            found.add(path)
        elif path.endswith(".npz"):
            found.add(str(Path(path).parent))
    return sorted(found)


DATASETS = corpus()
needs_real = pytest.mark.skipif(not DATASETS, reason=f"real test files not present: {MANIFEST}")


def rows_of(overrides: dict[str, Any]) -> list[Check]:
    """The contract stage's rows for these inputs, as a launch's job computes them (in-process)."""
    a, b, c, extra = load_sources(OmegaConf.create(overrides), STAGE_CFG)
    checks, _ = reconcile(a, b, c, STAGE_CFG)
    return checks + extra


def kept(name: str, check: Check) -> bool:
    """One of the three true findings of our copies."""
    if check.id in NO_VIDEOS:
        return check.verdict == "unverifiable" and not (REAL_DATA / name / "videos").exists()
    if check.id == "contract.layout.frames:dataset":
        return name == TRUNCATED and "metadata says 14983, data holds 899" in check.message
    if check.id in OPEN_50_STALE and name == OPEN_50:
        return {int(d): v["cause"] for d, v in check.evidence["diagnosis"].items()} == OPEN_50_STALE[check.id]
    return False


def findings(name: str, checks: list[Check]) -> list[str]:
    return [
        f"{c.id} [{c.verdict}/{c.severity}]: {c.message[:300]}"
        for c in checks
        if c.verdict not in ("match", "skipped") and not kept(name, c)
    ]


@needs_real
def test_the_corpus_holds_every_format_the_stage_reads() -> None:
    """The discovery cannot quietly find less: LeRobot v2.1 and v3.0, robosuite HDF5, npz episodes."""
    assert {OPEN_50, TRUNCATED, "SamueleSandrini__record-test", "YifanTian07__G1-policy-train"} <= set(
        DATASETS
    )
    assert sum(d.endswith(".hdf5") for d in DATASETS) == 4
    assert any("hybrid-rl" in d for d in DATASETS)


@needs_real
@pytest.mark.parametrize("name", DATASETS)
def test_a_clean_real_dataset_alone_has_only_its_true_findings(name: str) -> None:
    checks = rows_of({"dataset": {"path": str(REAL_DATA / name)}})
    assert not findings(name, checks), "\n".join(findings(name, checks))
    if not name.endswith((".hdf5", ".h5")) and "hybrid-rl" not in name:
        return
    # a robomimic/robosuite file and the npz episodes are clear: nothing blocks, nothing is unverifiable
    assert not [c.id for c in checks if c.blocking or c.verdict == "unverifiable"]
    skipped = {c.id: c for c in checks if c.verdict == "skipped"}
    assert "carries no per-row timestamps by design" in skipped["contract.health.time.order"].message
    assert "by design" in skipped["contract.health.episodes.lengths"].message


@needs_real
def test_the_true_findings_are_still_found() -> None:
    truncated = {c.id: c for c in rows_of({"dataset": {"path": str(REAL_DATA / TRUNCATED)}})}
    assert kept(TRUNCATED, truncated["contract.layout.frames:dataset"])
    assert truncated["contract.layout.frames:dataset"].blocking
    stale = {c.id: c for c in rows_of({"dataset": {"path": str(REAL_DATA / OPEN_50)}})}
    for row_id in OPEN_50_STALE:
        assert stale[row_id].blocking and kept(OPEN_50, stale[row_id]), stale[row_id].message
    assert "recomputing the stats in float64 fixes it" in stale["contract.normalization.stale:state"].message


@needs_real
@pytest.mark.parametrize("name", ["apple_storage", "v21_apple_storage"])
def test_a_metadata_only_copy_says_what_it_lacks_and_still_finds_the_truncation(name: str) -> None:
    checks = rows_of({"dataset": {"path": str(REAL_DATA / "rerun-io__rerun/tests/assets/lerobot" / name)}})
    left = {c.id: c for c in checks if c.verdict not in ("match", "skipped")}
    truncated = left.pop("contract.layout.frames:dataset")
    assert truncated.blocking and "14983" in truncated.message and "no data files" in truncated.message
    assert left.pop("contract.frames.unavailable").verdict == "unverifiable"
    for row_id in (
        "contract.health.meta.columns",
        "contract.health.meta.tasks",
    ):  # never "absent from the data"
        row = left.pop(row_id)
        assert (row.verdict, row.severity) == ("unverifiable", "soft") and "no data file under" in row.message
    assert not left, list(left)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, demo_cache: DemoCache) -> Path:
    return demo_cache.seed(tmp_path_factory.mktemp("clean_corpus"))


@pytest.mark.parametrize("with_model", [False, True], ids=["alone", "with_its_model"])
def test_the_clean_demo_has_only_match_or_skipped_rows(demo: Path, with_model: bool) -> None:
    inputs: dict[str, Any] = {"dataset": {"path": str(demo / "dataset")}}
    if with_model:
        inputs |= {"model": {"path": str(demo / "model")}, "training": {"path": str(demo / "training.yaml")}}
    checks = rows_of(inputs)
    assert len(checks) > 40  # the whole stage ran
    assert not findings("demo", checks), "\n".join(findings("demo", checks))
