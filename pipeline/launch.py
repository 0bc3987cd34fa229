"""`python -m pipeline.launch stage=full`: plan the checks, submit them, and (optionally) follow the gate.

Everything is a Hydra override (`--cfg job` shows the composed config). The launch itself never runs a
check: it validates the config (so a typo fails before anything is queued), fixes the run directory,
writes `config.yaml` and `plan.json` there, and hands the jobs to an executor.
"""

from __future__ import annotations

import datetime as dt
import secrets
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf, open_dict

from pipeline import stages
from pipeline.cli import deploy_command, training_command
from pipeline.cli.checks import validate
from pipeline.cli.compose import attach_command, attach_deploy
from pipeline.cli.runguard import run_lock, validate_run_folders
from pipeline.demo import provider
from pipeline.errors import (
    FULL_ERRNOS,
    ConfigError,
    InputError,
    PreflightError,
    RecordError,
    SubmissionError,
    disk_full,
    one_line,
)
from pipeline.readers.deploy import deploy_argv
from pipeline.readers.lerobot_command import training_argv
from pipeline.readers.sif import sha256_file
from pipeline.record.fingerprint import digest_path
from pipeline.record.runfolder import CONF_DIR, NO_GATE_EXIT, RunFolder
from pipeline.record.waivers import load_waivers
from pipeline.run import chain, inprocess
from pipeline.run import input_checks as launch_inputs
from pipeline.run.executors import chain_sbatch, require_slurm, sbatch_preview, slurm_available, submit_slurm
from pipeline.run.follow import console, follow_slurm, launch_local
from pipeline.run.follow import job_rows as _rows
from pipeline.run.local_runner import adoptable
from pipeline.run.plan import (
    JobSpec,
    audit_key,
    build_plan,
    history_notes,
    plan_document,
    write_reused,
)
from pipeline.run.status import CHAINED, build_table
from pipeline.stages import container_image

LAUNCHERS = ("auto", "local", "slurm", "debug")
# The stages' typed configs reach Hydra's ConfigStore in `compose_command_line` (through `cli`), before
# anything composes: importing this module imports no stage and stores nothing.


def new_run_id() -> str:
    return dt.datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


def resolve_launcher(name: str) -> str:
    if name not in LAUNCHERS:
        raise ConfigError("launcher.name", f"{name!r} is not one of {', '.join(LAUNCHERS)}")
    if name == "auto":
        return "slurm" if slurm_available() else "local"
    return name


def resolved_config(cfg: DictConfig, executor: str) -> DictConfig:
    """The config the jobs read: absolute paths, the run id, and the executor actually used."""
    out = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    run_id = str(cfg.run_id or new_run_id())
    output_root = Path(cfg.output_root).resolve()
    run_dir = RunFolder.of(output_root, run_id).root
    with open_dict(out):
        out.run_id, out.run_dir, out.output_root = run_id, str(run_dir), str(output_root)
        out.audit_dir = str(Path(cfg.audit_dir).resolve())
        if (out.get("audit") or {}).get("key_file"):  # read by the gate job, wherever it starts
            out.audit.key_file = str(Path(out.audit.key_file).expanduser().resolve())
        out.checkpoint_dir = str(Path(cfg.checkpoint_dir or run_dir / "checkpoints").resolve())
        if out.gate.get("junit"):  # relative to where the user launched, not to the gate job's cwd
            out.gate.junit = str(Path(out.gate.junit).expanduser().resolve())
        container_image.prepare(out)  # absolute image/record paths
        provider.provide(out, load_registry(out))  # the demo's inputs, only when the launch named none
        out.launcher.name = executor
        attach_command(out, training_argv(cfg))  # literal again: OmegaConf.create re-reads `${`
        attach_deploy(out, deploy_argv(cfg))
        out.wait = bool(executor != "slurm" if cfg.wait is None else cfg.wait)
        for section in ("model", "dataset", "training", "known_good", "release", "cache", "deploy"):
            if out.get(section) and out[section].get("path"):
                out[section].path = str(Path(out[section].path).resolve())
    assert isinstance(out, DictConfig)
    return out


