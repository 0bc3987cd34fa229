"""D, where the trained policy will run: what each place provides to the policy, read before training.

A LeRobot policy is trained to run somewhere that is named before training starts: the env lerobot-train
evaluates in every `eval_freq` steps (`--env.type` on the training line), the line the user will deploy
with (`lerobot-eval --env.type=...`, `lerobot-record --robot.type=... --robot.cameras=...`), or a place
described in a file (`deploy.path`: the embedded demo's OGBench env). Each is read here into the
observation keys lerobot hands the policy's preprocessor there, with the rename map that preprocessor
applies at that place (read off lerobot 0.4.4's scripts: lerobot-train's eval env and lerobot-eval apply
`--rename_map`, lerobot-record applies `--dataset.rename_map`).

An env's features come from lerobot's own env config classes where lerobot is importable (they hold the
features offline, with no simulator: `env_to_policy_features`, then LIBERO's env processor, which folds
its state keys into one 8-dim `observation.state`); elsewhere from a table read off lerobot 0.4.4's
`lerobot/envs/configs.py`, and `read_by` says which. A robot's cameras come from `--robot.cameras` as
typed; its motor names from lerobot's robot class where it can say without hardware, else from a table of
the arms whose names lerobot 0.4.4 fixes in code. What cannot be known is kept in `unknown` (feature ->
why), never guessed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from pipeline.errors import InputError
from pipeline.readers import deploy_values as values
from pipeline.readers import lerobot_command
from pipeline.readers.deploy_robot import robot_motors as robot_motors  # re-exported
from pipeline.readers.deploy_tables import ARM as ARM  # the arms' motor names, re-exported
from pipeline.readers.deploy_tables import ENV_TABLE
from pipeline.storage.files import read_json

FIELD = "deploy.command"
PROGRAMS = {"lerobot-eval": "eval", "lerobot-record": "robot"}
MODULES = {"lerobot.scripts.lerobot_eval": "eval", "lerobot.scripts.lerobot_record": "robot"}
MAX_DESCRIBED = 64  # features the record's evidence spells out; the rest are counted
RECORD_FPS = 30  # lerobot-record's `--dataset.fps` default (DatasetRecordConfig.fps)
EVAL_FREQ = 20000  # lerobot-train's `--eval_freq` default: the env is built when it is > 0
LEROBOT = "lerobot's env config (lerobot.envs.configs, env_to_policy_features, the env processor)"
TABLE = "hpc-preflight's table of lerobot 0.4.4's env features (lerobot is not importable here)"


@dataclass
class Provided:
    """One observation D hands the policy's preprocessor, in D's own key (before its rename map)."""

    key: str
    role: str  # image | state | env | action (what D takes from the policy)
    shape: tuple[int, ...] | None = None  # images channel-first (C, H, W)
    names: list[str] | None = None
    fps: float | None = None  # a camera's own rate
    source: str | None = None  # the camera whose frames these are, where D says (a D file's `source`)


@dataclass
class Deployment:
    """One place the policy will run, what it provides, and how that was read."""

    place: str  # eval_env (the training line's env) | eval | robot | env (a D file)
    line: str  # where it came from, as the record names it
    kind: str  # the env or robot type
    features: dict[str, Provided] = field(default_factory=dict)
    rename_map: dict[str, str] = field(default_factory=dict)
    fps: float | None = None  # the control loop's rate
    read_by: str = ""
    unknown: dict[str, str] = field(default_factory=dict)  # feature -> why D cannot say its shape
    problem: str | None = None  # D named but unreadable (an unknown env type): one row, never a crash
    invalid: bool = False  # the problem is a value lerobot refuses (the run would fail there): an error

    def renamed(self) -> dict[str, Provided]:
        """The features under the keys the policy sees them, after this place's rename map."""
        return {self.rename_map.get(k, k): f for k, f in self.features.items()}


def deploy_argv(cfg: Any) -> list[str]:
    """`deploy.command` (the deploy line after its own `--`), as the argv list it was typed."""
    section = cfg.get("deploy") if hasattr(cfg, "get") else None
    command = (section or {}).get("command") or []
    items = OmegaConf.to_container(command, resolve=True) if OmegaConf.is_config(command) else command
    return [str(item) for item in items]


