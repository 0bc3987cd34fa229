"""How `pytest -n 2 --dist loadgroup` splits this suite between workers (pytest-xdist).

A worker gets whole scopes, so what a scope shares is set up once: tests on the local Slurm cluster are
one scope (they read its queue and accounting, which the other worker's jobs would crowd), a stage's
folder under tests/stages/ whose conftest holds session fixtures is one scope (small demos,
reference-trainer runs, render-cache releases, built once and not once per worker), tests marked
`xdist_group(name)` are one scope (a session launch several files read), and any other module is one
scope (its module fixtures: one launch shared by several tests). The session's full-size demos are shared
between workers through one folder (tests/conftest.py `DemoCache`, built under a file lock).

Scopes are handed out heaviest first (`WEIGHTS`), so the light ones fill the end and neither worker sits
idle while the other finishes a long scope it took last: xdist's own order is by number of tests, which put
the golden record (6 tests, one long launch) and the wheel install (5 tests) at the very end.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

SLURM_GROUP = "slurm"
# stage folders whose conftest.py holds session fixtures: one scope each (elsewhere a module is a scope)
SHARED_FOLDERS = ("tests/stages/determinism", "tests/stages/render_cache", "tests/stages/teacher_forced")
# test-seconds per scope in a full run on the shared 2-core machine, loaded (benchmarks/suite_durations.py
# RUN, its "by scope" table), less the launches since shared; only their order matters. A scope not named
# weighs PER_TEST seconds a test. The files whose launches moved into the test process (launch_here) or
# whose rollouts come from the demo's cache are scaled by their measured after/before test-seconds
# (--durations=0, each file alone, same loaded machine).
WEIGHTS = {
    SLURM_GROUP: 440,  # 794 before the sacct poll, job_main, shared launches and reused probes (~0.55x)
    "tests/stages/determinism": 443,  # x0.80: two launches run the stage in-process
    "tests/stages/render_cache": 501,  # x0.90: one session Renderers, the sharded merge on the launch
    "tests/stages/teacher_forced": 157,  # x0.41: probes and plots off where no assertion reads them
    "tests/test_wheel.py": 277,  # x0.96: one pair of twins
    "faulty_full": 210,
    "tests/stages/contract/test_shards_launch.py": 92,
    "tests/stages/contract/test_finetune.py": 87,
    "tests/test_malformed_inputs.py": 95,
    "tests/test_launch.py": 155,
    "tests/stages/contract/test_alignment_demo.py": 124,
    "tests/stages/contract/test_stage_launch.py": 92,
    "tests/test_reliability_faults.py": 132,
    "tests/stages/contract/test_episode_shift.py": 84,
    "tests/run/test_status.py": 102,
    "tests/test_reliability_recovery.py": 50,
    "tests/demo/test_provider.py": 89,
    "tests/cli/test_training_command.py": 87,
    "tests/stages/contract/test_lerobot_pack.py": 85,
    "tests/run/test_chain.py": 84,
    "tests/demo/test_memo.py": 76,
    "tests/record/test_history.py": 66,
    "tests/demo/test_cache_entries.py": 60,
}
PER_TEST = 0.8


def scheduler(config: Any, log: Any) -> Any:
    """loadscope with the scopes of `scope_of`, heaviest first; an `xdist_group` mark (nodeid@group)
    names its own (imported here: without pytest-xdist the suite runs as before)."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScopeScheduling(LoadScopeScheduling):
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return nodeid.rsplit("@", 1)[-1] if "@" in nodeid else scope_of(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            if not self.ordered:  # the first call: `schedule` has just filled the queue
                self.workqueue = OrderedDict(heaviest_first(self.workqueue))
                self.ordered = True
            super()._assign_work_unit(node)

    return GroupScopeScheduling(config, log)


def heaviest_first(queue: dict[str, dict[str, bool]]) -> list[tuple[str, dict[str, bool]]]:
    return sorted(queue.items(), key=lambda unit: -WEIGHTS.get(unit[0], PER_TEST * len(unit[1])))


def scope_of(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    if parts[:2] == ["tests", "stages"] and len(parts) > 3 and "/".join(parts[:3]) in SHARED_FOLDERS:
        return "/".join(parts[:3])
    return path