def unrunnable(cfg: DictConfig, registry: dict[str, stages.Stage]) -> None:
    """`stage=<name>` whose inputs were not given is refused (exit 2) naming the keys that would run it;
    under `stage=full` such a stage is planned as skipped instead (`plan.skipped_job`)."""
    if cfg.stage.name == "full":
        return
    stage = registry.get(cfg.stage.name)
    missing = stages.missing_keys(stage, cfg) if stage else ()
    if missing:
        keys = ", ".join(k.replace("|", " or ") for k in missing)
        raise ConfigError(missing[0].split("|")[0], f"stage={stage.name} has no input to judge: set {keys}")


def git_sha() -> str | None:
    try:
        proc = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False
        )
    except OSError:
        return None
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def load_registry(cfg: DictConfig) -> dict[str, stages.Stage]:
    """The built-in stages and the configured plugins; a plugin that fails to import is a config error."""
    try:
        return stages.load(cfg.get("plugins") or ())
    except InputError as exc:
        raise ConfigError("plugins", str(exc).removeprefix("plugins: ")) from None


def launch(cfg: DictConfig) -> int:
    """Validate, resolve and plan (nothing on disk yet), then write the run folder and hand the jobs to
    the executor. A failure before any job was queued removes what this launch created."""
    executor = resolve_launcher(cfg.launcher.name)
    if executor == "local" and cfg.stage.name == "contract" and not cfg.dry_run:
        from pipeline.stages.contract.drawing import prestart

        prestart()  # a dataset alone: its plots' drawer imports matplotlib while this launch plans
    registry = load_registry(cfg)
    validate(cfg, registry)
    if executor == "slurm" and not cfg.dry_run:
        require_slurm()  # before the demo is built or any folder is made: nothing left behind
    validate_run_folders(cfg)
    try:
        waivers = load_waivers(Path(cfg.waivers_file) if cfg.waivers_file else None)
    except InputError as exc:
        raise ConfigError(exc.field or "waivers_file", str(exc)) from exc
    audit_key(cfg)  # a bad audit.key_file is one line now, not a gate that cannot seal its record
    launch_inputs.blank_inputs(cfg, registry)  # `dataset.path=''` is a typed input, never the demo
    if said := training_command.fill(cfg):  # A, B, C from the lerobot-train command after `--`
        _say(said)
        if note := training_command.dataset_note(cfg):
            _say(note)
    deploy_command.fill(cfg)  # D: the lines naming where the policy will run, kept for the fingerprint
    launch_inputs.check_inputs(cfg, registry)  # the paths the user gave, before any demo is built
    if provider.named_inputs(cfg, registry) or not cfg.get("demo"):
        unrunnable(cfg, registry)  # no demo will fill anything: refused now, before anything is built
    elif training_argv(cfg):  # the demo's gate must never stand in front of the user's own training
        raise ConfigError(
            "training.command",
            f"{shlex.join(training_argv(cfg))[:120]} is not lerobot-train, so it names no input and the "
            "gate would judge the embedded demo: set model.path, dataset.path and training.path",
        )
    rcfg = resolved_config(cfg, executor)
    folder = RunFolder(Path(rcfg.run_dir))
    launch_inputs.check_inputs(rcfg, registry)  # again with the demo's paths filled in
    unrunnable(rcfg, registry)
    jobs = build_plan(rcfg, registry, folder)  # fingerprints: only inputs that passed their checks
    for job in jobs:
        if job.skipped:
            _say(job.skipped)
    extra = {
        "history": history_notes(rcfg),
        "run_id": rcfg.run_id,
        "launch_id": secrets.token_hex(8),  # this launch of the run id: what its array partials carry
        "executor": executor,
        "git_sha": git_sha(),
        "waivers": waivers,
        "image_digest": digest_path(rcfg.container.image) if rcfg.container.get("image") else None,
        "image_sha256": sha256_file(rcfg.container.image) if rcfg.container.get("image") else None,
    }
    if cfg.dry_run:
        return dry_run(jobs, rcfg, folder)
    created = folder.missing_parents()
    with run_lock(folder, created):
        return _launch_locked(jobs, rcfg, folder, executor, extra, created)


