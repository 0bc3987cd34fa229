"""The SIF reader against real SIF files built by siftool from a busybox squashfs (tests/sif_images.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pipeline.errors import InputError
from pipeline.images import main as sif_cli
from pipeline.readers.promotion import promotion_record, read_promotion, write_promotion
from pipeline.readers.sif import DESCRIPTOR, listing, partition_sha256, read_sif, sha256_file
from tests.sif_images import build_image, sha256sum, siftool_list

LABELS = {"org.hpc-preflight.version": "0.1.0", "org.hpc-preflight.git-sha": "0123abcd" * 5}


@pytest.fixture(scope="module")
def signed(tmp_path_factory):
    return build_image(tmp_path_factory.mktemp("sif"), LABELS, signature=True)


def test_listing_matches_siftool_list_for_every_object(signed):
    image = read_sif(signed.path)
    assert listing(image) == siftool_list(signed.path)
    assert [o.type_name for o in image.objects] == ["Def.FILE", "JSON.Generic", "FS", "Signature"]
    assert len(image.signatures) == 1 and image.signatures[0].hash_type == "SHA-256"
    assert image.signatures[0].entity == "433FE984155206BD962725E20E8713472A879943"


def test_labels_and_deffile_round_trip_through_inspect_metadata(signed):
    image = read_sif(signed.path)
    assert image.labels() == LABELS
    attrs = image.attributes()
    assert attrs["deffile"].startswith("Bootstrap: scratch")
    assert attrs["helpfile"] == "Runs the preflight stage jobs.\n"


def test_primary_partition_and_its_hash_equal_the_squashfs(signed):
    image = read_sif(signed.path)
    part = image.primary_partition
    assert (part.fs, part.part_type, part.arch, image.arch) == ("Squashfs", "*System", "amd64", "amd64")
    assert part.size == signed.squashfs.stat().st_size
    assert partition_sha256(image) == signed.squashfs_sha256 == sha256sum(signed.squashfs)
    assert sha256_file(signed.path) == sha256sum(signed.path)


def test_truncated_sif_names_the_offset_and_what_was_expected(signed, tmp_path):
    data = signed.path.read_bytes()
    cases = {
        "header": (data[:100], "expected the 128-byte SIF global header at offset 0, found 100 bytes"),
        "descriptor": (data[: 4096 + 2 * DESCRIPTOR.size + 10], "descriptor 2 (585 bytes) at offset 5266"),
        "data": (data[:-5000], "expects data at bytes"),
    }
    for name, (cut, expected) in cases.items():
        path = tmp_path / f"{name}.sif"
        path.write_bytes(cut)
        with pytest.raises(InputError, match="truncated SIF") as err:
            read_sif(path)
        assert expected in str(err.value) and str(path) in str(err.value), name


def test_non_sif_file_is_a_clear_error(tmp_path):
    path = tmp_path / "image.sif"
    path.write_bytes(b"#!/bin/sh\n" + b"\0" * 300)
    with pytest.raises(InputError, match="not a SIF file: expected 'SIF_MAGIC' at offset 32"):
        read_sif(path)


def test_malformed_inspect_metadata_names_the_object(tmp_path):
    from tests.sif_images import _run

    built = build_image(tmp_path, LABELS)
    broken = tmp_path / "inspect-metadata.json"
    broken.write_text("{not json")
    _run("siftool", "del", "2", built.path)
    _run("siftool", "add", built.path, broken, "--datatype", "6", "--filename", "inspect-metadata.json")
    with pytest.raises(InputError, match="inspect-metadata.json.*expected JSON"):
        read_sif(built.path).labels()


def test_promotion_record_round_trip_and_cli(signed, tmp_path, capsys):
    record = promotion_record(signed.path, "Ada <ada@lab>", "2026-12-01")
    path = write_promotion(record, tmp_path / "promoted.yaml")
    back = read_promotion(path)
    assert (
        back["sha256"] == sha256sum(signed.path)
        and back["labels"] == LABELS
        and back["who"] == "Ada <ada@lab>"
    )
    assert sif_cli(["inspect", str(signed.path)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["partition_sha256"] == signed.squashfs_sha256 and shown["labels"] == LABELS
    out = subprocess.run(
        [sys.executable, "-m", "pipeline.images", "list", str(signed.path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "FS (Squashfs/*System/amd64)" in out


def test_bad_promotion_record_names_the_field(tmp_path):
    path = tmp_path / "promoted.yaml"
    path.write_text("image: /x.sif\nsha256: nothex\ndate: 2026-12-01\nwho: me\n")
    with pytest.raises(InputError, match="sha256: expected a sha256"):
        read_promotion(path)
    path.write_text("image: /x.sif\nsha256: " + "a" * 64 + "\n")
    with pytest.raises(InputError, match="misses date, who"):
        read_promotion(path)


@pytest.mark.apptainer
def test_real_apptainer_reads_the_same_labels_and_runs_in_the_image(signed):
    """Only where real Apptainer is installed (not on this project's CI machine)."""
    import shutil

    binary = shutil.which("apptainer") or shutil.which("singularity")
    if binary is None:
        pytest.skip(
            "needs the apptainer (or singularity) binary; tests/test_container_standin.py uses a stand-in"
        )
    shown = subprocess.run(
        [binary, "inspect", "--json", "--labels", str(signed.path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert json.loads(shown)["data"]["attributes"]["labels"] == read_sif(signed.path).labels()
    out = subprocess.run(
        [binary, "exec", str(signed.path), "cat", "/etc/image-id"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert out.strip() == signed.image_id
