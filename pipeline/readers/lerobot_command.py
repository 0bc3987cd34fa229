"""A `lerobot-train` command line, read before the run: the base it names (A), the dataset (C), and the
training config it composes (B).

Before training, a LeRobot user has none of the files the gate judges after a run (`train_config.json`
is written when training starts); they have a command line. This reads it the way lerobot-train does:
`--policy.path` is a folder or a Hub id whose files sit in the local Hugging Face cache (compute nodes
run offline, so only the cache is looked in, with huggingface_hub's own lookup); `--dataset.repo_id`
lives under `--dataset.root` or `HF_LEROBOT_HOME/<repo_id>`. Anything else on the line (`--batch_size`,
`--policy.device`, ...) is kept as typed. A command that is not lerobot-train is not read here: it stays
the user's command, chained as typed, and the inputs are given as keys.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from pipeline.errors import InputError
from pipeline.readers import hub_cache
from pipeline.readers.lerobot_checks import LEROBOT_WINDOWS
from pipeline.storage.files import load_yaml, read_json

FIELD = "training.command"
PROGRAMS = ("lerobot-train",)
MODULES = ("lerobot.scripts.lerobot_train", "lerobot.scripts.train")
INTERPRETER_OPTIONS_WITH_VALUE = ("-X", "-W", "--check-hash-based-pycs")  # python's options taking a value


@dataclass(frozen=True)
class LeRobotCommand:
    """The lerobot-train argv and its `--key=value` flags (dotted keys, each given once)."""

    argv: tuple[str, ...]
    flags: Mapping[str, str] = field(default_factory=dict)
    file: Mapping[str, Any] = field(default_factory=dict)  # `--config_path`'s training config, as read

    def get(self, key: str) -> str | None:
        """A flag as typed, else the `--config_path` file's value (JSON text where it is not a string):
        lerobot reads the file first and the flags over it."""
        if key in self.flags:
            return self.flags[key]
        node: Any = self.file
        for part in key.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        return node if node is None or isinstance(node, str) else json.dumps(node)

    @property
    def resumes(self) -> bool:
        return _scalar(self.flags.get("resume")) is True

    @property
    def args(self) -> list[str]:
        """The items after the program (`lerobot-train`, or `python -m <lerobot train module>`), as typed."""
        return list(self.argv[_args_start(self.argv) :])

    @property
    def policy_path(self) -> str | None:
        """`--policy.path`; on `--resume=true`, the checkpoint's `pretrained_model` folder that holds the
        `--config_path` file (lerobot resumes the weights saved beside it)."""
        given = self.flags.get("policy.path")
        if given or not self.resumes:
            return given
        return str(Path(self.flags["config_path"]).expanduser().parent)

    @property
    def policy_type(self) -> str | None:
        return self.get("policy.type")

    @property
    def repo_id(self) -> str | None:
        return self.get("dataset.repo_id")

    @property
    def env_type(self) -> str | None:
        return self.get("env.type")

    @property
    def env_flags(self) -> dict[str, str]:
        """The `--env.*` flags but the type, keyed by the env config's own field names."""
        return {
            k.removeprefix("env."): v
            for k, v in self.flags.items()
            if k.startswith("env.") and k != "env.type"
        }

    @property
    def rename_map(self) -> dict[str, str]:
        raw = self.get("rename_map")
        value = _value(raw, "rename_map") if raw else {}
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise InputError(
                f"{FIELD}: --rename_map={raw!r:.120} is not a JSON mapping of dataset key -> policy key",
                field=FIELD,
            )
        return {str(k): v for k, v in value.items()}

    @property
    def episodes(self) -> list[int] | None:
        raw = self.get("dataset.episodes")
        if raw is None:
            return None
        value = _value(raw, "dataset.episodes")
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise InputError(
                f"{FIELD}: --dataset.episodes={raw!r:.120} is not a list of episode indices", field=FIELD
            )
        return value


def training_argv(cfg: Any) -> list[str]:
    """`training.command`, the command typed after `--`, as the argv list it was typed (OmegaConf's `${`
    escapes undone); empty when none was given. Every reader of the command goes through here."""
    section = cfg.get("training") if hasattr(cfg, "get") else None
    command = (section or {}).get("command") or []
    items = OmegaConf.to_container(command, resolve=True) if OmegaConf.is_config(command) else command
    return [str(item) for item in items]