def deploy_kind(argv: Sequence[str]) -> str | None:
    """`eval` for lerobot-eval, `robot` for lerobot-record (any path to them, or `python -m`), else None."""
    if not argv:
        return None
    if Path(argv[0]).name in PROGRAMS:
        return PROGRAMS[Path(argv[0]).name]
    for i in range(1, len(argv) - 1):
        if argv[i] == "-m" and argv[i + 1] in MODULES:
            return MODULES[argv[i + 1]]
    return None


def read_deployments(cfg: Any) -> list[Deployment]:
    """Every D this launch names: the training line's eval env, the deploy line, a D file. None named,
    none returned: the gate never guesses where a policy will run."""
    found = []
    try:
        train = lerobot_command.parse(lerobot_command.training_argv(cfg))
        if train is not None and train.env_type is not None and _eval_freq(train.get("eval_freq")) > 0:
            line = "training.command --env.type=" + train.env_type
            found.append(read_env("eval_env", line, train.env_type, train.env_flags, train.rename_map))
    except InputError as exc:  # the launch refuses such a line; a job given one says so in a row
        found.append(Deployment("eval_env", lerobot_command.FIELD, "?", problem=str(exc), invalid=True))
    argv = deploy_argv(cfg)
    if argv:
        found.append(read_line(argv))
    path = ((cfg.get("deploy") or {}) if hasattr(cfg, "get") else {}).get("path")
    if path:
        found.append(read_file(Path(str(path))))
    return found


def read_line(argv: Sequence[str]) -> Deployment:
    """A lerobot-eval or lerobot-record line; any other program is one problem row naming it."""
    kind = deploy_kind(argv)
    line = f"{FIELD} {argv[0]}"
    if kind is None:
        return Deployment("eval", line, "?", problem=f"{argv[0]} is not lerobot-eval or lerobot-record")
    try:
        flags = _line_flags(argv)
        if kind == "eval":
            return read_env("eval", line, *_eval_values(flags))
        return read_robot(line, flags)
    except InputError as exc:
        problem = str(exc).replace(lerobot_command.FIELD, FIELD)
        return Deployment(kind, line, "?", problem=problem, invalid=True)


def _line_flags(argv: Sequence[str]) -> dict[str, str]:
    start = next((i for i, a in enumerate(argv) if a.startswith("--")), len(argv))
    return lerobot_command.parse_flags(argv[start:])


def _eval_values(flags: Mapping[str, str]) -> tuple[str, dict[str, str], dict[str, str]]:
    """A lerobot-eval line's env type, `--env.*` flags (checked) and `--rename_map`."""
    env_type = flags.get("env.type")
    if env_type is None:
        raise InputError(f"{FIELD}: lerobot-eval without --env.type names no env", field=FIELD)
    values.env_type(env_type, "--env.type", FIELD)
    env = {k.removeprefix("env."): v for k, v in flags.items() if k.startswith("env.") and k != "env.type"}
    values.env_flags(env, FIELD)
    return env_type, env, values.flag_map(flags.get("rename_map"), "rename_map")


def _robot_values(
    flags: Mapping[str, str],
) -> tuple[float, dict[str, str], dict[str, Provided], dict[str, str]]:
    """A lerobot-record line's loop rate, `--dataset.rename_map`, cameras and what they leave unknown."""
    fps = values.rate(flags.get("dataset.fps", RECORD_FPS), "--dataset.fps", FIELD)
    rename = values.flag_map(flags.get("dataset.rename_map"), "dataset.rename_map")
    features, unknown = {}, {}
    for name, cam in values.flag_mapping(flags.get("robot.cameras"), "robot.cameras").items():
        key = f"observation.images.{name}"
        shape, rate = values.camera(str(name), cam, FIELD)
        if shape is None:
            unknown[key] = "no width/height typed (the device's default)"
        features[key] = Provided(key, "image", shape, fps=rate)
    return fps, rename, features, unknown


