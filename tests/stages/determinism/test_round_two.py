"""Determinism, round two, with third-party trainers (tests/stages/determinism/*_trainer.py): the
training job's environment, the horizon, a refused op's cause, and duplicated worker random streams.

Every run trains for real on CPU; parts are run side by side in-process (`helpers.run_stage`), the way
the part jobs run them, and the stage's merge judges what they left.
"""

from __future__ import annotations

import pytest

from pipeline.errors import ConfigError
from pipeline.stages.config import typed
from pipeline.stages.determinism.config import DeterminismConfig
from tests.stages.determinism.helpers import LOADER_TRAINER, TINY_TRAINER, run_stage, stage_cfg, trainer_cmd

TWINS = ("twin_a", "twin_b")
PAIRS = (*TWINS, "bare_a", "bare_b")
ALL = (*PAIRS, "control")
QUIET = {"reload.enabled": False}


def loader_cfg(*flags: str, extra: dict | None = None, **changes: object):
    return stage_cfg(extra=extra, train_cmd=trainer_cmd(LOADER_TRAINER, *flags), **QUIET, **changes)


def test_hash_ordered_batches_are_blocked_naming_pythonhashseed(tmp_path):
    """The twins agree (the stage sets PYTHONHASHSEED=0); under the job's environment they do not."""
    _, rows = run_stage(tmp_path, loader_cfg("--order", "hashset"), PAIRS)
    assert rows["twins"].verdict == "match"
    assert "PYTHONHASHSEED=0" in rows["twins"].message and "torch thread(s)" in rows["twins"].message
    found = rows["conditions"]
    assert found.verdict == "mismatch" and found.severity == "hard" and found.blocking
    assert found.message.startswith("same-seed runs are identical only under variables the training job")
    assert "PYTHONHASHSEED (stage 0, job unset: unset means str/bytes hash() is salted" in found.message
    assert found.configured["PYTHONHASHSEED"] == {"stage": "0", "job": None}
    assert "PYTHONHASHSEED" in found.evidence["bare_a"]["env_unset"]
    assert found.evidence["divergence"]["step"] == 1


def test_the_same_trainer_clears_when_the_chained_job_sets_pythonhashseed(tmp_path):
    script = tmp_path / "train.sbatch"
    script.write_text(
        "#!/bin/bash\n#SBATCH --cpus-per-task=4\n#SBATCH --export=ALL,WANDB_MODE=offline\n"
        "export PYTHONHASHSEED=0  # reproducible str hashing\nsrun python train.py\n"
    )
    cfg = loader_cfg("--order", "hashset", extra={"chain": {"sbatch": str(script)}})
    result, rows = run_stage(tmp_path / "run", cfg, ALL)
    assert result.status == "pass", [(c.id, c.verdict, c.message) for c in result.checks]
    found = rows["conditions"]
    assert found.verdict == "match"
    assert "PYTHONHASHSEED=0" in found.message and "OMP_NUM_THREADS unset" in found.message
    assert "not covered: the job's 4 CPUs per task" in found.message  # the record states what it proved
    assert found.evidence["bare_a"]["env_set"]["WANDB_MODE"] == "offline"
    assert found.evidence["job"]["sources"] == [f"chain.sbatch ({script})"]


def test_divergence_after_the_first_epoch_is_caught_once_the_horizon_must_reach_it(tmp_path):
    flags = ("--unseeded-from-epoch", "1")
    short, rows = run_stage(tmp_path / "a", loader_cfg(*flags, job_pair=False), TWINS)
    assert rows["twins"].verdict == "match"  # 6 steps: inside the seeded first epoch
    horizon = rows["horizon"]
    assert horizon.verdict == "match" and horizon.severity == "soft"
    assert horizon.message.startswith("horizon: steps 1..6 compared; inside: no reported event")
    assert "not covered: epoch_end, eval, checkpoint_save, lr_change" in horizon.message

    cfg = loader_cfg(*flags, job_pair=False, horizon_events=["epoch_end"])
    result, rows = run_stage(tmp_path / "b", cfg, TWINS)
    assert rows["twins"].verdict == "mismatch" and "first divergent step 9" in rows["twins"].message
    horizon = rows["horizon"]
    assert horizon.verdict == "match" and horizon.severity == "hard"
    assert horizon.message.startswith("horizon: steps 1..10 compared; inside: epoch_end after step 8")
    assert horizon.evidence["steps"] == 10  # stopped by log.stop: epoch_end + horizon_after, not max_steps


def test_a_required_event_the_run_never_reaches_is_unverifiable(tmp_path):
    cfg = stage_cfg(
        train_cmd=trainer_cmd(TINY_TRAINER),
        job_pair=False,
        horizon_events=["eval"],
        steps=3,
        max_steps=4,
        **QUIET,
    )
    _, rows = run_stage(tmp_path, cfg, TWINS)
    horizon = rows["horizon"]
    assert horizon.verdict == "unverifiable" and "did not cover eval (never reported)" in horizon.message
    assert "max_steps=4" in horizon.message and horizon.evidence["steps"] == 4


