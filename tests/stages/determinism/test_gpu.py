"""CUDA determinism (issue 15, item 5): deterministic algorithms, the cuBLAS workspace, atomics in
index_add_/scatter_add_, the stage's twins on a GPU, and NCCL all-reduce under DDP.

Marked `gpu`; every test skips, naming CUDA, where torch sees no CUDA device (this machine). They are
meant for the `device` machine: `pytest -m gpu tests/stages/determinism/test_gpu.py`.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from pipeline.stages.determinism import runner
from tests.stages.determinism.helpers import run_stage, stage_cfg

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="no CUDA device: torch.cuda.is_available() is False"
    ),
]

REFERENCE = [
    "{python}", "-m", "pipeline.demo.reference_trainer", "--seed", "{seed}", "--steps", "{steps}",
    "--out", "{out}", "--dataset", "{dataset}", "--device", "cuda",
]  # fmt: skip


@pytest.fixture
def deterministic():
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(before)


def test_atomic_accumulations_are_bit_identical_under_deterministic_algorithms(deterministic):
    """index_add_ and scatter_add_ accumulate with atomics on CUDA; the deterministic mode must make
    two runs over heavily duplicated indices agree bit for bit."""
    generator = torch.Generator(device="cuda").manual_seed(0)
    values = torch.randn(1 << 16, device="cuda", generator=generator)
    index = torch.randint(0, 8, (1 << 16,), device="cuda", generator=generator)
    runs = []
    for _ in range(2):
        added = torch.zeros(8, device="cuda").index_add_(0, index, values)
        scattered = torch.zeros(8, device="cuda").scatter_add_(0, index, values)
        runs.append((added.cpu(), scattered.cpu()))
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])


def test_cublas_without_a_workspace_config_is_refused_and_the_cause_is_read_from_the_log():
    code = (
        "import torch; torch.use_deterministic_algorithms(True); "
        "a = torch.randn(64, 64, device='cuda'); print((a @ a).sum().item())"
    )
    env = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert done.returncode != 0, done.stdout
    cause = runner.crash_cause(done.stderr)
    assert (
        cause is not None and cause["kind"] == "exception" and "CUBLAS_WORKSPACE_CONFIG" in cause["message"]
    )


def test_twins_on_one_gpu_are_bit_identical_with_the_stage_settings(tmp_path, tiny_dataset):
    cfg = stage_cfg(tiny_dataset, train_cmd=REFERENCE, steps=3, job_pair=False, **{"reload.enabled": False})
    _, rows = run_stage(tmp_path, cfg, ("twin_a", "twin_b", "control"))
    assert rows["twins"].verdict == "match", rows["twins"].message
    assert rows["twins"].evidence["twin_a"]["device"]["device"] == "cuda"
    assert rows["device"].verdict == "match" and rows["control"].verdict == "match"


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL all-reduce needs 2 CUDA devices")
def test_ddp_ranks_agree_over_nccl(tmp_path, tiny_dataset):
    cfg = stage_cfg(
        tiny_dataset, train_cmd=REFERENCE, steps=3, ddp_procs=2, job_pair=False, **{"reload.enabled": False}
    )
    _, rows = run_stage(tmp_path, cfg, ("twin_a", "ddp"))
    assert rows["ddp"].verdict == "match", rows["ddp"].message
