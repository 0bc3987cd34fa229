"""A robot's motor names, read before training: lerobot's robot class built without connecting where it
can say, else the arms lerobot 0.4.4 names in code (`deploy_tables.ROBOT_MOTORS`), else unknown and why.

lerobot registers a robot type when its module is imported, and lerobot-record imports every module of
`lerobot.robots` (some pull in a vendor SDK; all of them took ~14 s). Here the modules are imported
until the named type is registered: its own module, then the names closest to it, and every other one
only where those did not register it.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import pkgutil
from collections.abc import Mapping
from typing import Any

from pipeline.readers.deploy_tables import ROBOT_MOTORS


def robot_motors(robot: str, flags: Mapping[str, str]) -> tuple[list[str] | None, list[str] | None, str]:
    """The robot's state and action names (`<motor>.pos`): lerobot's class built without connecting where
    it can, else the arms lerobot 0.4.4 names in code (the same names both ways), else None and why."""
    try:
        import lerobot.robots as robots
    except ImportError:
        why = "lerobot is not importable here"
    else:
        try:
            return (*_motors_with_lerobot(robots, robot, flags), "from lerobot's robot class")
        except Exception as exc:  # noqa: BLE001 - a class that needs its SDK or hardware cannot say
            why = f"lerobot's class cannot say without its SDK or hardware ({type(exc).__name__}: {exc})"
            why = why[:200]
    if robot in ROBOT_MOTORS:
        names = ROBOT_MOTORS[robot]
        return names, names, f"as lerobot 0.4.4's robot class names them in code ({why})"
    return None, None, why


def _motors_with_lerobot(robots: Any, robot: str, flags: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """The type registered (`register`), then its class built without `connect()`: its
    `observation_features` name the motors."""
    register(robots, robot)
    cls = robots.RobotConfig.get_choice_class(robot)
    names = {f.name for f in dataclasses.fields(cls)}
    config = cls(**({"port": flags.get("robot.port") or "/dev/null"} if "port" in names else {}))
    made = robots.make_robot_from_config(config)
    state = [k for k, v in made.observation_features.items() if v is float]
    return state, [k for k, v in made.action_features.items() if v is float]


def register(robots: Any, robot: str) -> list[str]:
    """Import `lerobot.robots` modules until `robot` is a registered type; returns the modules imported."""
    names = [m.name for m in pkgutil.iter_modules(robots.__path__)]
    likely = [n for n in names if n == robot] + difflib.get_close_matches(robot, names, n=3, cutoff=0.4)
    imported = []
    for name in dict.fromkeys([*likely, *names]):
        if robot in robots.RobotConfig.get_known_choices():
            break
        try:
            importlib.import_module(f"{robots.__name__}.{name}")
        except Exception:  # noqa: BLE001, S112 - a robot whose SDK is missing is not the one asked about
            continue
        imported.append(name)
    return imported