def is_lerobot_train(argv: Sequence[str]) -> bool:
    """`lerobot-train ...` (any path to it) or `python -m lerobot.scripts.lerobot_train ...`."""
    return bool(argv) and (Path(argv[0]).name in PROGRAMS or _module_at(argv) is not None)


def _module_at(argv: Sequence[str]) -> int | None:
    """The index after `-m <lerobot train module>` when argv runs it through an interpreter. Python runs
    the first of `-c`, `-m` or a script it meets, and everything after it is that program's argv: so `-m`
    counts only where no `-c`, script or `-` comes before it (`python -c CODE -m lerobot...` runs CODE)."""
    i = 1
    while i < len(argv):
        item = argv[i]
        if item == "-m" or (item.startswith("-m") and not item.startswith("--")):
            module = argv[i + 1] if item == "-m" and i + 1 < len(argv) else item[2:]
            return (i + 2 if item == "-m" else i + 1) if module in MODULES else None
        if item in INTERPRETER_OPTIONS_WITH_VALUE:
            i += 2
            continue
        if not item.startswith("-") or item == "-" or item.startswith("-c") or item == "--":
            return None  # a script, stdin, `-c CODE`: what runs is not `-m`
        i += 1
    return None


def parse(argv: Sequence[str]) -> LeRobotCommand | None:
    """The command's flags, or None when it is not lerobot-train."""
    if not is_lerobot_train(argv):
        return None
    flags = parse_flags(argv[_args_start(argv) :])
    return LeRobotCommand(tuple(argv), flags, config_file(flags))


def config_file(flags: Mapping[str, str]) -> dict[str, Any]:
    """`--config_path`'s training config (JSON or YAML, a regular file of bounded size, read without
    blocking on a FIFO), a folder meaning its train_config.json as lerobot takes it; {} without one.
    `--resume=true` without it is refused as lerobot refuses it."""
    raw = flags.get("config_path")
    if not raw:
        if _scalar(flags.get("resume")) is True:
            raise InputError(
                f"{FIELD}: --resume=true needs --config_path=<checkpoint>/pretrained_model/train_config.json "
                "(lerobot resumes from the checkpoint's own training config)",
                field=FIELD,
            )
        return {}
    path = Path(raw).expanduser()
    path = path / "train_config.json" if path.is_dir() else path
    try:
        data = load_yaml(path, "a lerobot-train training config")  # YAML reads JSON too
    except InputError as exc:
        raise InputError(f"{FIELD}: --config_path={raw}: {exc}", path=path, field=FIELD) from None
    if not isinstance(data, dict):
        raise InputError(f"{FIELD}: --config_path={raw}: expected a mapping (a training config)", field=FIELD)
    return data


def parse_flags(args: Sequence[str]) -> dict[str, str]:
    """`--a.b=c` and `--a.b c` (draccus' two forms); a bare `--flag` is `true`. lerobot-train takes no
    positional argument, so one is a mistake named here rather than at training time."""
    flags: dict[str, str] = {}
    i = 0
    while i < len(args):
        item = args[i]
        if not item.startswith("--") or item == "--":
            raise InputError(f"{FIELD}: {item!r} is not a --key=value flag of lerobot-train", field=FIELD)
        key, eq, value = item[2:].partition("=")
        if not eq:
            has_value = i + 1 < len(args) and not args[i + 1].startswith("--")
            value = args[i + 1] if has_value else "true"
            i += 1 if has_value else 0
        key = key.replace("-", "_")
        if key in flags:  # which one lerobot's parser keeps is its business: the gate judges no guess
            raise InputError(
                f"{FIELD}: --{key} is given twice ({flags[key]!r:.80}, then {value!r:.80}); give it once",
                field=FIELD,
            )
        flags[key] = value
        i += 1
    return flags


def _value(raw: str, key: str) -> Any:
    """A flag's value as draccus reads a structured one: JSON, else YAML (`[0, 1]`, `{a: b}`)."""
    try:
        return json.loads(raw)
    except ValueError:
        pass
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise InputError(
            f"{FIELD}: --{key}={raw!r:.120} is neither JSON nor YAML ({exc})", field=FIELD
        ) from None


