"""The demo's recorded features, named once and importable alone: the keys and names the dataset writes,
the policy reads and the demo's D (`deploy_env`) describes, and the control rate they are recorded at.

Kept apart from `dataset` (pyarrow, the encoders) and `policy` (torch) so that a launch on an already
built demo, which only writes the small D file, imports none of them: torch alone was seconds of every
such launch.
"""

from __future__ import annotations

FPS = 10
STATE_KEY = "observation.state"
ENV_KEY = "observation.environment_state"
ACTION_KEY = "action"
STATE_NAMES = [
    "shoulder_pan.pos",
    "shoulder_lift.pos",
    "elbow.pos",
    "wrist_1.pos",
    "wrist_2.pos",
    "wrist_3.pos",
    "effector.x",
    "effector.y",
    "effector.z",
    "effector.yaw",
    "gripper.opening",
]
ENV_NAMES = ["cube.x", "cube.y", "cube.z", "cube.yaw"]
ACTION_NAMES = ["effector.dx", "effector.dy", "effector.dz", "effector.dyaw", "gripper.cmd"]
