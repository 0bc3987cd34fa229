"""A DDP smoke run whose ranks all trained identically but whose teardown aborted is named as that.

The planted trainer is real torch under a real torchrun: rank 1 logs every step and then aborts
(SIGABRT), as a rank that dies leaving its gloo process group does.
"""

from __future__ import annotations

from tests.stages.determinism.helpers import TINY_TRAINER, run_stage, stage_cfg, trainer_cmd


def test_a_teardown_abort_after_identical_ranks_is_a_soft_teardown_row(tmp_path):
    cmd = trainer_cmd(TINY_TRAINER, "--abort-at-exit-rank", "1")
    cfg = stage_cfg(train_cmd=cmd, steps=3, ddp_procs=2, job_pair=False, **{"reload.enabled": False})
    _, rows = run_stage(tmp_path, cfg, ("twin_a", "ddp"))
    assert rows["ddp"].verdict == "match", rows["ddp"].message
    teardown = rows["ddp.teardown"]
    assert (teardown.verdict, teardown.severity) == ("mismatch", "soft")
    assert "all 2 ranks logged the same 3 step(s)" in teardown.message
    assert "terminate called without an active exception" in teardown.message
    assert teardown.evidence["returncode"] not in (0, None)


def test_a_rank_that_never_logged_is_still_an_error(tmp_path):
    cmd = trainer_cmd(TINY_TRAINER, "--crash-if-out-contains", "ddp")
    cfg = stage_cfg(train_cmd=cmd, steps=3, ddp_procs=2, job_pair=False, **{"reload.enabled": False})
    _, rows = run_stage(tmp_path, cfg, ("twin_a", "ddp"))
    assert rows["ddp"].verdict == "error"
    assert "did not complete" in rows["ddp"].message and "ddp.teardown" not in rows
