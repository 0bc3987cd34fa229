"""Shared by the determinism tests: run the reference trainer for real, and the test trainer's argv."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TINY_TRAINER = Path(__file__).resolve().parent / "tiny_trainer.py"
# The demo's reference trainer and reload, named as a user names theirs: the stage has no default trainer
REFERENCE_CMD = [
    "{python}", "-m", "pipeline.demo.reference_trainer", "--seed", "{seed}", "--steps", "{steps}",
    "--out", "{out}", "--dataset", "{dataset}", "--model", "{model}", "--training", "{training}",
    "--fault", "{fault}", "--save-normalization-stats", "{save_normalization_stats}",
]  # fmt: skip
REFERENCE_LOADER = "pipeline.demo.reload:load_demo"


def reference_overrides() -> tuple[str, str]:
    """Hydra overrides naming the reference trainer and its reload loader as the user's."""
    cmd = "stages.determinism.train_cmd=[" + ",".join(f"'{i}'" for i in REFERENCE_CMD) + "]"
    return cmd, f"stages.determinism.reload.loader={REFERENCE_LOADER}"


def tiny_cmd(*extra: str) -> str:
    """A Hydra override setting train_cmd to the test trainer (a user's own script)."""
    items = [
        "{python}",
        str(TINY_TRAINER),
        "--seed",
        "{seed}",
        "--steps",
        "{steps}",
        "--out",
        "{out}",
        *extra,
    ]
    return "stages.determinism.train_cmd=[" + ",".join(f"'{i}'" for i in items) + "]"


def reference_runs(
    root: Path, dataset: Path, runs: dict[str, tuple[str, ...]], one_process: tuple[str, ...] = ()
) -> dict[str, Path]:
    """Real reference-trainer runs (side by side), as the stage starts them: determinism env set.

    `runs` maps a name to extra trainer flags; every run gets `--steps 3` and `--seed 0` unless given.
    The runs named in `one_process` go one after another in a single process, so torch and the demo
    modules are imported once (~2.2 of a run's ~2.45 CPU-s): only for runs whose stream is compared
    with another process's or whose checkpoint is reloaded, never for twins whose identity across
    processes a test asserts.
    """
    env = {**os.environ, "PREFLIGHT_DETERMINISTIC": "1", "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
    argvs = {name: _reference_argv(root / name, dataset, extra) for name, extra in runs.items()}
    commands = {
        name: [sys.executable, "-m", "pipeline.demo.reference_trainer", *argv]
        for name, argv in argvs.items()
        if name not in one_process
    }
    if one_process:
        shared = json.dumps([argvs[name] for name in one_process])
        commands["+".join(one_process)] = [sys.executable, "-c", _ONE_PROCESS, shared]
    procs = {
        name: subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for name, cmd in commands.items()
    }
    for name, proc in procs.items():
        output = proc.communicate(timeout=300)[0]
        assert proc.returncode == 0, f"{name}: {output}"
    return {name: root / name for name in runs}


_ONE_PROCESS = (
    "import json, sys\n"
    "from pipeline.demo.reference_trainer import main\n"
    "for argv in json.loads(sys.argv[1]):\n"
    "    main(argv)\n"
)


def _reference_argv(out: Path, dataset: Path, extra: tuple[str, ...]) -> list[str]:
    flags = {"--seed": "0", "--steps": "3", **dict(zip(extra[::2], extra[1::2], strict=True))}
    return ["--out", str(out), "--dataset", str(dataset), *[x for kv in flags.items() for x in kv]]


LOADER_TRAINER = Path(__file__).resolve().parent / "loader_trainer.py"


def trainer_cmd(script: Path, *extra: str) -> list[str]:
    """train_cmd for a test trainer script (a user's own), as a list for `stage_cfg`."""
    return ["{python}", str(script), "--seed", "{seed}", "--steps", "{steps}", "--out", "{out}", *extra]


def stage_cfg(dataset: Path | None = None, extra: dict | None = None, **changes: object):
    """A composed-config stand-in for calling the stage directly: `changes` go to stages.determinism,
    `extra` to the top level (e.g. {"training": {"env": {...}}, "chain": {"sbatch": path}})."""
    from omegaconf import OmegaConf

    from pipeline.stages.determinism.config import DeterminismConfig

    cfg = OmegaConf.create(
        {
            "demo": {"variant": "default"},
            "model": {"path": None},
            "training": {"path": None},
            "dataset": {"path": None if dataset is None else str(dataset)},
            "stages": {"determinism": OmegaConf.structured(DeterminismConfig)},
        }
    )
    cfg = OmegaConf.merge(cfg, extra or {})
    cfg.stages.determinism.train_cmd, cfg.stages.determinism.reload.loader = REFERENCE_CMD, REFERENCE_LOADER
    for key, value in changes.items():
        OmegaConf.update(cfg, f"stages.determinism.{key}", value, merge=False)
    return cfg


def run_stage(run_dir: Path, cfg, parts: tuple[str, ...], fingerprints: dict[str, str] | None = None):
    """Run the named parts side by side (each writes done.json only when it succeeds, as the part job
    does), then the stage's merge (with the plan's `fingerprints` of the stage, where a test needs them);
    returns the StageResult and its checks by short id."""
    from concurrent.futures import ThreadPoolExecutor

    from pipeline.stages import StageContext, determinism
    from pipeline.storage import atomic_write_json

    def one(part: str) -> None:
        ctx = StageContext(run_dir=run_dir, stage="determinism", part=part)
        try:
            determinism.runner.run_part(cfg, ctx)
        except RuntimeError:
            return
        atomic_write_json(ctx.part_dir(part) / "done.json", {"part": part})

    with ThreadPoolExecutor(max_workers=len(parts)) as pool:
        list(pool.map(one, parts))
    ctx = StageContext(run_dir=run_dir, stage="determinism", fingerprints=dict(fingerprints or {}))
    result = determinism.run(cfg, ctx)
    return result, {c.id.removeprefix("determinism."): c for c in result.checks}


def gate_reasons(result) -> list[str]:
    """The ids of the rows that block the gate under the default `gate.unverifiable: block`
    (`pipeline.run.gate.merge`): what a launch's gate.json `reasons` start with."""
    return [c.id for c in result.checks if c.blocking or c.verdict == "unverifiable"]
