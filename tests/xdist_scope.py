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
# test-seconds per scope in a clean-clone CI run (`-n 2 --dist loadgroup`, benchmarks/suite_durations.py
# on its build/test-junit.xml, "by scope"), every scope of 8 s or more: only their order matters. The
# scopes changed since are scaled by their measured after/before (each alone, same machine): render_cache
# x0.6 (launches in process, no unread main demo), determinism x0.8 (twins without torch._dynamo, launches
# in process). A scope not named weighs PER_TEST seconds a test: a one-test scope of 24 s weighed 0.8 and
# started last, its worker finishing alone.
WEIGHTS = {
    "tests/stages/render_cache": 240,
    "tests/stages/determinism": 215,
    SLURM_GROUP: 219,
    "faulty_full": 97,
    "tests/stages/teacher_forced": 93,
    "tests/test_wheel.py": 90,
    "tests/stages/contract/test_episode_shift.py": 50,
    "tests/cli/test_training_command.py": 48,
    "tests/stages/contract/test_alignment_demo.py": 46,
    "tests/stages/contract/test_finetune.py": 41,
    "tests/run/test_inprocess.py": 39,
    "tests/stages/contract/test_health_departures.py": 31,
    "tests/demo/test_memo.py": 30,
    "tests/test_malformed_inputs.py": 28,
    "tests/test_launch.py": 28,
    "tests/stages/contract/test_shards_launch.py": 27,
    "tests/demo/test_cache_entries.py": 26,
    "tests/stages/contract/test_lerobot_pack.py": 25,
    "tests/cli/test_remedy_line.py": 24,
    "tests/test_reliability_faults.py": 22,
    "tests/stages/contract/test_conventions_real.py": 22,
    "tests/record/test_audit.py": 21,
    "tests/stages/contract/test_stage_launch.py": 20,
    "tests/cli/test_inputs_outside.py": 19,
    "tests/stages/contract/test_health_scaling.py": 18,
    "tests/stages/contract/test_shards_stale.py": 18,
    "tests/demo/test_demo.py": 17,
    "tests/stages/contract/test_alignment.py": 16,
    "tests/record/test_records.py": 14,
    "tests/stages/contract/test_clean_corpus.py": 14,
    "tests/run/test_chain.py": 13,
    "tests/run/test_status.py": 13,
    "tests/test_reliability_recovery.py": 13,
    "tests/demo/test_provider.py": 13,
    "tests/demo/test_cameras.py": 12,
    "tests/record/test_history.py": 12,
    "tests/cli/test_compose.py": 11,
    "tests/stages/contract/test_health.py": 11,
    "tests/test_container_standin.py": 11,
    "tests/readers/test_repeats.py": 10,
    "tests/test_progress.py": 10,
    "tests/stages/contract/test_channels.py": 10,
    "tests/stages/contract/test_reconcile_real.py": 10,
    "tests/run/test_input_checks.py": 10,
    "tests/demo/test_demo_image.py": 9,
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
