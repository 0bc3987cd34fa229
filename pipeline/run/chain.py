"""The training job chained on the gate: the command typed after `--` (`training.command`), as typed.

Why a generated script: the command is an argv list kept exactly as typed (quotes, spaces, JSON braces
such as `--rename_map={"a": "b"}`). Spliced into shell text it would be parsed a second time, and an item
holding `$(...)` or `;` would become shell syntax. So the script sbatch runs is fixed text ending in
`exec "$@"`, and the command reaches it as sbatch's own script arguments
(`sbatch --dependency=afterok:<gate> [chain.args] <script> <argv...>`): every item arrives as one word,
unchanged. The only config values in the script are `training.env`'s, each `shlex.quote`d after its name
was checked, so that the job runs under the environment the determinism stage proved (its bare pair reads
the same block). The script is kept in the run folder (`RunFolder.chain_script`).

Locally (`launcher=local|debug`) nothing runs unasked: after a clear gate the command runs here only with
`chain.run_local=true`, otherwise it is printed shell-quoted for copy-paste. A blocked gate (or no
complete record) never starts it.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from pipeline.errors import ConfigError
from pipeline.readers.lerobot_command import training_argv
from pipeline.record.remedy import corrected_lines_of
from pipeline.record.runfolder import RunFolder
from pipeline.run.executors import chain_argv

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
PREVIEW_GATE = "JOBID_gate"  # the gate's id in a dry run, as `launch.dry_run` names every job's


def chain_args(cfg: Any) -> list[str]:
    """The user's sbatch options for the chained job (`chain.args`, checked at launch)."""
    return [str(a) for a in (cfg.get("chain") or {}).get("args") or ()]


def env_lines(cfg: Any) -> list[str]:
    """`training.env` as `export NAME=<quoted>` / `unset NAME` lines; a name that is not a shell
    variable name is refused (it could not be set, and would be shell text)."""
    block = (cfg.get("training") or {}).get("env") or {}
    plain = OmegaConf.to_container(block, resolve=True) if OmegaConf.is_config(block) else block
    if not isinstance(plain, dict):
        raise ConfigError("training.env", f"expected a mapping NAME -> value (null: unset), got {plain!r}")
    lines = []
    for name, value in plain.items():
        if not _ENV_NAME.fullmatch(str(name)):
            raise ConfigError(
                f"training.env.{name}", "expected an environment variable name ([A-Za-z_][A-Za-z0-9_]*)"
            )
        lines.append(f"unset {name}" if value is None else f"export {name}={shlex.quote(str(value))}")
    return lines


def script_text(cfg: Any) -> str:
    """The chained job's batch script: no config value but `training.env`'s, the command as "$@"."""
    return "\n".join(
        [
            "#!/bin/bash",
            f"# hpc-preflight run {cfg.get('run_id') or '<run id>'}: the training command, chained",
            "# afterok on the gate job. sbatch hands the command to this script as its arguments, as",
            '# typed; "$@" runs them without a shell reading them again. Resources: chain.args.',
            *env_lines(cfg),
            'exec "$@"',
            "",
        ]
    )


def write_script(cfg: DictConfig, folder: RunFolder) -> Path:
    """The script in the run folder, executable (sbatch copies it; a user may rerun it by hand)."""
    from pipeline.storage import atomic_write_text

    path = atomic_write_text(folder.chain_script, script_text(cfg))
    path.chmod(path.stat().st_mode | 0o111)
    return path


def preview(cfg: DictConfig, folder: RunFolder, executor: str) -> list[str]:
    """The dry run's lines for the chained job: the script and the exact sbatch argv (Slurm), or the
    command a clear gate would run or print (here)."""
    command = training_argv(cfg)
    script = (cfg.get("chain") or {}).get("sbatch")
    if executor != "slurm":
        if not command:
            return []
        run = bool((cfg.get("chain") or {}).get("run_local"))
        what = "runs here" if run else "is printed (chain.run_local=true runs it here)"
        return [f"# ---- training command: after a clear gate it {what} ----", shlex.join(command)]
    if script:
        argv = chain_argv(Path(str(script)), PREVIEW_GATE, chain_args(cfg))
        head = f"# ---- chained job: {script} (afterok:{PREVIEW_GATE}) ----"
        return [head, f"sbatch argv: {shlex.join(argv)}"]
    if not command:
        return []
    argv = chain_argv(folder.chain_script, PREVIEW_GATE, chain_args(cfg), command)
    return [
        f"# ---- chained training job (afterok:{PREVIEW_GATE}): {folder.chain_script} ----",
        script_text(cfg).rstrip("\n"),
        f"sbatch argv: {shlex.join(argv)}",
    ]


def after_local_gate(cfg: DictConfig, code: int, say: Any) -> int:
    """After a local run's gate: start the command (a clear gate and `chain.run_local=true`; the
    launch then exits with its status), print it (a clear gate), or say it was not started."""
    command = training_argv(cfg)
    if not command:
        return code
    if code != 0:
        say("training command not started: the gate did not clear")
        for line in corrected_lines_of(RunFolder(Path(str(cfg.run_dir)))) if cfg.get("run_dir") else []:
            say(line)  # the corrected line the record proposes: printed to paste, never run
        return code
    if not (cfg.get("chain") or {}).get("run_local"):
        say(f"clear to train; run (or set chain.run_local=true to run it here): {shlex.join(command)}")
        return 0
    say(f"training command (gate clear): {shlex.join(command)}")
    return run_command(command, cfg, say)


def run_command(command: Sequence[str], cfg: Any, say: Any) -> int:
    """The command here, in the launch's folder, under `training.env` (as the Slurm script sets it);
    its exit status, or 127 with one line when it cannot start (as a shell says)."""
    env_lines(cfg)  # the names were checked at launch; a bad one is refused the same way here
    block = (cfg.get("training") or {}).get("env") or {}
    env = dict(os.environ)
    for name, value in block.items():
        env.pop(str(name), None)
        if value is not None:
            env[str(name)] = str(value)
    try:
        return subprocess.run(list(command), env=env, check=False).returncode
    except OSError as exc:
        say(f"training command could not start: {command[0]!r}: {exc.strerror or exc}")
        return 127