@pytest.mark.parametrize("own", [False, True], ids=["stage-mode", "job-mode"])
def test_a_refused_op_names_the_op_and_torch_message_and_advises_warn_only_only_when_right(tmp_path, own):
    flags = ("--nondet-op", *(("--own-deterministic",) if own else ()))
    cfg = stage_cfg(train_cmd=trainer_cmd(TINY_TRAINER, *flags), **QUIET)
    _, rows = run_stage(tmp_path, cfg, PAIRS)
    twins = rows["twins"]
    assert twins.verdict == "error" and "twin_a exited 1: torch refused the nondeterministic op put_" in (
        twins.message
    )
    cause = twins.evidence["twin_a"]["cause"]
    assert cause["op"] == "put_" and cause["message"].startswith(
        "put_ does not have a deterministic implementation, but you set "
        "'torch.use_deterministic_algorithms(True)'"
    )
    if own:  # the job itself runs deterministic algorithms: warn_only in the stage would only hide it
        assert rows["conditions"].verdict == "error" and "put_" in rows["conditions"].message
        assert "crashes on put_ as well" in twins.message and "warn_only=true" not in twins.message
    else:
        assert rows["conditions"].verdict == "match"
        assert "only the stage's deterministic mode refuses put_" in twins.message
        assert "set stages.determinism.warn_only=true" in twins.message


def test_duplicated_worker_random_streams_are_reported(tmp_path):
    cfg = loader_cfg("--workers", "2", "--worker-rng", "dataset", job_pair=False)
    _, rows = run_stage(tmp_path, cfg, ("twin_a",))
    found = rows["worker_rng"]
    assert found.verdict == "mismatch" and found.severity == "soft"
    assert "dataset.rng identical in workers [0, 1]" in found.message
    assert {d["stream"] for d in found.evidence["duplicated_streams"]} == {"dataset.rng"}


@pytest.mark.parametrize("workers", ["0", "2"])
def test_seeded_trainer_with_and_without_workers_clears(tmp_path, workers):
    result, rows = run_stage(tmp_path, loader_cfg("--workers", workers), ALL)
    assert result.status == "pass", [(c.id, c.verdict, c.message) for c in result.checks]
    assert {k: c.verdict for k, c in rows.items()} == {
        "twins": "match",
        "control": "match",
        "device": "match",
        "conditions": "match",
        "horizon": "match",
        "envelope": "match",  # no earlier runs yet: an informative row keeping the curve
        "worker_rng": "match",
    }
    assert rows["worker_rng"].evidence["worker_records"] == (2 if workers == "2" else 0)  # one loader start


@pytest.mark.parametrize(
    "changes, key",
    [
        ({"conditions_severity": "fatal"}, "conditions_severity"),
        ({"worker_rng_severity": "loud"}, "worker_rng_severity"),
        ({"horizon_events": ["epoch end"]}, "horizon_events[0]"),
        ({"max_steps": 2, "steps": 6, "horizon_events": ["eval"]}, "max_steps"),
        ({"horizon_after": 0}, "horizon_after"),
    ],
)
def test_stage_config_validates_the_new_keys(changes, key):
    with pytest.raises(ConfigError) as info:
        typed(DeterminismConfig, changes, "stages.determinism")
    assert info.value.key == f"stages.determinism.{key}"


def test_a_batch_repeated_within_an_epoch_is_reported_and_across_epochs_is_not(tmp_path):
    """An IterableDataset whose workers yield the same stream repeats whole batches inside one epoch;
    an unshuffled dataset repeats them only across epochs, which is fine."""
    from pipeline.stages.determinism import compare, findings
    from pipeline.stages.determinism.outcome import Outcome

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "events.jsonl").write_text('{"event": "epoch_end", "step": 2}\n')
    digests = {1: "sha256:a", 2: "sha256:b", 3: "sha256:a", 4: "sha256:a"}
    rows = {s: {"step": s, "loss": 1.0, "batch_digest": d} for s, d in digests.items()}
    twin = Outcome("twin_a", tmp_path, {}, compare.Stream(tmp_path / "m.jsonl", rows), {}, None)
    found = findings.worker_rng_check(typed(DeterminismConfig, {}, "stages.determinism"), twin)
    assert found.verdict == "mismatch" and found.evidence["repeated_batches"] == [
        {"step": 4, "same_as": 3, "digest": "sha256:a"}  # step 3 repeats step 1 across the boundary: fine
    ]


def test_the_first_lr_change_is_read_off_the_logged_rate_when_the_trainer_reports_none(tmp_path):
    from pipeline.stages.determinism import compare, findings
    from pipeline.stages.determinism.outcome import Outcome

    rates = {1: 1e-3, 2: 1e-3, 3: 5e-4, 4: 5e-4, 5: 5e-4}
    rows = {s: {"step": s, "loss": 1.0, "lr": r} for s, r in rates.items()}
    twin = Outcome("twin_a", tmp_path, {}, compare.Stream(tmp_path / "m.jsonl", rows), {}, None)
    assert twin.events() == {"lr_change": 2}  # the new rate was first used on step 3
    config = typed(DeterminismConfig, {"horizon_events": ["lr_change"]}, "stages.determinism")
    horizon = findings.horizon_check(config, twin)
    assert horizon.verdict == "match" and "lr_change after step 2" in horizon.message
