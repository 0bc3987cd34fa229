"""A demo folder's marker (`demo.json`, written last by a finished build) that this build did not write
is not trusted: the demo is built again, never a traceback and never a path outside the folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.demo.marker import MARKER, built_paths, digest

CFG = {"variant": "default", "seed": 0}


def write(target: Path, data: object) -> None:
    target.mkdir(parents=True, exist_ok=True)
    (target / MARKER).write_text(json.dumps(data))


def test_a_marker_this_build_wrote_gives_the_paths(tmp_path):
    write(tmp_path, {"digest": digest(CFG), "paths": {"dataset": "dataset", "model": "model"}})
    assert built_paths(tmp_path, CFG) == {
        "dataset": str(tmp_path / "dataset"),
        "model": str(tmp_path / "model"),
    }


@pytest.mark.parametrize(
    "data",
    [
        ["not", "an", "object"],
        {"digest": "x"},  # no paths
        {"paths": {"model": "model"}},  # no digest
        {"digest": "DIGEST", "paths": ["model"]},
        {"digest": "DIGEST", "paths": {"model": 3}},
        {"digest": "DIGEST", "paths": {"model": "../../etc"}},
    ],
)
def test_a_marker_this_build_did_not_write_means_build_again(tmp_path, data):
    if isinstance(data, dict) and data.get("digest") == "DIGEST":
        data = {**data, "digest": digest(CFG)}
    write(tmp_path, data)
    assert built_paths(tmp_path, CFG) is None
