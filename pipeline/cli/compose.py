"""The command line composed once, before anything runs: a composition error is one line and exit 2, and a
plain run goes on with this config instead of Hydra composing it twice more.

Why: `@hydra.main` reports an unknown key, a value of the wrong type or a bad override as several lines
ending in "Set the environment variable HYDRA_FULL_ERROR=1" and exit 1, where every other bad input of a
launch is exit 2 with one line naming the key. Composing the same overrides through Hydra's compose API
first (same config folder, same `--config-dir`) lets the launch name the key, what was expected (the
type, or the valid keys nearest to the one typed) and stop before anything is built or submitted.
`@hydra.main` would then compose the same command line twice more (once for the run mode, once for the
run, ~0.2 s of CPU each): for a plain run the config composed here is the one it would pass, since the
launch's `hydra:` section changes nothing (no output folder, no chdir, no logging), so the launch takes
it. Anything else on the command line (`--help`, `--cfg`, `--multirun`, `--config-path`, ...) is left to
Hydra's own run.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra._internal.utils import get_args_parser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException, ValidationError

from pipeline import stages
from pipeline.record.runfolder import CONF_DIR

CONFIG_NAME = "config"
MAX_LISTED = 12  # valid keys named when none is near the one typed


@dataclass(frozen=True)
class Composed:
    """The command line as the launch composed it: `cfg` for a plain run, `problem` (one line) when it does
    not compose, neither when Hydra's own run must decide (help, `--cfg`, multirun, a second search path)."""

    cfg: DictConfig | None = None
    problem: str | None = None


def split_training_command(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """The launch's own arguments, and the training command: everything after the first lone `--`, kept as
    the argv list it is (never joined into a shell string), so that a flag like
    `--rename_map='{"a": "b"}'` reaches the record, the determinism runs and the chained job unchanged."""
    argv = list(argv)
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1 :]


DEPLOY_PROGRAMS = ("lerobot-eval", "lerobot-record")


def split_deploy_command(command: Sequence[str]) -> tuple[list[str], list[str]]:
    """The training command and the deploy line: the deploy line starts at a lone `--` followed by
    lerobot-eval or lerobot-record (or the whole command is one). Only that pair splits, so a training
    command that passes its own `--` to a program it wraps is kept whole."""
    command = list(command)
    if command and Path(command[0]).name in DEPLOY_PROGRAMS:
        return [], command
    for i in range(len(command) - 1):
        if command[i] == "--" and Path(command[i + 1]).name in DEPLOY_PROGRAMS:
            return command[:i], command[i + 1 :]
    return command, []


def attach_command(cfg: DictConfig, command: Sequence[str]) -> None:
    """`training.command` (and `deploy.command`, the deploy line after its own `--`) set to the argv
    exactly as typed: set through OmegaConf, not Hydra's override grammar (which would re-parse quotes,
    commas and backslashes), with `${` escaped so that OmegaConf never resolves an item as an
    interpolation."""
    training, deploy = split_deploy_command(command)
    if training:
        with open_dict(cfg):
            cfg.training.command = [_literal(item) for item in training]
    attach_deploy(cfg, deploy)


def attach_deploy(cfg: DictConfig, deploy: Sequence[str]) -> None:
    """`deploy.command` set to the deploy line as typed, as `attach_command` sets the training command."""
    if deploy:
        with open_dict(cfg):
            if cfg.get("deploy") is None:
                cfg.deploy = {}
            cfg.deploy.command = [_literal(item) for item in deploy]


def _literal(item: str) -> str:
    return re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", item)


def compose_command_line(argv: Sequence[str], command: Sequence[str] = ()) -> Composed:
    """`argv` composed as the launch would, with the training command after `--` (if any) in
    `training.command`."""
    stages.load()  # the stages' typed configs are in Hydra's ConfigStore before anything composes
    args = get_args_parser().parse_args(list(argv))
    if args.help or args.hydra_help or args.info or args.shell_completion or args.experimental_rerun:
        return Composed()
    overrides = list(args.overrides)
    if args.config_dir is not None:
        if any(o.lstrip("+~").startswith("hydra.searchpath") for o in overrides):
            return Composed()  # both name a search path: Hydra's own run decides how they combine
        overrides.append(f"hydra.searchpath=[file://{Path(args.config_dir).resolve()}]")
    try:
        cfg = _compose(args.config_name or CONFIG_NAME, overrides)
    except (HydraException, OmegaConfBaseException) as exc:
        return Composed(problem=describe(exc, args.config_name or CONFIG_NAME, overrides))
    plain = not (args.cfg or args.multirun or args.config_path or args.package)
    attach_command(cfg, command)
    return Composed(cfg=cfg if plain else None)


def _compose(name: str, overrides: list[str]) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="preflight"):
        return compose(config_name=name, overrides=overrides)


def describe(exc: BaseException, name: str, overrides: list[str]) -> str:
    """One line: the key, and what was expected there."""
    cause = exc.__cause__ if isinstance(exc.__cause__, OmegaConfBaseException) else exc
    key = getattr(cause, "full_key", None)
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and key:
        return _unknown_key(str(key), name, overrides)
    if isinstance(cause, ValidationError) and key:
        return f"{key}: {_first_line(cause)}"
    options = getattr(exc, "options", None)  # a config group option that does not exist
    return _first_line(exc) + (f" (options: {', '.join(sorted(options))})" if options else "")


def _unknown_key(key: str, name: str, overrides: list[str]) -> str:
    """`key` is not in its section: name the valid keys nearest to the one typed."""
    parent, _, leaf = key.rpartition(".")
    rest = [o for o in overrides if o.lstrip("+~").split("=", 1)[0] != key]
    try:
        section = OmegaConf.select(_compose(name, rest), parent) if parent else _compose(name, rest)
    except (HydraException, OmegaConfBaseException):
        section = None
    valid = sorted(str(k) for k in section.keys()) if isinstance(section, DictConfig) else []
    near = difflib.get_close_matches(leaf, valid, n=3, cutoff=0.5)
    more = f", ... ({len(valid)} in all)" if len(valid) > MAX_LISTED else ""
    listed = ", ".join(valid[:MAX_LISTED]) + more
    hint = f"did you mean {', '.join(near)}?" if near else f"valid keys: {listed or 'none'}"
    where = f"'{parent}'" if parent else "the top level"
    return f"{key}: no such key in {where} ({hint}; a new key needs a leading '+')"


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = next((line for line in lines if not line.startswith(("full_key", "object_type"))), "")
    return text or type(exc).__name__
