"""Quota tables parsed from outputs recorded on real clusters (sources in each fixture's header)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline.storage.quota import mount_of, parse_quota_table, quota_for, room, to_bytes

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "quota"
K, M, G, T = 2**10, 2**20, 2**30, 2**40


def recorded(name: str) -> str:
    """The output as recorded; the fixture's own '#' header (source, command, expectation) removed."""
    text = (FIXTURES / name).read_text()
    assert text.startswith("# source: https://"), f"{name} must name its source"
    return "\n".join(line for line in text.splitlines() if not line.startswith("# "))


@pytest.mark.parametrize(
    "name, kind, owner, filesystem, used, soft, hard, over",
    [
        ("lfs_quota_h_u_expanse.txt", "usr", "xdtr108", "./", 792.3 * M, 0, 9.537 * T, False),
        ("lfs_quota_h_v_u_expanse.txt", "usr", "xdtr108", "./", 12.73 * G, 0, 9.537 * T, False),
        ("lfs_quota_h_u_grex.txt", "usr", "kerrache", "/project", 150.6 * G, 0, 0, False),
        (
            "lfs_quota_h_p_grex.txt",
            "prj",
            "123456",
            "/project/123456",
            150.6 * G,
            4.883 * T,
            5.371 * T,
            False,
        ),
        ("quota_s_grex_nfs.txt", "user", "someuser", "192.168.x.y:/", 249 * M, 100 * G, 105 * G, False),
        (
            "quota_u_s_sheffield_over.txt",
            "user",
            "?",
            "storage:/export/users",
            3289 * M,
            51200 * M,
            76800 * M,
            False,
        ),
    ],
)
def test_recorded_outputs_parse_to_one_total_row(name, kind, owner, filesystem, used, soft, hard, over):
    rows = parse_quota_table(recorded(name))
    assert len(rows) == 1, rows  # per-target lines (lfs -v), notes and prompts are not totals
    row = rows[0]
    assert (row.kind, row.owner, row.filesystem, row.over_soft) == (kind, owner, filesystem, over)
    assert (row.used, row.soft, row.hard) == (int(used), int(soft), int(hard))


def test_limits_and_headroom_from_recorded_outputs():
    (nfs,) = parse_quota_table(recorded("quota_s_grex_nfs.txt"))
    assert nfs.limit == 100 * G and nfs.available == 100 * G - 249 * M  # soft binds once grace is out
    (lustre,) = parse_quota_table(recorded("lfs_quota_h_u_grex.txt"))
    assert lustre.limit is None and lustre.available is None  # 0k 0k: no block limit set
    (expanse,) = parse_quota_table(recorded("lfs_quota_h_u_expanse.txt"))
    assert expanse.limit == int(9.537 * T)


def test_not_on_lustre_message_gives_no_rows():
    assert parse_quota_table(recorded("lfs_quota_not_lustre_expanse.txt")) == []


def test_cells_plain_human_starred_and_bracketed():
    assert to_bytes("1041408") == (1041408 * K, False)  # plain cells are 1 KiB blocks in both tools
    assert to_bytes("[1041408]") == (1041408 * K, False)  # lfs brackets a value some target did not give
    assert to_bytes("321k*") == (321 * K, True)
    assert to_bytes("-") is None and to_bytes("none") is None


def test_no_quota_tool_is_recorded_not_fatal(tmp_path):
    tool, row, notes = quota_for(tmp_path, which=lambda name: None)
    assert tool is None and row is None
    assert notes and "no quota tool on this node" in notes[0] and "quota not checked" in notes[0]


def test_quota_tool_that_fails_is_recorded_not_fatal(tmp_path):
    def broken(argv):
        raise OSError("quota exited 1: quota: Cannot open quotafile")

    tool, row, notes = quota_for(tmp_path, runner=broken, which=lambda name: f"/usr/bin/{name}")
    assert tool == "quota" and row is None and "Cannot open quotafile" in notes[0]


def test_quota_headroom_limits_the_room(tmp_path):
    """The recorded NFS table, re-targeted at the filesystem this folder is on: headroom is its limit."""
    mountpoint, _, source = mount_of(tmp_path)
    text = recorded("quota_s_grex_nfs.txt").replace("192.168.x.y:/", source)
    seen = []

    def runner(argv):
        seen.append(list(argv))
        return text

    tool, row, notes = quota_for(tmp_path, runner=runner, which=lambda name: f"/usr/bin/{name}")
    assert seen[0][:3] == ["quota", "-w", "-u"] and notes == []
    assert row is not None and row.available == 100 * G - 249 * M
    # the filesystem's own free bytes, not the quota's: read around the call, since the other xdist worker
    # writes to the same disk meanwhile (a demo build moves it by hundreds of MB)
    before = os.statvfs(tmp_path)
    free = room(tmp_path, check_quota=False).free
    after = os.statvfs(tmp_path)
    seen_free = sorted(v.f_bavail * v.f_frsize for v in (before, after))
    assert seen_free[0] - G <= free <= seen_free[1] + G
