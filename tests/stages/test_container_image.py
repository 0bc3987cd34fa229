"""Image identity rows of container_check, on real SIF files built by siftool (tests/sif_images.py).

These call the checks in this process; the job-side proof (the checks running inside the image's root
through the apptainer stand-in, on Slurm) is in tests/test_container_standin.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pipeline.errors import ConfigError
from pipeline.readers.promotion import promotion_record, write_promotion
from pipeline.record.records import StageResult
from pipeline.stages import container_image
from tests.sif_images import build_image, sha256sum

LABELS = {"org.hpc-preflight.version": "0.1.0", "org.hpc-preflight.git-sha": "ab12" * 10}


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    return build_image(tmp_path_factory.mktemp("img"), LABELS)


@pytest.fixture()
def inside(tmp_path, monkeypatch, image):
    """A root as the job sees it inside the image: Apptainer's env variable and labels.json."""
    root = tmp_path / "root"
    (root / ".singularity.d").mkdir(parents=True)
    (root / ".singularity.d" / "labels.json").write_text(json.dumps(LABELS))
    monkeypatch.setenv("APPTAINER_CONTAINER", str(image.path))
    monkeypatch.delenv("SINGULARITY_CONTAINER", raising=False)
    return root


def cfg(image_path, **container):
    base = {
        **dict.fromkeys(("expect_sha256", "promotion_record")),
        **dict.fromkeys(("require_promotion", "require_signature"), False),
        "kind": "apptainer",
        "image": str(image_path),
        "binary": "no-apptainer-here",
        "require_labels": [],
    }
    return OmegaConf.create({"container": {**base, **container}})


def checks(config, root, run_dir=None):
    found = container_image.image_checks(config, run_dir, root=root)
    return {c.id.removeprefix("container_check."): c for c in found}, StageResult.from_checks(
        "container_check", found
    )


def test_the_promoted_image_passes_with_both_digests_and_the_inside_proof(image, inside, tmp_path):
    digest = sha256sum(image.path)
    (tmp_path / "plan.json").write_text(json.dumps({"image_sha256": digest, "image_digest": "sha256:x"}))
    config = cfg(image.path, expect_sha256=f"sha256:{digest.upper()}", require_labels=list(LABELS))
    rows, result = checks(config, inside, tmp_path)
    assert result.status == "pass", [(c.id, c.message) for c in result.checks]  # unsigned, none asked for
    verdicts = {k: r.verdict for k, r in rows.items()}
    assert verdicts.pop("image.signature") == "skipped"
    assert set(verdicts.values()) == {"match"} and len(verdicts) == 6, verdicts
    assert "container.require_signature=true" in rows["image.signature"].message
    required, _ = checks(cfg(image.path, require_signature=True), inside)
    assert required["image.signature"].blocking and required["image.signature"].actual == "unsigned"
    assert rows["image.same_as_login"].evidence["login_sha256"] == rows["image.promoted"].actual == digest
    assert rows["image.format"].evidence["partition_sha256"] == image.squashfs_sha256
    assert rows["image.inside"].evidence["labels_in_root"] == LABELS


def test_a_promotion_record_with_another_digest_is_one_hard_row(image, inside, tmp_path):
    record = promotion_record(image.path, "Ada", "2026-11-30")
    record["sha256"] = "0" * 64
    path = write_promotion(record, tmp_path / "promoted.yaml")
    rows, result = checks(cfg(image.path, promotion_record=str(path)), inside)
    bad = [c for c in result.checks if c.blocking]
    assert [c.id for c in bad] == ["container_check.image.promoted"] and result.status == "fail"
    assert "by Ada on 2026-11-30" in bad[0].message and bad[0].expected == "0" * 64


def test_missing_or_wrong_required_labels_are_hard(image, inside):
    wanted = {"org.hpc-preflight.git-sha": "ffff", "org.opencontainers.image.revision": None}
    rows, result = checks(cfg(image.path, require_labels=wanted), inside)
    row = rows["image.labels"]
    assert row.verdict == "mismatch" and row.blocking and result.status == "fail"
    assert (
        "missing label org.opencontainers.image.revision" in row.message and "expected 'ffff'" in row.message
    )


def test_an_image_unreadable_from_the_job_is_hard(tmp_path, inside):
    rows, result = checks(cfg(tmp_path / "gone.sif"), inside)
    assert list(rows) == ["image.readable"] and rows["image.readable"].blocking
    assert "not readable from this job" in rows["image.readable"].message