def check_values(cfg: Any) -> None:
    """At launch, without importing lerobot: every value of D that lerobot's parser would refuse (a rate
    of 0, a size `abc`, an empty env type, camera JSON that is no mapping) and a D file that cannot be
    read, as the InputError naming the flag or the file's field (exit 2)."""
    train = lerobot_command.parse(lerobot_command.training_argv(cfg))
    if train is not None and train.env_type is not None:
        values.env_type(train.env_type, "--env.type", lerobot_command.FIELD)
        values.env_flags(train.env_flags, lerobot_command.FIELD)
    argv = deploy_argv(cfg)
    kind = deploy_kind(argv)
    try:
        if kind == "eval":
            _eval_values(_line_flags(argv))
        elif kind == "robot":
            _robot_values(_line_flags(argv))
    except InputError as exc:
        raise InputError(str(exc).replace(lerobot_command.FIELD, FIELD), field=FIELD) from None
    path = ((cfg.get("deploy") or {}) if hasattr(cfg, "get") else {}).get("path")
    if path:
        d = read_file(Path(str(path)))
        if d.invalid:
            raise InputError(f"deploy.path: {d.problem}", path=str(path), field="deploy.path")


def read_env(
    place: str, line: str, env_type: str, flags: Mapping[str, str], rename: dict[str, str]
) -> Deployment:
    """An env's features: lerobot's own config class where importable, else lerobot 0.4.4's table."""
    d = Deployment(place, line, env_type, rename_map=dict(rename))
    field_ = lerobot_command.FIELD if place == "eval_env" else FIELD
    try:
        values.env_type(env_type, "--env.type", field_)
        values.env_flags(flags, field_)  # before lerobot is asked: a rate of 0 is refused, not divided by
        try:
            features, fps = _env_with_lerobot(env_type, flags, field_)
            d.read_by = LEROBOT
        except ImportError:
            if env_type not in ENV_TABLE:
                d.problem = f"env type {env_type!r} is not in {TABLE.split(' (')[0]} ({', '.join(ENV_TABLE)})"
                return d
            features, fps = _env_from_table(env_type, flags)
            d.read_by = TABLE
        fps = values.rate(fps, "--env.fps", field_)
    except InputError as exc:  # a value lerobot's parser refuses: the run would fail there
        d.problem, d.invalid = str(exc), True
        return d
    except Exception as exc:  # noqa: BLE001 - whatever lerobot's config classes refuse is one row
        d.problem = f"lerobot cannot read --env.type={env_type}: {type(exc).__name__}: {str(exc)[:200]}"
        return d
    if not features:
        d.problem = (
            f"lerobot's config for --env.type={env_type} holds no features offline (they come at run time)"
        )
        return d
    d.features, d.fps = features, fps
    return d


def _env_with_lerobot(
    env_type: str, flags: Mapping[str, str], field_: str
) -> tuple[dict[str, Provided], float]:
    import draccus
    from lerobot.configs.types import FeatureType
    from lerobot.envs.configs import EnvConfig
    from lerobot.envs.utils import env_to_policy_features

    try:
        cls = EnvConfig.get_choice_class(env_type)
    except Exception:  # noqa: BLE001 - draccus' registry says so in its own words
        known = sorted(EnvConfig.get_known_choices())
        raise InputError(
            f"{field_}: --env.type={env_type!r} is no env type lerobot knows ({known})", field=field_
        ) from None
    try:
        env_cfg = draccus.parse(cls, args=[f"--{k}={v}" for k, v in flags.items()])
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - draccus' parser refuses in its own words
        why = str(exc)[:200]
        raise InputError(
            f"{field_}: lerobot's parser refuses the --env.* flags: {why}", field=field_
        ) from None
    features = env_to_policy_features(env_cfg)
    if env_type == "libero" or "libero" in env_cfg.type:
        from lerobot.processor.env_processor import LiberoProcessorStep

        by_type: dict[Any, dict[str, Any]] = {}
        for key, ft in features.items():
            by_type.setdefault(ft.type, {})[key] = ft
        folded = LiberoProcessorStep().transform_features(by_type)
        features = {k: ft for group in folded.values() for k, ft in group.items()}
    roles = {
        FeatureType.VISUAL: "image",
        FeatureType.STATE: "state",
        FeatureType.ENV: "env",
        FeatureType.ACTION: "action",
    }
    out = {
        key: Provided(key, roles[ft.type], tuple(int(n) for n in ft.shape))
        for key, ft in features.items()
        if ft.type in roles
    }
    return out, float(env_cfg.fps)


