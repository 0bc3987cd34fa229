"""Every input a model declares reaches it as LeRobot's loader gives it (cameras, task text, past frames),
and the counterfactual probes name a BGR camera and exchanged cameras (issue: teacher_forced round two,
items 1-2). Real FFV1 video written with PyAV, a deterministic pixel model behind the real loader path."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from pipeline.readers.frames import FrameReader, processor_view
from pipeline.readers.lerobot_data import LeRobotData
from tests.stages.teacher_forced.helpers import by_id, run_stage
from tests.stages.teacher_forced.pixels import (
    CAMERAS,
    FRONT,
    LOADER,
    SEEN,
    TASKS,
    WRIST,
    write_dataset,
    write_model,
)

PROBES = [f"bgr:{FRONT}", f"bgr:{WRIST}", "scaled:x255", "scaled:div255", f"exchanged:{FRONT}|{WRIST}"]


def _models(tmp_path: Path, **named: dict) -> list[dict]:
    return [
        {"name": name, "path": write_model(tmp_path / "models" / name, **config), "loader": LOADER}
        for name, config in named.items()
    ]


def _run(data: str, run_dir: Path, **overrides) -> object:
    return run_stage(data, run_dir, plots=False, **overrides)  # plots have tests of their own


def _probe_rows(rows: dict, model: str = "base", cameras_only: bool = True) -> dict:
    """The camera alternatives' rows (and the kept ones'), or every probe row."""
    out = {k.removeprefix(f"probe.{model}."): v for k, v in rows.items() if k.startswith(f"probe.{model}.")}
    return {k: v for k, v in out.items() if not cameras_only or k in PROBES}


def test_cameras_task_and_past_frames_reach_the_model_exactly_as_decoded(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "data")
    models = _models(
        tmp_path,
        base={"cameras": list(CAMERAS)},
        stacked={"cameras": [FRONT], "n_obs_steps": 2, "task": True},
    )
    chunked = write_model(tmp_path / "models/chunked", [WRIST], n_obs_steps=2, task=True)
    models.append(
        {"name": "chunked", "path": chunked, "loader": LOADER.replace("pixel_model", "chunk_pixel_model")}
    )
    result = _run(str(data), tmp_path / "run", models=models, samples=96, probe_models=[])
    rows = by_id(result)
    assert rows["l1.base"].actual < 0.2  # fits to the noise (stacked reads one camera only)
    saved = json.loads((tmp_path / "run/artifacts/teacher_forced/samples.json").read_text())["samples"]
    reader = FrameReader(LeRobotData(data))
    one = SEEN[models[0]["path"]]
    assert list(one) == [*CAMERAS, "observation.state"]
    for key in CAMERAS:
        want = np.stack([reader.frames(key, s["episode"], [s["frame"]])[0] for s in saved])
        assert one[key].dtype == np.float32 and one[key].shape == (96, 3, 16, 16)
        assert not one[key].flags.writeable  # shared by every model and probe
        np.testing.assert_array_equal(one[key], processor_view(want))
    two = SEEN[models[1]["path"]]
    assert two[FRONT].shape == (96, 2, 3, 16, 16) and two["observation.state"].shape == (96, 2, 2)
    earlier = [max(s["frame"] - 1, 0) for s in saved]  # the episode's first frame repeats before it
    want = np.stack([reader.frames(FRONT, s["episode"], [f])[0] for s, f in zip(saved, earlier, strict=True)])
    np.testing.assert_array_equal(two[FRONT][:, 0], processor_view(want))
    np.testing.assert_array_equal(two[FRONT][:, 1], one[FRONT])
    assert two["task"] == [TASKS[s["episode"] % 2] for s in saved]
    assert any(s["frame"] == 0 for s in saved)  # the start padding was exercised
    three = SEEN[chunked]  # LeRobot's entry point: torch tensors, the task a list, n_obs_steps on .config
    assert isinstance(three[WRIST], torch.Tensor) and three[WRIST].shape == (96, 2, 3, 16, 16)
    np.testing.assert_array_equal(three[WRIST][:, 1].numpy(), one[WRIST])
    assert three["task"] == two["task"]
    decode = rows["inputs.images"].evidence  # each camera once: the samples and their past frames
    assert set(decode["decode_s"]) == set(CAMERAS) and "inference_s" in rows["l1.base"].evidence
    wanted = {(s["episode"], f) for s in saved for f in (s["frame"], max(s["frame"] - 1, 0))}
    assert decode["frames"] == {FRONT: len(wanted), WRIST: len(wanted)} and len(wanted) > 96


def test_a_clean_dataset_gives_no_hard_probe_row_and_every_alternative_is_reported(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "data")
    models = _models(tmp_path, base={"cameras": list(CAMERAS)})
    rows = by_id(_run(str(data), tmp_path / "run", models=models, samples=96))
    assert {r.verdict for r in _probe_rows(rows, cameras_only=False).values()} == {"match"}
    probes = _probe_rows(rows)
    assert sorted(probes) == sorted(PROBES)
    assert all(r.verdict == "match" for r in probes.values()), [r.message for r in probes.values()]
    assert all(r.evidence["ci"] is not None and r.evidence["ci"][0] > 0 for r in probes.values())


def test_a_camera_stored_bgr_is_named_by_the_bgr_probe(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "data", bgr=FRONT)
    models = _models(tmp_path, base={"cameras": list(CAMERAS)})
    probes = _probe_rows(by_id(_run(str(data), tmp_path / "run", models=models, samples=96)))
    hard = {k for k, r in probes.items() if r.verdict == "mismatch" and r.severity == "hard"}
    assert hard == {f"bgr:{FRONT}"}
    row = probes[f"bgr:{FRONT}"]
    assert "error drops" in row.message and f"{FRONT}'s channels reversed (BGR)" in row.message
    assert row.evidence["ci"][1] < 0 and row.actual <= -0.1


def test_exchanged_cameras_are_named_by_the_exchange_probe(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "data", exchanged=True)
    models = _models(tmp_path, base={"cameras": list(CAMERAS)})
    rows = by_id(_run(str(data), tmp_path / "run", models=models, samples=96))
    probes = _probe_rows(rows)
    hard = {k for k, r in probes.items() if r.verdict == "mismatch" and r.severity == "hard"}
    assert hard == {f"exchanged:{FRONT}|{WRIST}"}
    assert f"{FRONT} and {WRIST} exchanged" in probes[f"exchanged:{FRONT}|{WRIST}"].message
    for key in CAMERAS:  # reversing a camera's channels undoes part of the exchange: explained by it
        assert probes[f"bgr:{key}"].verdict == "match"
    assert rows["l1.base"].verdict == "match"  # no max_l1: the probe is what names the fault


def test_too_few_samples_leave_the_probes_unverifiable(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "data", exchanged=True)
    models = _models(tmp_path, base={"cameras": list(CAMERAS)})
    rows = by_id(_run(str(data), tmp_path / "run", models=models, samples=16))
    probes = _probe_rows(rows)
    assert {r.verdict for r in probes.values()} == {"unverifiable"}
    assert "only 16 paired samples, fewer than min_pairs=64" in probes[f"exchanged:{FRONT}|{WRIST}"].message
    assert _probe_rows(rows, cameras_only=False)["vectors"].verdict == "unverifiable"


def test_a_camera_the_dataset_lacks_is_the_models_row_and_the_other_models_report(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "data")
    side = "observation.images.side"
    models = _models(
        tmp_path,
        base={"cameras": [FRONT]},
        sided={"cameras": [FRONT, side]},
        larger={"cameras": [WRIST], "side": 32},
    )
    rows = by_id(_run(str(data), tmp_path / "run", models=models, samples=96))
    row = rows["input.sided"]
    assert row.verdict == "mismatch" and row.severity == "hard" and row.actual == [side]
    assert side in row.message and "no such camera" in row.message and str(data) in row.message
    assert rows["l1.base"].verdict == "match" and "l1.sided" not in rows
    sized = rows["input_shape.larger"]  # declared 32x32, stored 16x16: said, fed as decoded
    assert sized.verdict == "mismatch" and sized.severity == "soft" and sized.actual == [WRIST]
    assert "[3, 32, 32]" in sized.message and "[16, 16, 3]" in sized.message and "l1.larger" in rows


def test_a_camera_whose_video_is_gone_is_the_row_of_each_model_that_reads_it(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "data")
    video = next((data / "videos" / WRIST).rglob("*.mp4"))
    video.unlink()
    models = _models(tmp_path, base={"cameras": list(CAMERAS)}, front={"cameras": [FRONT]})
    rows = by_id(_run(str(data), tmp_path / "run", models=models, samples=96, baseline="front"))
    row = rows["input.base"]
    assert row.verdict == "mismatch" and row.actual == [WRIST] and str(video) in row.message
    assert rows["l1.front"].verdict == "match" and "probe.front.bgr:" + FRONT in rows


def test_an_exchange_and_a_bgr_camera_together_are_both_named(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "data", bgr=FRONT, exchanged=True)  # demo=faulty's two camera faults
    models = _models(tmp_path, base={"cameras": list(CAMERAS)})
    probes = _probe_rows(by_id(_run(str(data), tmp_path / "run", models=models, samples=96)))
    hard = {k for k, r in probes.items() if r.verdict == "mismatch"}
    assert hard == {f"exchanged:{FRONT}|{WRIST}", f"bgr:{WRIST}"}, {k: r.message for k, r in probes.items()}
    second = next(r for k, r in probes.items() if k in hard and r.evidence["kept"].index(k) == 1)
    assert "drops a further" in second.message
