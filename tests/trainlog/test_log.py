"""The metrics stream: exact floats, digests that change with one bit, per-rank files, op warnings."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from pipeline import trainlog


@pytest.fixture
def restore_determinism(monkeypatch):
    """MetricsLog applies PREFLIGHT_DETERMINISTIC process-wide; put torch back for the other tests, and
    the variable Inductor reads (`trainlog.log.INDUCTOR_ENV`), which the later tests' jobs would inherit."""
    from pipeline.trainlog.log import INDUCTOR_ENV

    monkeypatch.delenv(INDUCTOR_ENV, raising=False)  # put back as it was by monkeypatch's undo
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    yield
    torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_every_float_round_trips_bit_exactly(tmp_path, restore_determinism):
    loss = torch.tensor(1.0, dtype=torch.float32) / 3  # not representable in 6 printed decimals
    with trainlog.MetricsLog(tmp_path) as log:
        log.step(1, loss=loss, grad_norm=torch.tensor(0.1, dtype=torch.bfloat16), lr=1e-3)
        log.step(2, loss=float("nan"), grad_norm=float("inf"))
    first, second = _lines(tmp_path / "metrics.jsonl")
    assert float.fromhex(first["hex"]["loss"]) == loss.item()
    assert np.float32(float.fromhex(first["hex"]["loss"])) == loss.numpy()
    assert first["dtype"] == {"loss": "float32", "grad_norm": "bfloat16", "lr": "float64"}
    assert second["hex"] == {"loss": "nan", "grad_norm": "inf"} and second["loss"] == "nan"


def test_digest_changes_with_one_bit_and_not_with_key_order():
    model = torch.nn.Linear(3, 2)
    state = model.state_dict()
    reordered = dict(reversed(list(state.items())))
    assert trainlog.state_digest(state) == trainlog.state_digest(reordered)
    nudged = {k: v.clone() for k, v in state.items()}
    nudged["bias"][0] = torch.nextafter(nudged["bias"][0], torch.tensor(math.inf))
    assert trainlog.state_digest(nudged) != trainlog.state_digest(state)
    half = {k: v.to(torch.bfloat16) for k, v in state.items()}
    assert trainlog.state_digest(half).startswith("sha256:")


def test_digest_only_on_chosen_steps(tmp_path, restore_determinism):
    model = torch.nn.Linear(2, 1)
    with trainlog.MetricsLog(tmp_path, digest_every=None, digest_steps=(2, 3)) as log:
        for step in range(1, 5):
            log.step(step, loss=0.5, model=model)
    assert ["param_digest" in row for row in _lines(tmp_path / "metrics.jsonl")] == [False, True, True, False]


def test_each_rank_writes_its_own_stream(tmp_path, monkeypatch, restore_determinism):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with trainlog.MetricsLog(tmp_path) as log:
        log.step(1, loss=1.0)
    assert (tmp_path / "metrics.rank1.jsonl").exists() and (tmp_path / "determinism.rank1.json").exists()


def test_warn_only_records_the_nondeterministic_ops_hit(tmp_path, monkeypatch, restore_determinism):
    monkeypatch.setenv(trainlog.ENV_MODE, "warn")
    log = trainlog.MetricsLog(tmp_path)
    with warnings.catch_warnings():  # not pytest.warns: that would swallow the warning before the log
        warnings.simplefilter("always")
        torch.zeros(4).put_(torch.tensor([0, 0]), torch.ones(2))
    log.step(1, loss=1.0)
    log.close()
    report = json.loads((tmp_path / "determinism.json").read_text())
    assert report["nondeterministic_ops"] == ["put_"]
    assert report["settings"]["deterministic_algorithms"] and report["settings"]["warn_only"]
    assert report["env"][trainlog.ENV_MODE] == "warn"


