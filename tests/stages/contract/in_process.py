"""The contract stage as a `launcher=local stage=contract` launch runs it, in this process: the config
composed from the same overrides and resolved as the launch resolves it (absolute paths, the inputs'
checks), the stage's own `run` on it, and the gate's own merge of its result. What a test reads of a
launch (the exit code the gate gives, `gate.json`, the rows of `stages/contract.json`) comes out in the
same JSON form, without the ~17 s a launch pays for its imports, the container_check job and the job
processes. A test of the launch itself (the command line, the run folder, the jobs) launches instead."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

CONTRACT_ONLY = ("launcher=local", "stage=contract")


def compose(*overrides: str) -> DictConfig:
    """The launch's config (`pipeline/conf/config.yaml`) with these overrides, as Hydra composes it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from pipeline import launch

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(launch.CONF_DIR), version_base="1.3"):
        return hydra_compose("config", overrides=list(overrides))


def contract_run(cwd: Path, *overrides: str) -> tuple[int, dict[str, Any], dict[str, dict[str, Any]]]:
    """(exit code, gate record, contract rows by id) of `stage=contract launcher=local *overrides`, the
    run folder and the audit folder under `cwd`."""
    from pipeline import launch, stages
    from pipeline.run import gate, input_checks
    from pipeline.stages import StageContext

    cwd.mkdir(parents=True, exist_ok=True)
    cfg = compose(
        *CONTRACT_ONLY, f"output_root={cwd / 'preflight'}", f"audit_dir={cwd / 'audit_logs'}", *overrides
    )
    registry = launch.load_registry(cfg)
    launch.validate(cfg, registry)
    input_checks.check_inputs(cfg, registry)
    rcfg = launch.resolved_config(cfg, "local")
    input_checks.check_inputs(rcfg, registry)
    ctx = StageContext(Path(rcfg.run_dir), "contract", config=stages.stage_config(rcfg, "contract"))
    result = registry["contract"].run(rcfg, ctx)
    record = gate.merge(rcfg, {"executor": "local"}, [result])
    as_json = json.loads(json.dumps(record.to_dict()))
    checks = {c["id"]: c for c in as_json["stages"][0]["checks"]}
    return (3 if record.gate == "blocked" else 0), as_json, checks
