"""A damaged demo cache entry (pipeline/demo/cache_entries.py, read by memo.py and cameras.py) is found
when read, named on one log line with what was wrong, discarded and made again, and the build then
writes what it writes on a clean cache. Each test plants one damage in its own copy of a cache filled
by one small build."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from safetensors.torch import save_file

from pipeline.demo import build as build_module
from pipeline.demo import cameras, memo
from pipeline.demo import teacher_forced as teacher_forced_module
from pipeline.demo.policy import DemoPolicy, load_pretrained
from tests.build_ledger import LEDGER
from tests.demo.test_memo import files, never

pytestmark = pytest.mark.render

# settings of their own (no other test builds this digest), as small as a full build allows
TINY = {"seed": 11, "episodes": 2, "steps": 20, "train_steps": 10, "hidden": 8, "cameras": {"size": 16}}
LOGGER = "pipeline.demo.cache"


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A cache filled by one build of TINY, and the files that build wrote."""
    base = tmp_path_factory.mktemp("clean_demo_cache")
    with pytest.MonkeyPatch.context() as m, LEDGER.allow_rebuild():
        m.setenv("PREFLIGHT_CACHE", str(base / "cache"))
        build_module.build(TINY, base / "demo")
    return base / "cache", files(base / "demo")


@pytest.fixture
def cache(clean, tmp_path, monkeypatch) -> Path:
    """A fresh copy of the filled cache, the one this test's build reads."""
    copy = tmp_path / "cache"
    shutil.copytree(clean[0], copy)
    monkeypatch.setenv("PREFLIGHT_CACHE", str(copy))
    return copy


def counted(monkeypatch: pytest.MonkeyPatch, *targets: tuple[object, str]) -> list[str]:
    """Each call of the named functions appended to the returned list (they still run)."""
    calls: list[str] = []
    for owner, name in targets:
        original = getattr(owner, name)

        def wrapped(*args: object, _f: Callable = original, _n: str = name, **kwargs: object) -> object:
            calls.append(_n)
            return _f(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapped)
    return calls


def rebuilt(tmp_path: Path, clean: tuple[Path, dict[str, str]], caplog: pytest.LogCaptureFixture) -> str:
    """Build TINY again on the damaged cache: it must write what the clean build wrote; returns the one
    line the cache logged."""
    with caplog.at_level(logging.WARNING, logger=LOGGER), LEDGER.allow_rebuild():
        build_module.build(TINY, tmp_path / "demo")
    assert files(tmp_path / "demo") == clean[1]
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(lines) == 1 and "\n" not in lines[0], lines
    return lines[0]


def only_entry(folder: Path) -> Path:
    (entry,) = folder.iterdir()
    return entry


@pytest.mark.parametrize("damage", ["weights", "config_and_weights"])
def test_a_kept_policy_of_another_shape_is_named_and_trained_again(
    damage, cache, clean, tmp_path, monkeypatch, caplog
) -> None:
    """Weights that do not fit their config.json (torch raised a traceback), or a whole policy of another
    width (it loaded, and the demo shipped it): both are damaged entries, trained again."""
    kept = sorted((cache / "demo-policies").iterdir())[0]
    # TINY trains hidden=8 on 11 + 4 state dims and 2 cameras (32 features each: 79 inputs)
    other = DemoPolicy(15, 5, hidden=4, cameras=2)
    save_file({k: v.contiguous() for k, v in other.state_dict().items()}, str(kept / "model.safetensors"))
    if damage == "config_and_weights":
        config = (kept / "config.json").read_text().replace('"hidden": 8', '"hidden": 4')
        (kept / "config.json").write_text(config)
    monkeypatch.setattr(build_module, "generate_episodes", never)
    monkeypatch.setattr(cameras, "_render_chunk", never)
    trained = counted(monkeypatch, (build_module, "train_policy"), (teacher_forced_module, "train_policy"))
    line = rebuilt(tmp_path, clean, caplog)
    assert len(trained) == 1
    assert str(kept) in line
    if damage == "weights":
        assert "model.safetensors: tensor 'net.0.weight' has shape [4, 79], expected [8, 79]" in line
    else:
        assert "config.json field 'hidden' is 4, expected 8" in line
    assert load_pretrained(kept).policy.hidden == 8


@contextlib.contextmanager
def unblocked(fifo: Path, after_s: float = 60.0) -> Iterator[None]:
    """Guards the test, not the code: if the build opened the FIFO to read it (a hang), a writer opens and
    closes it after `after_s`, so the read ends and the test fails on its assertions instead of hanging."""

    def release() -> None:
        with contextlib.suppress(OSError):  # nobody reading (ENXIO), or the FIFO was discarded
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    timer = threading.Timer(after_s, release)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def test_a_fifo_in_the_episodes_cache_is_named_never_opened_and_replaced(
    cache, clean, tmp_path, monkeypatch, caplog
) -> None:
    kept = only_entry(cache / "demo-episodes")
    kept.unlink()
    os.mkfifo(kept)
    monkeypatch.setattr(cameras, "_render_chunk", never)  # the same episodes again: frames and policies hit
    monkeypatch.setattr(build_module, "train_policy", never)
    monkeypatch.setattr(teacher_forced_module, "train_policy", never)
    made = counted(monkeypatch, (build_module, "generate_episodes"))
    with unblocked(kept):
        line = rebuilt(tmp_path, clean, caplog)
    assert made == ["generate_episodes"]
    assert f"{kept}: is a FIFO (named pipe), expected a regular file; not opened" in line
    assert kept.is_file() and len(memo.episodes(TINY["episodes"], TINY["steps"], TINY["seed"], never)) == 2


