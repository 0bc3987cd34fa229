"""`python -m pipeline.launch stage=full`: plan the checks, submit them, and (optionally) follow the gate.

Everything is a Hydra override (`--cfg job` shows the composed config). The launch itself never runs a
check: it validates the config (so a typo fails before anything is queued), fixes the run directory,
writes `config.yaml` and `plan.json` there, and hands the jobs to an executor.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf, open_dict
from rich.console import Console
from rich.live import Live

from pipeline import stages
from pipeline.errors import ConfigError, InputError, SubmissionError
from pipeline.executors import (
    TERMINAL,
    chain_sbatch,
    run_dag,
    sbatch_preview,
    slurm_available,
    submit_slurm,
)
from pipeline.fingerprint import digest_path
from pipeline.plan import RESOURCE_KEYS, JobSpec, build_plan, plan_document, resources
from pipeline.status import build_table, table_rows
from pipeline.storage import atomic_write_json, atomic_write_text
from pipeline.waivers import load_waivers

LAUNCHERS = ("auto", "local", "slurm", "debug")
console = Console(highlight=False, soft_wrap=True)
if not console.is_terminal:  # logs and CI: a readable table rather than rich's 80-column default
    console = Console(highlight=False, soft_wrap=True, width=max(console.width, 160))


def new_run_id() -> str:
    return dt.datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


def resolve_launcher(name: str) -> str:
    if name not in LAUNCHERS:
        raise ConfigError("launcher.name", f"{name!r} is not one of {', '.join(LAUNCHERS)}")
    if name == "auto":
        return "slurm" if slurm_available() else "local"
    return name


def validate(cfg: DictConfig, registry: dict[str, stages.Stage]) -> None:
    if cfg.stage.name != "full" and cfg.stage.name not in registry:
        raise ConfigError(
            "stage", f"unknown stage {cfg.stage.name!r}; use full or one of {', '.join(registry)}"
        )
    unknown = [name for name in cfg.get("skip") or () if name not in registry]
    if unknown:
        raise ConfigError("skip", f"unknown stage(s) {unknown}; registered: {', '.join(registry)}")
    _validate_resources(cfg, registry)
    if cfg.container.kind == "apptainer":
        if not cfg.container.image:
            raise ConfigError(
                "container.image", "container=apptainer needs container.image=/path/to/image.sif"
            )
        if not Path(cfg.container.image).is_file():
            raise ConfigError("container.image", f"{cfg.container.image} does not exist or is not a file")
    elif cfg.container.kind != "none":
        raise ConfigError("container.kind", f"{cfg.container.kind!r} is not one of none, apptainer")
    chain = (cfg.get("chain") or {}).get("sbatch")
    if chain and not Path(chain).is_file():
        raise ConfigError("chain.sbatch", f"{chain} does not exist")


def _validate_resources(cfg: DictConfig, registry: dict[str, stages.Stage]) -> None:
    for name, section in cfg.stages.items():
        blocks = {"resources": (section or {}).get("resources") or {}}
        blocks |= {
            f"part_resources.{p}": r or {} for p, r in ((section or {}).get("part_resources") or {}).items()
        }
        for where, block in blocks.items():
            extra = set(block) - set(RESOURCE_KEYS)
            if extra:
                raise ConfigError(
                    f"stages.{name}.{where}", f"unknown key(s) {sorted(extra)}; known: {RESOURCE_KEYS}"
                )
    jobs = [(name, None) for name in [*registry, "gate"]]
    jobs += [(name, part) for name, stage in registry.items() for part in stage.parts]
    for name, part in jobs:
        res = resources(cfg, name, part)
        where = f"stages.{name}.part_resources.{part}" if part else f"stages.{name}.resources"
        for key, floor in (("time_min", 1), ("cpus_per_task", 1), ("mem_gb", 0.001), ("gpus_per_node", 0)):
            if not isinstance(res[key], (int, float)) or res[key] < floor:
                raise ConfigError(f"{where}.{key}", f"expected a number >= {floor}, got {res[key]!r}")


def resolved_config(cfg: DictConfig, executor: str) -> DictConfig:
    """The config the jobs read: absolute paths, the run id, and the executor actually used."""
    out = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    run_id = cfg.run_id or new_run_id()
    run_dir = (Path(cfg.output_root) / "runs" / str(run_id)).resolve()
    with open_dict(out):
        out.run_id, out.run_dir = str(run_id), str(run_dir)
        out.audit_dir = str(Path(cfg.audit_dir).resolve())
        out.checkpoint_dir = str(Path(cfg.checkpoint_dir or run_dir / "checkpoints").resolve())
        _fill_demo_paths(out, run_dir)
        out.launcher.name = executor
        out.wait = bool(executor != "slurm" if cfg.wait is None else cfg.wait)
        for section in ("model", "dataset", "training", "known_good", "release", "cache"):
            if out.get(section) and out[section].get("path"):
                out[section].path = str(Path(out[section].path).resolve())
    assert isinstance(out, DictConfig)
    return out


def _fill_demo_paths(cfg: DictConfig, run_dir: Path) -> None:
    """Null model/dataset/training paths mean the embedded demo: build it once under output_root/demo."""
    _fill_render_demo(cfg, run_dir)
    if not cfg.get("demo") or all(cfg[k].get("path") for k in ("model", "dataset", "training")):
        return
    from pipeline import demo

    built = demo.ensure(cfg.demo, run_dir.parent.parent / "demo")
    for key, path in built.items():
        if not cfg[key].get("path"):
            cfg[key].path = str(path)


def _fill_render_demo(cfg: DictConfig, run_dir: Path) -> None:
    """Null release/cache paths, with render_cache selected, mean the render_cache demo (built once);
    its budgets and sizes then go into stages.render_cache, since the demo's cache is what is checked."""
    selected = cfg.stage.name == "render_cache" or (
        cfg.stage.name == "full" and "render_cache" not in (cfg.get("skip") or ())
    )
    if (
        not cfg.get("demo")
        or not selected
        or all((cfg.get(k) or {}).get("path") for k in ("release", "cache"))
    ):
        return
    from pipeline.demo import render_cache as render_demo

    section = OmegaConf.to_container(cfg.demo.get("render_cache") or OmegaConf.create({}), resolve=True)
    settings = {**section, "variant": cfg.demo.get("variant", "default")}
    built = render_demo.ensure(settings, run_dir.parent.parent / "demo")
    for key in ("release", "cache"):
        cfg[key] = {"path": (cfg.get(key) or {}).get("path") or built[key]}
    cfg.stages.render_cache = OmegaConf.merge(cfg.stages.render_cache, render_demo.stage_overrides(settings))


