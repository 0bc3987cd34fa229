"""How readers open files (pipeline.storage.files): regular files only, metadata capped, YAML bounded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline.errors import InputError
from pipeline.readers.base import read_json, read_jsonl, read_yaml
from pipeline.storage.files import MAX_DEPTH, expanded_size, load_yaml

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(9)
)


def test_yaml_bomb_is_refused_before_it_is_built(tmp_path: Path) -> None:
    path = tmp_path / "train.yaml"
    path.write_text(BOMB)
    with pytest.raises(InputError, match="train.yaml: invalid YAML .*expand to more than") as info:
        load_yaml(path, "a training config")
    assert info.value.field == "train.yaml"


def test_a_few_aliases_are_fine(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text("base: &b {lr: 0.1, steps: [1, 2, 3]}\nrun1: *b\nrun2: {<<: *b, lr: 0.2}\n")
    data = read_yaml(path)
    assert data["run1"] == data["base"] and data["run2"]["lr"] == 0.2


def test_expanded_size_counts_shared_nodes_once_per_use() -> None:
    import yaml

    node = yaml.compose("a: &a [1, 2]\nb: [*a, *a]\n")
    # the map, key a, list a (1 + 2 items), key b, list b (1 + two expanded copies of list a)
    assert expanded_size(node) == 1 + 1 + 3 + 1 + (1 + 3 + 3)


def test_deep_yaml_and_json_are_named(tmp_path: Path) -> None:
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5) + "\n")
    with pytest.raises(InputError, match=f"deep.yaml: invalid YAML .*more than {MAX_DEPTH} levels"):
        read_yaml(deep)
    js = tmp_path / "deep.json"
    js.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(InputError, match="deep.json: JSON nested too deep"):
        read_json(js)


def test_dates_stay_text(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text("good: 2026-01-02\nbad: 2026-13-45\n")
    assert read_yaml(path) == {"good": "2026-01-02", "bad": "2026-13-45"}


def test_fifo_directory_and_oversized_files_are_not_opened(tmp_path: Path) -> None:
    pipe = tmp_path / "info.json"
    os.mkfifo(pipe)
    with pytest.raises(InputError, match="FIFO"):
        read_json(pipe)
    with pytest.raises(InputError, match="a directory"):
        read_json(tmp_path)
    big = tmp_path / "stats.json"
    with open(big, "wb") as handle:
        handle.truncate(65 * 2**20)
    with pytest.raises(InputError, match="more than") as info:
        read_json(big, "a LeRobot policy config.json")
    assert "allowed for a LeRobot policy config.json;" in str(info.value) and " a a " not in str(info.value)
    with pytest.raises(InputError, match="character device"):
        read_jsonl(Path("/dev/zero"))


def test_json_lines_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "episodes.jsonl"
    path.write_text('{"a": 1}\n\n{"b": \n')
    with pytest.raises(InputError) as info:
        read_jsonl(path)
    assert info.value.field == "line 3"
