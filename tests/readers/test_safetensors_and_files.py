"""Safe file access: safetensors headers validated by hand, JSON/YAML errors naming file and field,
manifest paths kept inside their root."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from pipeline.errors import InputError
from pipeline.readers.base import inside, read_json, read_safetensors, read_yaml, safetensors_header


def _tensor_file(tmp_path: Path) -> Path:
    path = tmp_path / "t.safetensors"
    save_file({"a.mean": np.arange(4, dtype=np.float32), "a.std": np.ones(4, dtype=np.float32)}, str(path))
    return path


def test_round_trip(tmp_path: Path) -> None:
    out = read_safetensors(_tensor_file(tmp_path))
    assert sorted(out) == ["a.mean", "a.std"]
    assert out["a.mean"].tolist() == [0, 1, 2, 3]


def test_truncated_file(tmp_path: Path) -> None:
    path = _tensor_file(tmp_path)
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(InputError, match="exceed the .*data section") as info:
        read_safetensors(path)
    assert info.value.path == str(path)


def test_header_length_larger_than_file(tmp_path: Path) -> None:
    path = tmp_path / "big.safetensors"
    path.write_bytes(struct.pack("<Q", 10_000) + b"{}")
    with pytest.raises(InputError, match="header length 10000 is larger than the file"):
        safetensors_header(path)


def test_too_short_and_bad_header_json(tmp_path: Path) -> None:
    short = tmp_path / "short.safetensors"
    short.write_bytes(b"\x01\x02")
    with pytest.raises(InputError, match="too short"):
        safetensors_header(short)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(struct.pack("<Q", 5) + b"{nope")
    with pytest.raises(InputError, match="not valid JSON"):
        safetensors_header(bad)


def test_shape_that_does_not_fit_its_bytes(tmp_path: Path) -> None:
    header = json.dumps({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}).encode()
    path = tmp_path / "shape.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\x00" * 8)
    with pytest.raises(InputError, match="does not fit"):
        read_safetensors(path)


def test_json_and_yaml_errors_name_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "info.json"
    bad.write_text('{"codebase_version": "v3.0",\n "features": }')
    with pytest.raises(InputError, match=r"info.json: invalid JSON at line 2") as info:
        read_json(bad, "LeRobot meta/info.json")
    assert info.value.field == "line 2"
    with pytest.raises(InputError, match="file not found"):
        read_json(tmp_path / "missing.json")
    yml = tmp_path / "t.yaml"
    yml.write_text("policy: [unclosed\n")
    with pytest.raises(InputError, match="invalid YAML"):
        read_yaml(yml)


def test_paths_cannot_escape_root(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    assert inside(tmp_path / "root", "a/b.parquet") == (tmp_path / "root" / "a" / "b.parquet").resolve()
    with pytest.raises(InputError, match="outside the dataset root"):
        inside(tmp_path / "root", "../etc/passwd")
    with pytest.raises(InputError, match="outside the dataset root"):
        inside(tmp_path / "root", "/etc/passwd")
    (tmp_path / "root" / "link").symlink_to(tmp_path)
    with pytest.raises(InputError, match="outside the dataset root"):
        inside(tmp_path / "root", "link/x")


def test_real_v1_safetensors(real_data: Path) -> None:
    """LeRobot v1 test data: flat `<feature>/<stat>` keys; episode index `from`/`to` (checked by hand)."""
    base = real_data / "huggingface__lerobot" / "tests" / "data"
    stats = read_safetensors(base / "pusht" / "meta_data" / "stats.safetensors")
    assert stats["observation.state/mean"].shape == (2,)
    assert stats["observation.image/mean"].shape == (3, 1, 1)
    assert stats["action/max"].tolist() == [511.0, 511.0]
    index = read_safetensors(base / "pusht" / "meta_data" / "episode_data_index.safetensors")
    assert sorted(index) == ["from", "to"] and index["from"].shape == (206,)
    assert read_json(base / "pusht" / "meta_data" / "info.json") == {"fps": 10}