def lerobot_home() -> Path:
    """LeRobot's dataset home: HF_LEROBOT_HOME, else HF_HOME/lerobot (lerobot.utils.constants)."""
    if os.environ.get("HF_LEROBOT_HOME"):
        return Path(os.environ["HF_LEROBOT_HOME"]).expanduser()
    return Path(os.environ.get("HF_HOME") or "~/.cache/huggingface").expanduser() / "lerobot"


def resolve_base(policy_path: str) -> Path:
    """`--policy.path`: a folder as it is, else a Hub id in the local cache (offline, never fetched)."""
    folder = Path(policy_path).expanduser()
    if folder.is_dir():
        return folder.resolve()
    if policy_path.startswith(("/", ".", "~")):
        raise InputError(f"{FIELD}: --policy.path={policy_path}: no such folder", path=folder, field=FIELD)
    return hub_cache.snapshot(policy_path, f"{FIELD} --policy.path")


def resolve_dataset(command: LeRobotCommand) -> Path:
    """`--dataset.root`, else `HF_LEROBOT_HOME/<repo_id>`, as LeRobotDataset finds it."""
    root, repo_id = command.get("dataset.root"), command.repo_id
    if not root and not repo_id:
        raise InputError(f"{FIELD}: lerobot-train needs --dataset.repo_id (or --dataset.root)", field=FIELD)
    folder = Path(root).expanduser() if root else lerobot_home() / str(repo_id)
    if not (folder / "meta" / "info.json").is_file():
        fetch = f"huggingface-cli download --repo-type dataset {repo_id} --local-dir {folder}"
        raise InputError(
            f"{FIELD}: dataset {repo_id or root}: no LeRobot dataset at {folder} (meta/info.json missing)"
            + (f"; fetch it where there is internet: {fetch}" if repo_id else ""),
            path=folder,
            field=FIELD,
        )
    return folder.resolve()


COMPOSED_BY = "composed_by"  # train_config.json's key naming who composed it (lerobot adds no such key)
TOP_LEVEL_SKIP = ("config_path", "rename_map")


def compose_training(command: LeRobotCommand, base: Path | None, dataset: Path) -> dict[str, Any]:
    """B as lerobot-train would compose it, where lerobot itself is not importable: the base's
    config.json (or just `--policy.type`), every `--policy.*` flag over it, the output features refreshed
    from the dataset (lerobot's make_policy does that; the input features stay the base's), and the
    dataset, rename map and top-level flags as typed. `composed_by` says that lerobot did not compose it.
    With `--config_path`, that file is the start and every flag goes over it, as lerobot's parser does."""
    if command.file:
        return _compose_from_file(command, base, dataset)
    policy = _base_policy(command, base)
    for key, raw in command.flags.items():
        if key.startswith("policy.") and key not in ("policy.path", "policy.type"):
            _set_dotted(policy, key.removeprefix("policy."), _scalar(raw))
    policy["output_features"] = action_features(dataset) or policy.get("output_features") or {}
    top = {k: _scalar(v) for k, v in command.flags.items() if "." not in k and k not in TOP_LEVEL_SKIP}
    data = {"repo_id": command.repo_id, "root": str(dataset), "episodes": command.episodes}
    if command.get("dataset.use_imagenet_stats") is not None:
        data["use_imagenet_stats"] = _scalar(command.get("dataset.use_imagenet_stats"))
    return {
        **top,
        "policy": policy,
        "dataset": data,
        "rename_map": command.rename_map,
        COMPOSED_BY: {"tool": "hpc-preflight", "lerobot": None, "argv": list(command.argv)},
    }


def _compose_from_file(command: LeRobotCommand, base: Path | None, dataset: Path) -> dict[str, Any]:
    data = json.loads(json.dumps(command.file, default=str))
    if "policy.path" in command.flags:
        data["policy"] = _base_policy(command, base)
    if not isinstance(data.get("policy"), dict):
        raise InputError(f"{FIELD}: --config_path={command.get('config_path')} names no policy", field=FIELD)
    skip = ("config_path", "resume", "policy.path", "policy.type", "rename_map", "dataset.episodes")
    for key, raw in command.flags.items():
        if key not in skip:
            _set_dotted(data, key, _scalar(raw))
    policy = data["policy"]
    if command.resumes and base is not None:
        policy["pretrained_path"] = str(base)
    policy["output_features"] = action_features(dataset) or policy.get("output_features") or {}
    saved = data.get("dataset") if isinstance(data.get("dataset"), dict) else {}
    data["dataset"] = {**saved, "root": str(dataset), "episodes": command.episodes}
    data["rename_map"] = command.rename_map
    data[COMPOSED_BY] = {"tool": "hpc-preflight", "lerobot": None, "argv": list(command.argv)}
    return data