def git_sha() -> str | None:
    try:
        proc = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False
        )
    except OSError:
        return None
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def launch(cfg: DictConfig) -> int:
    executor = resolve_launcher(cfg.launcher.name)
    try:
        registry = stages.load(cfg.get("plugins") or ())
    except InputError as exc:
        raise ConfigError("plugins", str(exc)) from exc
    validate(cfg, registry)
    try:
        waivers = load_waivers(Path(cfg.waivers_file) if cfg.waivers_file else None)
    except InputError as exc:
        raise ConfigError(exc.field or "waivers_file", str(exc)) from exc
    rcfg = resolved_config(cfg, executor)
    run_dir = Path(rcfg.run_dir)
    jobs = build_plan(rcfg, registry, run_dir)
    extra = {
        "run_id": rcfg.run_id,
        "executor": executor,
        "git_sha": git_sha(),
        "waivers": waivers,
        "image_digest": digest_path(rcfg.container.image) if rcfg.container.get("image") else None,
    }
    if cfg.dry_run:
        return dry_run(jobs, rcfg, run_dir)
    atomic_write_text(run_dir / "config.yaml", OmegaConf.to_yaml(rcfg))
    atomic_write_json(run_dir / "plan.json", plan_document(jobs, **extra))
    console.print(f"run {rcfg.run_id}: {run_dir} ({executor})")
    if executor == "slurm":
        return launch_slurm(jobs, rcfg, run_dir, cfg, extra)
    return launch_local(jobs, rcfg, run_dir, executor)


