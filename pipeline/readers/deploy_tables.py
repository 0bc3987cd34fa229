"""What lerobot 0.4.4 fixes in code about the places a policy runs, for where lerobot is not importable:
its envs' features at their default sizes (`lerobot/envs/configs.py`) and the arms whose motor names its
robot classes fix (`so_follower.py`, `koch_follower.py`). `readers.deploy` reads lerobot's own classes
first and these only where it cannot."""

from __future__ import annotations

from typing import Any

# Every `--env.type` lerobot 0.4.4 registers (`EnvConfig.register_subclass` in `lerobot/envs/configs.py`;
# its plugin discovery registers robots, cameras, teleoperators and policies, never envs): any other name
# is an "invalid choice" to its parser.
ENV_TYPES = ("aloha", "pusht", "gym_manipulator", "libero", "metaworld", "isaaclab_arena")

# lerobot 0.4.4's env features with obs_type=pixels_agent_pos (its default), in the keys the policy gets
# (features_map applied, images channel-first, LIBERO's state folded by its env processor): type ->
# (fps, {key: (role, shape or a (height flag, width flag) pair)}, {size flag: default})
ENV_TABLE: dict[str, tuple[int, dict[str, tuple[str, Any]], dict[str, int]]] = {
    "libero": (
        30,
        {
            "observation.images.image": ("image", ("observation_height", "observation_width")),
            "observation.images.image2": ("image", ("observation_height", "observation_width")),
            "observation.state": ("state", (8,)),
            "action": ("action", (7,)),
        },
        {"observation_height": 360, "observation_width": 360},
    ),
    "aloha": (
        50,
        {
            "observation.images.top": ("image", ("observation_height", "observation_width")),
            "observation.state": ("state", (14,)),
            "action": ("action", (14,)),
        },
        {"observation_height": 480, "observation_width": 640},
    ),
    "pusht": (
        10,
        {
            "observation.image": ("image", ("observation_height", "observation_width")),
            "observation.state": ("state", (2,)),
            "action": ("action", (2,)),
        },
        {"observation_height": 384, "observation_width": 384},
    ),
    "metaworld": (
        80,
        {
            "observation.image": ("image", (3, 480, 480)),
            "observation.state": ("state", (4,)),
            "action": ("action", (4,)),
        },
        {},
    ),
}
# arms whose motors lerobot 0.4.4 names in the robot class itself (so_follower.py, koch_follower.py)
ARM = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]
ROBOT_MOTORS = {
    name: [f"{m}.pos" for m in ARM] for name in ("so100_follower", "so101_follower", "koch_follower")
}
