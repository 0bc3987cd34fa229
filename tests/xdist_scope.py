"""How `pytest -n 2 --dist loadgroup` splits this suite between workers (pytest-xdist).

A worker gets whole scopes, so what a scope shares is set up once: tests on the local Slurm cluster are
one scope (they read its queue and accounting, which the other worker's jobs would crowd), a stage's
folder under tests/stages/ is one scope (its conftest's session fixtures: small demos, reference-trainer
runs, render-cache releases, built once and not once per worker), and any other module is one scope (its
module fixtures: one launch shared by several tests). The session's full-size demos are shared between
workers through one folder (tests/conftest.py `DemoCache`, built under a file lock).
"""

from __future__ import annotations

from typing import Any

SLURM_GROUP = "slurm"


def scheduler(config: Any, log: Any) -> Any:
    """loadscope with the scopes of `scope_of`; an `xdist_group` mark (nodeid@group) names its own
    (imported here: without pytest-xdist the suite runs as before)."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScopeScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return nodeid.rsplit("@", 1)[-1] if "@" in nodeid else scope_of(nodeid)

    return GroupScopeScheduling(config, log)


def scope_of(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    if parts[:2] == ["tests", "stages"] and len(parts) > 3:
        return "/".join(parts[:3])
    return path