def dry_run(jobs: list[JobSpec], cfg: DictConfig, run_dir: Path) -> int:
    ids = {job.name: f"JOBID_{job.name}" for job in jobs if not job.reused}
    for job in jobs:
        deps = ", ".join(f"{kind}:{name}" for name, kind in job.deps) or "none"
        if job.reused:
            print(f"# {job.name}: result reused (inputs unchanged), not submitted")
            continue
        print(f"# ---- {job.name} (depends on: {deps}) ----")
        print(sbatch_preview(job, cfg, run_dir, ids))
    print("dry run: nothing submitted")
    return 0


def _record_jobs(run_dir: Path, rows: dict[str, dict[str, Any]]) -> None:
    atomic_write_json(run_dir / "jobs.json", rows)


def launch_slurm(
    jobs: list[JobSpec], cfg: DictConfig, run_dir: Path, raw: DictConfig, extra: dict[str, Any]
) -> int:
    rows: dict[str, dict[str, Any]] = {}

    def on_submit(spec: JobSpec, job: Any) -> None:
        rows[spec.name] = {"job_id": job.job_id, "state": "SUBMITTED"}
        _record_jobs(run_dir, rows)

    submitted = submit_slurm(jobs, cfg, run_dir, on_submit)
    console.print(build_table(run_dir, _rows(jobs, rows), f"run {cfg.run_id}: submitted to Slurm"))
    gate_id = submitted["gate"].job_id
    atomic_write_json(run_dir / "plan.json", plan_document(jobs, **extra, gate_job_id=gate_id))
    console.print(f"gate job: {gate_id}")
    chain = (raw.get("chain") or {}).get("sbatch")
    if chain:
        console.print(f"chained job: {chain_sbatch(Path(chain), gate_id)} (afterok:{gate_id})")
    if not cfg.wait:
        return 0
    return follow_slurm(jobs, submitted, run_dir, rows, cfg)


def _rows(jobs: list[JobSpec], rows: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return table_rows([job.to_dict() for job in jobs], rows)


def follow_slurm(
    jobs: list[JobSpec],
    submitted: dict[str, Any],
    run_dir: Path,
    rows: dict[str, dict[str, Any]],
    cfg: DictConfig,
) -> int:
    with Live(console=console, auto_refresh=False) as live:
        while True:
            for name, job in submitted.items():
                rows[name]["state"] = job.state
            live.update(build_table(run_dir, _rows(jobs, rows), f"run {cfg.run_id}"), refresh=True)
            if all(r["state"].split()[0] in TERMINAL for r in rows.values()):
                break
            time.sleep(float(cfg.launcher.poll_s))
    console.print()
    _record_jobs(run_dir, rows)
    return gate_exit_code(run_dir)


def launch_local(jobs: list[JobSpec], cfg: DictConfig, run_dir: Path, executor: str) -> int:
    with Live(console=console, auto_refresh=False) as live:

        def on_change(states: dict[str, Any]) -> None:
            rows = {
                n: {"job_id": s.job_id, "state": s.state + (f" ({s.reason})" if s.reason else "")}
                for n, s in states.items()
            }
            _record_jobs(run_dir, rows)
            live.update(
                build_table(run_dir, _rows(jobs, rows), f"run {cfg.run_id} ({executor})"), refresh=True
            )

        states = run_dag(jobs, cfg, run_dir, executor, on_change)
    console.print()
    console.print(f"gate job: {states['gate'].job_id}")
    return gate_exit_code(run_dir)


def gate_exit_code(run_dir: Path) -> int:
    gate = run_dir / "gate.json"
    if not gate.exists():
        console.print(f"gate: no record at {gate}; the gate job itself failed (see {run_dir}/submitit)")
        return 1
    record = json.loads(gate.read_text())
    console.print(f"gate: {record['gate']} ({record['verdict']})")
    for reason in record["reasons"]:
        console.print(f"  - {reason}", markup=False)
    return 0 if record["gate"] == "clear" else 3


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    try:
        code = launch(cfg)
    except ConfigError as exc:
        console.print(f"config error: {exc}", markup=False)
        console.print("nothing was submitted", markup=False)
        code = 2
    except SubmissionError as exc:
        console.print(f"submission failed: {exc}", markup=False)
        code = 2
    sys.exit(code)


if __name__ == "__main__":
    main()
