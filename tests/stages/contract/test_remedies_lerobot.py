"""Remedies as lerobot 0.4.4 itself takes them (lerobot venv only, scripts/test_lerobot.sh): every line
remedy kind the remedy rules produce, applied to a typed line against a base and a dataset lerobot wrote,
goes through lerobot-train's own parser and `validate` (`compose_with_lerobot`) and lands in the composed
config as set; the delete-episodes data remedy, run as printed with lerobot's own `lerobot-edit-dataset`,
leaves every episode but the named ones and the original beside it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.make_large_dataset import Shape, make
from pipeline.readers import lerobot_command
from pipeline.readers.base import Feature
from pipeline.record.records import Rows
from pipeline.stages.contract import remedies
from pipeline.stages.contract.corrected import apply, line_changes
from tests.conftest import REAL_DATA
from tests.stages.contract.lerobot_pack import RECORD, policy_folder
from tests.stages.contract.test_remedies import CAMS, camera_rows, mode_row, sig, sources
from tests.trainers.helpers import LEROBOT_ONLY, OFFLINE

pytestmark = [
    *LEROBOT_ONLY,
    pytest.mark.skipif(not (REAL_DATA / RECORD).is_dir(), reason=f"real test files not present: {REAL_DATA}"),
]
MODES = '{"STATE": "MEAN_STD", "ACTION": "MEAN_STD"}'


def typed_line() -> list[str]:
    return [
        "lerobot-train",
        f"--policy.path={policy_folder(REAL_DATA, 'act')}",
        f"--dataset.repo_id={RECORD.replace('__', '/')}",
        f"--dataset.root={REAL_DATA / RECORD}",
        f"--policy.normalization_mapping={MODES}",
        "--steps=5",
    ]


def line_remedies() -> dict[str, tuple[list[str], dict[str, str], list[str]]]:
    """One line remedy of each kind the rules give, on synthetic rows (as test_remedies makes them):
    kind -> (the typed line, flags to set, flags to drop)."""
    typed = typed_line()
    part = [*typed[:-2], '--policy.normalization_mapping={"STATE": "MEAN_STD", "VISUAL": "IDENTITY"}']
    src = sources({})
    src.c.claimed["total_episodes"] = 10
    back = Rows("contract", "health")("health.time.order", "timestamp", "mismatch", "back",
                                      evidence={"episodes": [7]})  # fmt: skip
    top, side, wrist = CAMS
    base = {top: sig(0.1, 0.1, 0.1), side: sig(0.5, 0.5, 0.5), wrist: sig(0.9, 0.2, 0.6)}
    cams, cam_src = camera_rows({top: base[side], side: base[top], wrist: base[wrist]}, base)
    found = {
        "drop_mode": (typed, remedies.attach([mode_row("STATE"), mode_row("ACTION")], sources({}), typed)),
        "set_mode": (part, remedies.attach([mode_row("STATE")], sources({}), part)),
        "episodes": (typed, remedies.attach([back], src, typed)),
        "rename_map": (typed, [r for r in remedies.attach(cams, cam_src, typed) if r.verdict == "mismatch"]),
    }
    assert all(c.remedy["kind"] == "line" for _, checks in found.values() for c in checks)
    return {name: (line, *line_changes(checks)) for name, (line, checks) in found.items()}


@pytest.mark.parametrize("kind", ["drop_mode", "set_mode", "episodes", "rename_map"])
def test_each_line_remedy_passes_lerobots_parser_and_lands_in_its_config(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in OFFLINE.items():
        monkeypatch.setenv(name, value)
    line, sets, drops = line_remedies()[kind]
    assert sets or drops
    argv = apply(line, sets, drops)
    composed = lerobot_command.compose_with_lerobot(lerobot_command.parse(argv), REAL_DATA / RECORD)
    assert composed is not None
    if kind == "episodes":
        assert composed["dataset"]["episodes"] == json.loads(sets["dataset.episodes"])
    if kind == "rename_map":
        assert composed["rename_map"] == json.loads(sets["rename_map"])
    if kind == "set_mode":
        assert sets["policy.normalization_mapping"] in argv[-1]
        assert composed["policy"]["normalization_mapping"]["STATE"] == "QUANTILES"
    if kind == "drop_mode":
        assert "--policy.normalization_mapping" not in " ".join(argv)


def test_the_delete_episodes_command_runs_as_printed_with_lerobots_own_tool(tmp_path: Path) -> None:
    root = tmp_path / "home" / "acme" / "four"
    make(root, Shape(episodes=4, length=12, state_dim=3, action_dim=3, cameras=0, tasks=1))
    src = sources({"observation.state": Feature("observation.state", "state", (3,))})
    src.c.path = str(root)
    src.c.claimed["total_episodes"] = 4
    row = Rows("contract", "health")("health.episodes.duplicates", "episode", "mismatch", "dup",
                                     evidence={"episodes": [2]})  # fmt: skip
    (checked,) = remedies.attach([row], src, ["lerobot-train", "--dataset.repo_id=acme/four"])
    command = list(checked.remedy["command"])
    tool = Path(sys.executable).with_name("lerobot-edit-dataset")
    command[command.index("lerobot-edit-dataset")] = str(tool)
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env={**os.environ, **OFFLINE})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    info = json.loads((root / "meta" / "info.json").read_text())
    assert info["total_episodes"] == 3 and not (root / "acme").exists()  # edited in place, not inside
    assert json.loads((root.with_name("four_old") / "meta" / "info.json").read_text())["total_episodes"] == 4