def _launch_locked(
    jobs: list[JobSpec],
    rcfg: DictConfig,
    folder: RunFolder,
    executor: str,
    extra: dict[str, Any],
    created: list[Path],
) -> int:
    """Write the run folder and run or submit the jobs, holding the run's lock. A write that fails
    (full or read-only filesystem) is one line; before any job was queued nothing is left behind."""
    try:
        adopt = adoptable(_previous_jobs(folder), folder) if executor == "local" else {}
        folder.clear_gate()  # an earlier decision of this run id never stands for this launch
        folder.write_config(rcfg)
        container_image.make_bind_sources(rcfg)  # apptainer refuses a --bind whose source does not exist
        folder.write_plan(plan_document(jobs, **extra))
        write_reused(folder, jobs)  # results taken from the audit history, before any job can read them
        console.print(f"run {rcfg.run_id}: {folder.root} ({executor})")
        if executor == "slurm":
            return launch_slurm(jobs, rcfg, folder, extra)
        if inprocess.chosen(jobs, rcfg, executor, bool(adopt)):  # no GPU stage, no container: no DAG
            code = inprocess.run(jobs, rcfg, folder)
        else:
            code = launch_local(jobs, rcfg, folder, executor, adopt)
        return chain.after_local_gate(rcfg, code, _say)
    except PreflightError:
        if not _queued(folder):  # no job was ever queued: leave nothing behind
            folder.discard(created)
        raise
    except OSError as exc:
        folder.sweep_partial()
        where = f"{exc.filename}: " if exc.filename else ""
        if not _queued(folder):
            folder.discard(created)
            if exc.errno in FULL_ERRNOS:
                kept = f"nothing was queued and {folder.root} was removed"
                raise disk_full(exc.filename or folder.root, exc, needed=None, kept=kept) from None
            raise InputError(f"cannot write the run folder: {where}{exc.strerror or exc}") from None
        what = f"run folder write failed: {where}{exc.strerror or exc}"
        raise RecordError(what, path=exc.filename) from None


def dry_run(jobs: list[JobSpec], cfg: DictConfig, folder: RunFolder) -> int:
    ids = {job.name: f"JOBID_{job.name}" for job in jobs if not job.reused}
    for job in jobs:
        deps = ", ".join(f"{kind}:{name}" for name, kind in job.deps) or "none"
        if job.skipped:
            print(f"# {job.skipped}")
            continue
        if job.reused:
            where = f" from run {job.reused_from}" if job.reused_from else ""
            print(f"# {job.name}: result reused{where} (inputs unchanged), not submitted")
            continue
        print(f"# ---- {job.name} (depends on: {deps}) ----")
        print(sbatch_preview(job, cfg, folder, ids))
    for line in chain.preview(cfg, folder, str(cfg.launcher.name)):
        print(line)
    print("dry run: nothing submitted")
    return 0


def launch_slurm(jobs: list[JobSpec], cfg: DictConfig, folder: RunFolder, extra: dict[str, Any]) -> int:
    rows: dict[str, dict[str, Any]] = {}

    def on_submit(spec: JobSpec, job: Any) -> None:
        rows[spec.name] = {"job_id": job.job_id, "state": "SUBMITTED"}
        folder.write_jobs(rows)

    submitted = submit_slurm(jobs, cfg, folder, on_submit)
    console.print(build_table(folder, _rows(jobs, rows), f"run {cfg.run_id}: submitted to Slurm"))
    gate_id = submitted["gate"].job_id
    folder.write_plan(plan_document(jobs, **extra, gate_job_id=gate_id))
    console.print(f"gate job: {gate_id}")
    script, command = (cfg.get("chain") or {}).get("sbatch"), training_argv(cfg)
    if script or command:
        path = Path(script) if script else chain.write_script(cfg, folder)
        job = _chain(path, submitted, chain.chain_args(cfg), command)
        console.print(f"chained job: {job} (afterok:{gate_id})")
        rows[CHAINED] = {"job_id": job, "state": "SUBMITTED", "depends_on": f"afterok:{gate_id}"}
        folder.write_jobs(rows)  # preflight-status shows the training job with its dependency
    if not cfg.wait:
        return 0
    return follow_slurm(jobs, submitted, folder, rows, cfg)


