"""House rules for the data layer: readers and the vocabulary import no stage; stages import no demo;
the dataset dispatcher and the format readers form no import cycle."""

from __future__ import annotations

import ast
from pathlib import Path

PIPELINE = Path(__file__).resolve().parents[2] / "pipeline"


def imports(path: Path) -> set[str]:
    """Every module a file imports, at the top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def offenders(files: list[Path], prefix: str) -> dict[str, list[str]]:
    out = {}
    for path in files:
        bad = sorted(m for m in imports(path) if m == prefix or m.startswith(prefix + "."))
        if bad:
            out[str(path.relative_to(PIPELINE))] = bad
    return out


def test_readers_and_vocabulary_import_no_stage() -> None:
    files = [
        *sorted((PIPELINE / "readers").glob("*.py")),
        PIPELINE / "normalization.py",
        *sorted((PIPELINE / "trainlog").glob("*.py")),
    ]
    assert offenders(files, "pipeline.stages") == {}


def test_stages_import_no_demo() -> None:
    assert offenders(sorted((PIPELINE / "stages").rglob("*.py")), "pipeline.demo") == {}


def test_format_readers_do_not_import_the_dispatcher() -> None:
    formats = [PIPELINE / "readers" / f for f in ("lerobot_dataset.py", "hdf5_dataset.py", "npz_dataset.py")]
    assert offenders(formats, "pipeline.readers.dataset") == {}