def replant_frames(kept: Path, change: Callable[[np.ndarray], np.ndarray]) -> None:
    with np.load(kept) as archive:
        frames = {name: change(archive[name]) for name in archive.files}
    with open(kept, "wb") as handle:
        np.savez(handle, **frames)


@pytest.mark.parametrize(
    ("change", "found"),
    [
        (lambda a: np.repeat(np.repeat(a, 2, axis=1), 2, axis=2), "[20, 32, 32, 3]"),  # another size
        (lambda a: np.ascontiguousarray(a[..., 0]), "[20, 16, 16]"),  # another shape: no colour axis
        (lambda a: a[:-1], "[19, 16, 16, 3]"),  # one frame short of the episode
    ],
    ids=["size", "shape", "length"],
)
def test_cached_frames_of_another_size_or_shape_are_named_and_rendered_again(
    change, found, cache, clean, tmp_path, monkeypatch, caplog
) -> None:
    """Frames of another size were used as they were (the demo then blamed its own models), frames of
    another shape failed naming a temporary video file: the cache entry is named and rendered again."""
    kept = only_entry(cache / "demo-cameras")
    replant_frames(kept, change)
    monkeypatch.setattr(build_module, "generate_episodes", never)
    monkeypatch.setattr(build_module, "train_policy", never)
    monkeypatch.setattr(teacher_forced_module, "train_policy", never)
    rendered = counted(monkeypatch, (cameras, "_render_chunk"))
    line = rebuilt(tmp_path, clean, caplog)
    assert rendered == ["_render_chunk"]
    assert f"{kept}: array '0/{cameras.FRONT}' has shape {found}, expected [20, 16, 16, 3]" in line
    with np.load(kept) as archive:
        assert {archive[name].shape for name in archive.files} == {(20, 16, 16, 3)}


@pytest.mark.parametrize(
    ("damage", "wrong"),
    [
        ("fifo", "final_loss.json: is a FIFO (named pipe), expected a regular file"),
        ("file", "is a regular file, expected a folder; not opened"),
    ],
    ids=["fifo", "file"],
)
def test_a_fifo_inside_a_kept_policy_or_a_file_in_its_place_is_named_never_opened_and_trained_again(
    damage, wrong, tmp_path, monkeypatch, caplog
) -> None:
    """The kept policy's small files are read through the safe reader too (its final loss was read with
    a plain `read_text`, which blocks on a FIFO), and its folder must be one."""
    from pipeline.demo.policy import default_spec

    monkeypatch.setenv("PREFLIGHT_CACHE", str(tmp_path / "cache"))
    data = [{"state": np.zeros((4, 2), np.float32)}]
    made = DemoPolicy(2, 2, 8)
    made.final_loss = 0.5
    stats = {k: {"mean": np.zeros(2), "std": np.ones(2)} for k in ("observation.state", "action")}
    trained = (made, stats, default_spec(2, 2))
    memo.policy(data, {"seed": 0}, lambda: trained)
    kept = only_entry(tmp_path / "cache" / "demo-policies")
    pipe = kept / "final_loss.json"
    pipe.unlink()
    if damage == "fifo":
        os.mkfifo(pipe)
    else:
        shutil.rmtree(kept)
        kept.write_text("{}")
    with unblocked(pipe), caplog.at_level(logging.WARNING, logger=LOGGER):
        assert memo.policy(data, {"seed": 0}, lambda: trained) is trained
    (line,) = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert f"{kept}: {wrong}" in line
    assert memo.policy(data, {"seed": 0}, never)[0].final_loss == 0.5


@pytest.mark.parametrize("damage", ["rows", "folder"])
def test_kept_episodes_of_another_length_or_a_folder_in_their_place_are_named_and_made_again(
    damage, tmp_path, monkeypatch, caplog
) -> None:
    monkeypatch.setenv("PREFLIGHT_CACHE", str(tmp_path / "cache"))
    made = [{"state": np.full((5, 2), i, np.float32)} for i in range(2)]
    memo.episodes(2, 5, 0, lambda: made)
    kept = only_entry(tmp_path / "cache" / "demo-episodes")
    if damage == "rows":  # the second episode cut short: a build would write a dataset one row short
        with open(kept, "wb") as handle:
            np.savez(handle, **{"0/state": made[0]["state"], "1/state": made[1]["state"][:4]})
    else:
        kept.unlink()
        kept.mkdir()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert memo.episodes(2, 5, 0, lambda: made) is made
    (line,) = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    wrong = "array '1/state' has shape [4, 2], expected [5, 2]" if damage == "rows" else "is a directory"
    assert f"{kept}: {wrong}" in line
    assert memo.episodes(2, 5, 0, never)[1]["state"].shape == (5, 2)