@pytest.mark.parametrize("kind", ["truncated", "not_sif"])
def test_truncated_or_non_sif_image_is_an_error_row(image, inside, tmp_path, kind):
    bad = tmp_path / "bad.sif"
    data = image.path.read_bytes()
    bad.write_bytes(data[: len(data) // 2] if kind == "truncated" else image.squashfs.read_bytes())
    rows, result = checks(cfg(bad), inside)
    assert (
        rows["image.format"].verdict == "error" and rows["image.format"].blocking and result.status == "error"
    )
    assert ("truncated SIF" if kind == "truncated" else "not a SIF file") in rows["image.format"].message


def test_the_node_seeing_another_file_than_the_login_node_is_hard(image, inside, tmp_path):
    (tmp_path / "plan.json").write_text(json.dumps({"image_sha256": "1" * 64}))
    rows, _ = checks(cfg(image.path), inside, tmp_path)
    assert rows["image.same_as_login"].blocking and "different file" in rows["image.same_as_login"].message


def test_a_job_outside_the_image_or_in_another_root_is_hard(image, inside, monkeypatch, tmp_path):
    (inside / ".singularity.d" / "labels.json").write_text(json.dumps({"org.hpc-preflight.version": "9"}))
    rows, _ = checks(cfg(image.path), inside)
    assert rows["image.inside"].blocking and "differs from the labels" in rows["image.inside"].message
    monkeypatch.delenv("APPTAINER_CONTAINER")
    rows, _ = checks(cfg(image.path), inside)
    assert rows["image.inside"].blocking and "outside any image" in rows["image.inside"].message


def test_signature_objects_are_reported(tmp_path, inside):
    signed = build_image(tmp_path, LABELS, name="signed.sif", signature=True)
    rows, _ = checks(cfg(signed.path, require_signature=True), inside)
    row = rows["image.signature"]
    assert row.verdict == "unverifiable" and row.evidence["signatures"][0]["hash"] == "SHA-256"


def test_pins_without_an_image_and_required_promotion_are_unverifiable(image, inside):
    rows, _ = checks(OmegaConf.create({"container": {"kind": "none", "expect_sha256": "a" * 64}}), inside)
    assert rows["image.promoted"].verdict == "unverifiable"
    rows, _ = checks(cfg(image.path, require_promotion=True), inside)
    assert rows["image.promoted"].verdict == "unverifiable"


def test_demo_faulty_plants_a_stale_promotion_record(image, inside, tmp_path, monkeypatch):
    from pipeline.demo.provider import pin_image

    config = cfg(Path(image.path).name)
    config.demo = {"faults": {"stale_promotion": True}}
    config.output_root = str(tmp_path / "out")
    monkeypatch.chdir(image.path.parent)
    container_image.prepare(config)
    pin_image(config)  # the demo provider's part: demo=faulty's planted record
    assert config.container.image == str(image.path)
    assert config.container.promotion_record == str(tmp_path / "out" / "demo" / "stale-promotion.yaml")
    _rows, result = checks(config, inside)
    assert [c.id for c in result.checks if c.blocking] == ["container_check.image.promoted"]


def test_launch_validation_names_the_key(image, tmp_path):
    with pytest.raises(ConfigError, match="container.binary: 'no-apptainer-here' is not on PATH"):
        container_image.validate(cfg(image.path))
    with pytest.raises(ConfigError, match="container.expect_sha256: expected a sha256"):
        container_image.validate(cfg(image.path, expect_sha256="abc"))
    with pytest.raises(ConfigError, match="container.promotion_record: .*file not found"):
        container_image.validate(cfg(image.path, promotion_record=str(tmp_path / "none.yaml")))
    container_image.validate(cfg(image.path, kind="none", binary=None))


def test_a_changed_pin_changes_the_fingerprint_so_a_resume_reruns_the_check(image, tmp_path):
    from pipeline.record.fingerprint import input_fingerprints

    def prints(**container):
        return input_fingerprints({"container": {"image": str(image.path), **container}}, (), {})[0]

    assert "container_pins" not in prints()
    record = write_promotion(promotion_record(image.path, "Ada", "2026-11-30"), tmp_path / "p.yaml")
    first = prints(promotion_record=str(record))
    record.write_text(record.read_text().replace("Ada", "Bob"))
    assert prints(promotion_record=str(record))["container_pins"] != first["container_pins"]
    assert (
        prints(expect_sha256="a" * 64)["container_pins"] != prints(expect_sha256="b" * 64)["container_pins"]
    )