def _base_policy(command: LeRobotCommand, base: Path | None) -> dict[str, Any]:
    if base is not None:
        config = read_json(base / "config.json", "a LeRobot policy config.json")
        if not isinstance(config, dict):
            raise InputError(f"{base / 'config.json'}: expected a JSON object", path=base, field="<root>")
        if command.policy_type and config.get("type") != command.policy_type:
            raise InputError(
                f"{FIELD}: --policy.type={command.policy_type} but the base {base} is type "
                f"{config.get('type')!r}",
                field=FIELD,
            )
        return {**config, "pretrained_path": str(base)}
    if not command.policy_type:
        raise InputError(f"{FIELD}: lerobot-train needs --policy.path or --policy.type", field=FIELD)
    defaults = LEROBOT_WINDOWS.get(command.policy_type, {})
    return {"type": command.policy_type, **defaults, "input_features": {}, "output_features": {}}


def action_features(dataset: Path) -> dict[str, Any]:
    info = read_json(dataset / "meta" / "info.json", "a LeRobot meta/info.json")
    features = (info or {}).get("features") if isinstance(info, dict) else None
    action = features.get("action") if isinstance(features, dict) else None
    if not isinstance(action, dict) or "shape" not in action:
        return {}
    return {"action": {"type": "ACTION", "shape": list(action["shape"])}}


def compose_with_lerobot(command: LeRobotCommand, dataset: Path) -> dict[str, Any] | None:
    """lerobot-train's own composition of the same argv: its `parser.wrap` (plugins, `--config_path`,
    `.path` fields) and `TrainPipelineConfig.validate` (the base's config from `--policy.path` with the
    `--policy.*` overrides), saved as lerobot saves train_config.json, with the output features then
    taken from `dataset` as make_policy takes them. The parser and validate read `sys.argv`, so it is
    lerobot-train's argv while they run. None where lerobot is not importable."""
    try:
        import lerobot.policies  # noqa: F401  (registers every policy type's config, as lerobot-train does)
        from lerobot.configs import parser
        from lerobot.configs.train import TrainPipelineConfig
    except ImportError:
        return None

    def take(cfg: Any) -> Any:
        return cfg

    take.__annotations__ = {"cfg": TrainPipelineConfig}  # wrap reads the class from the annotation

    saved = sys.argv
    sys.argv = ["lerobot-train", *command.argv[_args_start(command.argv) :]]
    try:
        config = parser.wrap()(take)()
        config.validate()
        with tempfile.TemporaryDirectory() as folder:
            config._save_pretrained(Path(folder))
            data = read_json(Path(folder) / "train_config.json", "the train_config.json lerobot composed")
    except Exception as exc:  # noqa: BLE001 - whatever lerobot's parser raises, the command is refused
        what = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
        raise InputError(f"{FIELD}: lerobot's parser refused the command ({what})", field=FIELD) from None
    finally:
        sys.argv = saved
    data[COMPOSED_BY] = {"tool": "lerobot", "argv": list(command.argv)}
    policy = data.get("policy") or {}
    policy["output_features"] = action_features(dataset) or policy.get("output_features") or {}
    return data


def _args_start(argv: Sequence[str]) -> int:
    return 1 if Path(argv[0]).name in PROGRAMS else int(_module_at(argv) or 1)


def _scalar(raw: str | None) -> Any:
    try:
        return yaml.safe_load(raw) if raw is not None else None
    except yaml.YAMLError:
        return raw


def _set_dotted(target: dict[str, Any], key: str, value: Any) -> None:
    *parents, leaf = key.split(".")
    for part in parents:
        child = target.get(part)
        target[part] = child = child if isinstance(child, dict) else {}
        target = child
    target[leaf] = value
