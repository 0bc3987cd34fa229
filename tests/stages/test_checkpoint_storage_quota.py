"""checkpoint_storage when the node's quota tool misbehaves: real executables named `quota` on PATH
printing non-UTF-8 bytes, garbage or a 400-digit number, and one that hangs; and a garbage manifest.
Each is a named row of its own, never "stage crashed" and never a clear gate that hides it in evidence."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from pipeline.storage import quota
from pipeline.storage.manifest import MANIFEST
from tests.stages.test_checkpoint_storage import check, model_dir

OUTPUTS = {
    "not_utf8": "printf '\\377\\376 quota \\200\\n'",
    "garbage": "echo 'segmentation fault (core dumped) ###'",
    "huge_number": "printf 'Disk quotas for user root (uid 0):\\n /dev/vda %s 0 0\\n' " + "9" * 400,
}
EXPECTED = {
    "not_utf8": "printed output that is not UTF-8 text",
    "garbage": "printed no quota table this reader takes",
    "huge_number": "printed no quota table this reader takes",
}


def fake_quota(folder: Path, body: str) -> None:
    folder.mkdir(exist_ok=True)
    script = folder / "quota"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


@pytest.mark.parametrize("case", sorted(OUTPUTS))
def test_a_quota_tool_printing_garbage_is_an_unverifiable_row_that_says_so(tmp_path, monkeypatch, case):
    fake_quota(tmp_path / "bin", OUTPUTS[case])
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    result, rows = check(tmp_path, tmp_path / "ckpt", model_dir(tmp_path))
    assert rows["quota"].verdict == "unverifiable" and EXPECTED[case] in rows["quota"].message
    assert result.status == "unverifiable"


def test_a_quota_tool_that_hangs_times_out_with_its_name(tmp_path):
    fake_quota(tmp_path / "bin", "sleep 30")
    with pytest.raises(OSError, match="quota timed out after 0.5 s"):
        quota._run([str(tmp_path / "bin" / "quota")], timeout_s=0.5)


def test_a_garbage_manifest_in_checkpoint_dir_is_an_error_row_naming_it(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / MANIFEST).write_bytes(b'{"event": "saved", "name": 5}\n')
    result, rows = check(tmp_path, folder, None)
    assert result.status == "error" and str(folder / MANIFEST) in rows["error"].message
    assert "line 1: field 'name'" in rows["error"].message