def _chain(script: Path, submitted: dict[str, Any], args: list[str], command: list[str]) -> str:
    """Chain the training job on the gate. If sbatch refuses it, the checks already queued keep running
    (they still write the gate record, which is worth having); the error says how to stop them."""
    try:
        return chain_sbatch(script, submitted["gate"].job_id, args, command)
    except SubmissionError as exc:
        queued = " ".join(str(job.job_id) for job in submitted.values())
        raise SubmissionError(
            f"{exc}; the {len(submitted)} check job(s) already queued keep running and the gate "
            f"({submitted['gate'].job_id}) will still write its record; to stop them: scancel {queued}",
            path=exc.path,
        ) from exc


def _previous_jobs(folder: RunFolder) -> dict[str, dict[str, Any]]:
    """The jobs an earlier launch of this run recorded; an unreadable jobs.json means none to adopt."""
    try:
        return folder.load_jobs()
    except RecordError:
        return {}


def _queued(folder: RunFolder) -> bool:
    """A job was started or queued: jobs.json, or a submitit `<id>_submitted.pkl` (written once a job
    really started; an sbatch refusal leaves only the pickled call and the script)."""
    return folder.jobs_file.exists() or any(folder.submitit_dir.parent.glob("*/*_submitted.pkl"))


def _say(line: str) -> None:
    console.print(line, markup=False)


def main_code(cfg: DictConfig) -> int:
    """The launch's exit code: the gate's (0 clear, 3 blocked, 1 no complete record), or 2 with one line
    naming the key or file when the config, an input or the scheduler refused the run."""
    try:
        return launch(cfg)
    except ConfigError as exc:
        _say(f"config error: {one_line(exc)} (nothing was submitted)")
    except SubmissionError as exc:
        _say(f"submission failed: {one_line(exc)}")
    except RecordError as exc:
        _say(f"error: {one_line(exc)} (no complete gate record)")
        return NO_GATE_EXIT
    except PreflightError as exc:
        _say(f"error: {one_line(exc)} (nothing was submitted)")
    return 2


_TRAINING_COMMAND: list[str] = []  # after `--` on the command line, for Hydra's own run (cli sets it)


# an absolute path: a console script (`preflight-launch`) calls `main` from outside the package, where
# Hydra would look for a relative "conf" as the Python package `pipeline.conf` (it has no __init__.py)
@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> None:
    attach_command(cfg, _TRAINING_COMMAND)
    sys.exit(main_code(cfg))


def cli() -> None:
    """The console script and `python -m` entry: the command line composed once (launch_compose), so that
    Hydra's composition errors are one line and exit 2 like every other refused launch, and a plain run
    starts from that config; Hydra's own run only for what else its command line offers."""
    from pipeline.cli.compose import compose_command_line, split_training_command

    overrides, command = split_training_command(sys.argv[1:])
    if "--" in sys.argv[1:] and not command:  # typed as the user's command: never the demo's gate instead
        _say("config error: training.command: `--` with no command after it; give the training command "
             "after `--`, or leave `--` out (nothing was submitted)")  # fmt: skip
        sys.exit(2)
    composed = compose_command_line(overrides, command)
    if composed.problem is not None:
        _say(f"config error: {composed.problem} (nothing was submitted)")
        sys.exit(2)
    if composed.cfg is None:
        sys.argv[1:] = overrides
        _TRAINING_COMMAND[:] = command
        main()
        return
    sys.exit(main_code(composed.cfg))


if __name__ == "__main__":
    cli()
