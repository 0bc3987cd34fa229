"""A demo build that runs out of space, on a real full filesystem (a 1 MiB tmpfs): one line naming the
folder, the bytes needed and free, and what was kept; no partial build left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.demo.once import build_once
from pipeline.errors import InputError
from tests.storage.conftest import tmpfs


def test_a_full_disk_during_the_demo_build_says_where_how_much_and_what_was_kept(tmp_path):
    with tmpfs(tmp_path / "out", "1m") as root:

        def build(folder: Path) -> None:
            (folder / "data.bin").write_bytes(b"\0" * 2 * 2**20)  # more than the filesystem holds

        with pytest.raises(InputError) as info:
            build_once(root, "default", lambda t: (t / "done").exists(), build, needed=2 * 2**20)
        message = str(info.value)
        assert message.startswith(f"{root}: filesystem full (about 2,097,152 bytes needed, ")
        assert " bytes free); the partial build was removed; " in message
        assert f"{root / 'default'} was left as it was" in message
        assert list(root.iterdir()) == []
