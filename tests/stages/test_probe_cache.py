"""container_check's node probes are measured once per host, image and software and reused by digest:
a changed environment (another installed torch, another image) is measured again, a failed probe is
never kept, a cache that is not ours is ignored, and the result is never taken from the audit history."""

from __future__ import annotations

import json
import sys

import pytest
from omegaconf import OmegaConf

from pipeline.record.fingerprint import environment_digest
from pipeline.record.runfolder import PROBE_CACHE_ENV, RunFolder, probe_cache_file
from pipeline.run.plan import from_history
from pipeline.stages import StageContext, probe_cache
from pipeline.stages.config import typed
from pipeline.stages.container_check import ContainerCheckConfig, run


class Counter:
    """A measurement that counts how often it was taken (the probe itself is what is being avoided)."""

    def __init__(self, ok: bool = True) -> None:
        self.calls, self.ok = 0, ok

    def __call__(self) -> tuple[dict, bool]:
        self.calls += 1
        return {"count": self.calls}, self.ok


def test_a_measurement_is_kept_under_its_digest_and_reused(tmp_path):
    cache, measure = tmp_path / "probe_cache.json", Counter()
    first = probe_cache.probed(cache, "sha256:a", measure)
    again = probe_cache.probed(cache, "sha256:a", measure)
    other = probe_cache.probed(cache, "sha256:b", measure)
    assert (first.reused, again.reused, other.reused) == (False, True, False)
    assert again.facts == first.facts and again.measured_at == first.measured_at
    assert measure.calls == 2 and "reused" in again.note() and not first.note()
    forced = probe_cache.probed(cache, "sha256:a", measure, reuse=False)
    assert not forced.reused and measure.calls == 3


def test_a_failed_probe_is_not_kept(tmp_path):
    cache, measure = tmp_path / "probe_cache.json", Counter(ok=False)
    probe_cache.probed(cache, "sha256:a", measure)
    assert not probe_cache.probed(cache, "sha256:a", measure).reused and measure.calls == 2


@pytest.mark.parametrize(
    "text",
    ["{not json", "[]", '{"schema": "other", "entries": {}}', "x" * (probe_cache.MAX_BYTES + 1)],
)
def test_a_cache_that_is_not_ours_is_measured_again_and_rewritten(tmp_path, text):
    cache, measure = tmp_path / "probe_cache.json", Counter()
    cache.write_text(text)
    assert not probe_cache.probed(cache, "sha256:a", measure).reused
    assert probe_cache.probed(cache, "sha256:a", measure).reused and measure.calls == 1


def test_an_entry_of_the_wrong_shape_is_ignored(tmp_path):
    cache, measure = tmp_path / "probe_cache.json", Counter()
    bad = {"sha256:a": {"facts": "gpu", "measured_at": "now"}}
    cache.write_text(json.dumps({"schema": probe_cache.SCHEMA, "entries": bad}))
    assert not probe_cache.probed(cache, "sha256:a", measure).reused


def test_another_image_or_another_installed_torch_is_another_digest(tmp_path, monkeypatch):
    """The software part is every installed distribution: a torch of another version on the path (a
    real dist-info folder, as pip leaves one) changes the digest, as another image digest does."""
    before = probe_cache.probe_digest("cuda", "sha256:image-1")
    assert probe_cache.probe_digest("cuda", "sha256:image-1") == before
    assert probe_cache.probe_digest("cuda", "sha256:image-2") != before
    assert probe_cache.probe_digest("gl", "sha256:image-1") != before
    info = tmp_path / "site" / "torch-0.0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 0.0.1\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    environment_digest.cache_clear()
    try:
        assert probe_cache.probe_digest("cuda", "sha256:image-1") != before
    finally:
        monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(tmp_path / "site")])
        environment_digest.cache_clear()
    assert probe_cache.probe_digest("cuda", "sha256:image-1") == before


def _run(tmp_path, image: str):
    folder = RunFolder(tmp_path / "runs" / image.replace(":", "-"))
    folder.write_plan({"jobs": {}, "image_digest": image})
    cfg = OmegaConf.create(
        {
            "output_root": str(tmp_path),
            "run_dir": str(folder.root),
            "audit_dir": str(tmp_path / "audit"),
            "checkpoint_dir": str(tmp_path / "ckpt"),
        }
    )
    config = typed(ContainerCheckConfig, {}, "stages.container_check")
    result = run(cfg, StageContext(run_dir=folder.root, stage="container_check", config=config))
    return {c.feature: c for c in result.checks}


@pytest.mark.render
def test_container_check_reuses_its_probes_until_the_image_changes(tmp_path, monkeypatch):
    monkeypatch.delenv(PROBE_CACHE_ENV, raising=False)  # the output root's own file (the suite shares one)
    first = _run(tmp_path, "sha256:image-1")
    again = _run(tmp_path, "sha256:image-1")
    other = _run(tmp_path, "sha256:image-2")
    for row in ("cuda", "gl_renderer"):
        assert not first[row].evidence["probe"]["reused"]
        assert again[row].evidence["probe"]["reused"] and "reused" in again[row].message
        assert again[row].evidence["probe"]["measured_at"] == first[row].evidence["probe"]["measured_at"]
        assert again[row].verdict == first[row].verdict and again[row].actual == first[row].actual
        assert not other[row].evidence["probe"]["reused"]
    assert probe_cache_file(tmp_path) == tmp_path / "probe_cache.json"
    assert probe_cache_file(tmp_path).is_file()
    assert not any("probe" in c.evidence for name, c in again.items() if name not in ("cuda", "gl_renderer"))


def test_container_check_is_never_taken_from_the_audit_history(tmp_path):
    """Its rows (the training runtime's among them) hold for the node and the moment they were measured:
    the history never stands in for them, whatever its fingerprints say."""
    cfg = OmegaConf.create({"audit_dir": str(tmp_path), "run_id": "r1", "reuse": "history"})
    assert from_history(cfg, "container_check", {"config": "sha256:x"}) is None


def test_one_probe_cache_for_every_output_root_where_the_environment_names_it(tmp_path, monkeypatch):
    monkeypatch.setenv(PROBE_CACHE_ENV, str(tmp_path / "shared.json"))
    assert probe_cache_file(tmp_path / "a") == probe_cache_file(tmp_path / "b") == tmp_path / "shared.json"