def _env_from_table(env_type: str, flags: Mapping[str, str]) -> tuple[dict[str, Provided], float]:
    fps, spec, sizes = ENV_TABLE[env_type]
    size = {k: values.size(flags.get(k, v), f"--env.{k}", FIELD) for k, v in sizes.items()}
    out = {}
    for key, (role, shape) in spec.items():
        if isinstance(shape[0], str):
            shape = (3, size[shape[0]], size[shape[1]])
        out[key] = Provided(key, role, tuple(shape))
    return out, float(flags.get("fps", fps))


def read_robot(line: str, flags: Mapping[str, str]) -> Deployment:
    """lerobot-record's observation keys (`hw_to_dataset_features`): `observation.images.<camera>` at the
    configured height x width, `observation.state` over the motors' `<motor>.pos`; the loop at
    `--dataset.fps`; `--dataset.rename_map` applied in the policy's preprocessor."""
    robot = flags.get("robot.type") or "?"
    fps, rename, cameras, unknown = _robot_values(flags)
    d = Deployment("robot", line, robot, cameras, rename, fps, unknown=unknown)
    motors, actions, by = robot_motors(robot, flags)
    d.read_by = f"--robot.cameras as typed; motors {by}"
    if motors is None or actions is None:
        for key, role in (("observation.state", "state"), ("action", "action")):
            d.features[key] = Provided(key, role)
            d.unknown[key] = f"robot type {robot}: its motors ({by})"
    else:
        d.features["observation.state"] = Provided("observation.state", "state", (len(motors),), motors)
        d.features["action"] = Provided("action", "action", (len(actions),), actions)
    return d


def read_file(path: Path) -> Deployment:
    """A D file (`deploy.path`): `{"kind", "fps", "rename_map", "features": {key: {"role", "shape",
    "names", "fps", "source"}}}`, the form a place that is no lerobot line is described in (`source`: the
    camera whose frames a key carries, where that is not the key's own name)."""
    line = f"deploy.path {path}"
    try:
        data = read_json(path, "a deployment description (deploy.path)")
        if not isinstance(data, dict) or not isinstance(data.get("features"), dict):
            raise InputError(
                f"{path}: expected an object with a 'features' mapping", path=path, field="features"
            )
        kind = str(data.get("kind") or "?")
        d = Deployment(
            "env", f"deploy.path ({kind})", kind, read_by=f"{data.get('read_by') or 'the file'}, {path}"
        )
        where = f"{path}: field"
        d.fps = None if data.get("fps") is None else values.rate(data["fps"], f"{where} fps", "deploy.path")
        d.rename_map = values.key_map(data.get("rename_map"), f"{where} rename_map", "deploy.path")
        for key, spec in data["features"].items():
            if not isinstance(spec, dict):
                raise InputError(f"{where} features.{key} is {spec!r}, not an object", field="deploy.path")
            shape = spec.get("shape")
            shape = (
                None if shape is None else values.shape(shape, f"{where} features.{key}.shape", "deploy.path")
            )
            fps = spec.get("fps")
            fps = None if fps is None else values.rate(fps, f"{where} features.{key}.fps", "deploy.path")
            role, source = str(spec.get("role") or "state"), spec.get("source")
            d.features[key] = Provided(key, role, shape, spec.get("names"), fps, source)
        return d
    except InputError as exc:  # unreadable, or a value no place could run at: the launch refuses it
        return Deployment(
            "env", line, "?", problem=f"{path}: unreadable deployment description: {exc}", invalid=True
        )


def _eval_freq(raw: str | None) -> int:
    try:
        return int(raw) if raw is not None else EVAL_FREQ
    except ValueError:
        return EVAL_FREQ


def describe(d: Deployment) -> dict[str, Any]:
    """D as the record's evidence keeps it (at most `MAX_DESCRIBED` features, the rest counted)."""
    out = {
        "place": d.place,
        "line": d.line,
        "kind": d.kind,
        "fps": d.fps,
        "rename_map": d.rename_map,
        "read_by": d.read_by,
        "unknown": dict(list(d.unknown.items())[:MAX_DESCRIBED]),
        "features": {
            k: {"role": f.role, "shape": f.shape, "names": f.names, "fps": f.fps}
            for k, f in list(d.features.items())[:MAX_DESCRIBED]
        },
    }
    if len(d.features) > MAX_DESCRIBED:
        out["features_left_out"] = len(d.features) - MAX_DESCRIBED
    return out