def test_intent_from_stats_or_from_lerobot_style_buffers(tmp_path):
    stats = {"observation.state.mean": np.array([1.5, -2.0], dtype=np.float32)}
    trainlog.write_intent(stats, tmp_path)
    assert load_file(str(tmp_path / trainlog.INTENT_FILE))["observation.state.mean"].tolist() == [1.5, -2.0]

    class Legacy(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.normalize_inputs = torch.nn.Module()
            self.normalize_inputs.register_buffer("buffer_observation_state_mean", torch.ones(2))
            self.net = torch.nn.Linear(2, 2)

    (tmp_path / "legacy").mkdir()
    trainlog.write_intent(Legacy(), tmp_path / "legacy")
    keys = list(load_file(str(tmp_path / "legacy" / trainlog.INTENT_FILE)))
    assert keys == ["normalize_inputs.buffer_observation_state_mean"]


def test_events_are_recorded_and_stop_turns_true_after_the_requested_events(
    tmp_path, monkeypatch, restore_determinism
):
    monkeypatch.setenv(trainlog.ENV_HORIZON, "epoch_end,eval")
    monkeypatch.setenv(trainlog.ENV_AFTER, "2")
    monkeypatch.setenv(trainlog.ENV_MIN_STEPS, "3")
    stops = []
    with trainlog.MetricsLog(tmp_path) as log:
        for step in range(1, 9):
            log.step(step, loss=1.0)
            if step == 2:
                log.event("epoch_end")
            if step == 4:
                log.event("eval")
                log.event("epoch_end")  # a later boundary: the first one is what counts
            stops.append(log.stop)
    assert stops == [False, False, False, False, False, True, True, True]  # eval after 4, +2 steps
    events = _lines(tmp_path / trainlog.EVENTS_FILE)
    assert events[:2] == [{"event": "epoch_end", "step": 2}, {"event": "eval", "step": 4}]
    report = json.loads((tmp_path / "determinism.json").read_text())
    assert report["events"] == {"epoch_end": 2, "eval": 4} and report["last_step"] == 8


def test_without_a_horizon_request_stop_stays_false(tmp_path, monkeypatch, restore_determinism):
    monkeypatch.delenv(trainlog.ENV_HORIZON, raising=False)
    with trainlog.MetricsLog(tmp_path) as log:
        log.step(1, loss=1.0)
        log.event("epoch_end")
        log.step(5, loss=1.0)
        assert log.stop is False


def test_batch_digest_follows_the_bytes_of_the_inputs(tmp_path, restore_determinism):
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    with trainlog.MetricsLog(tmp_path) as log:
        log.step(1, loss=1.0, batch=x)
        log.step(2, loss=1.0, batch={"obs": x.clone(), "mask": torch.ones(2)})
        log.step(3, loss=1.0, batch=x + torch.tensor(1e-7))
    first, second, third = _lines(tmp_path / "metrics.jsonl")
    assert first["batch_digest"] == trainlog.batch_digest(x.clone())
    assert len({first["batch_digest"], second["batch_digest"], third["batch_digest"]}) == 3


class _Held(torch.utils.data.Dataset):
    """Augmentation noise from a generator the dataset holds: copied identically into each worker."""

    def __init__(self, held: bool) -> None:
        self.rng = np.random.default_rng(0) if held else None

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> torch.Tensor:
        noise = self.rng.normal() if self.rng is not None else np.random.normal()
        return torch.tensor([float(index), noise])


@pytest.mark.parametrize("held", [True, False])
def test_worker_streams_forked_identically_are_found(tmp_path, held, restore_determinism):
    from pipeline.trainlog.workers import duplicates

    with trainlog.MetricsLog(tmp_path) as log:
        loader = log.watch(torch.utils.data.DataLoader(_Held(held), batch_size=2, num_workers=2))
        for step, batch in enumerate(loader, start=1):
            log.step(step, loss=1.0, batch=batch)
    records = sorted((tmp_path / "workers").glob("worker*.json"))
    assert len(records) == 2
    found = duplicates(tmp_path / "workers")
    if held:
        assert [(d["stream"], d["workers"]) for d in found] == [("dataset.rng", [0, 1])]
    else:  # torch reseeds random, numpy and torch per worker: nothing duplicated
        assert found == []


FRESH_DETERMINISM = """
import sys, torch
from pipeline.trainlog.log import apply_determinism
warn = apply_determinism("warn")
strict = apply_determinism("1")
dynamo = "torch._dynamo" in sys.modules
import torch._inductor.config as inductor
print(warn["warn_only"], strict["deterministic_algorithms"], strict["warn_only"])
print(dynamo, inductor.deterministic)
"""


def test_deterministic_mode_leaves_dynamo_unimported_and_inductor_deterministic():
    """In a fresh process (this one may hold Inductor's config already): the switches are torch's public
    call's, without its import of torch._dynamo, and Inductor's config, imported later, is deterministic."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_DETERMINISTIC"}
    out = subprocess.run(
        [sys.executable, "-c", FRESH_DETERMINISM], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["True", "True", "False", "False", "True"], out
