"""Small parts of the stage: the assignment solver and the PNG writer."""

from __future__ import annotations

import itertools
import struct
import zlib
from pathlib import Path

import numpy as np

from pipeline.stages.contract.assignment import greedy, hungarian
from pipeline.stages.contract.plots import range_plot


def test_hungarian_is_optimal_against_brute_force() -> None:
    rng = np.random.default_rng(0)
    for _ in range(150):
        n = int(rng.integers(1, 7))
        cost = rng.random((n, n))
        best = min(sum(cost[i, p[i]] for i in range(n)) for p in itertools.permutations(range(n)))
        got = hungarian(cost)
        assert sorted(got.tolist()) == list(range(n))
        assert abs(sum(cost[i, got[i]] for i in range(n)) - best) < 1e-12


def test_greedy_is_a_permutation_and_finds_clear_swaps() -> None:
    cost = np.ones((5, 5)) - np.eye(5)
    cost[[1, 3]] = cost[[3, 1]]
    assert greedy(cost).tolist() == [0, 3, 2, 1, 4]


def _read_png(path: Path) -> tuple[int, int, bytes]:
    blob = path.read_bytes()
    assert blob[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", blob[16:24])
    pos, data = 8, b""
    while pos < len(blob):
        (length,) = struct.unpack(">I", blob[pos : pos + 4])
        kind, body = blob[pos + 4 : pos + 8], blob[pos + 8 : pos + 8 + length]
        crc = struct.unpack(">I", blob[pos + 8 + length : pos + 12 + length])[0]
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF
        data += body if kind == b"IDAT" else b""
        pos += 12 + length
    return width, height, zlib.decompress(data)


def test_range_plot_is_a_valid_png(tmp_path: Path) -> None:
    a = {"lo": np.array([0.0, -1.0, 5.0]), "hi": np.array([1.0, 1.0, 5.0]), "mean": np.array([0.5, 0.0, 5.0])}
    c = {
        "lo": np.array([0.1, -60.0, 5.0]),
        "hi": np.array([0.9, 60.0, np.nan]),
        "mean": np.array([0.4, 0, 5.0]),
    }
    width, height, raw = _read_png(range_plot(tmp_path / "r.png", a, c, {1}))
    assert len(raw) == height * (1 + width * 4)  # matplotlib Agg writes RGBA, one filter byte per row
    wide = {k: np.tile(v, 4) for k, v in a.items()}
    _, taller, _ = _read_png(range_plot(tmp_path / "r12.png", wide, wide, set()))
    assert taller > height  # one row per dim
    assert [p.name for p in tmp_path.iterdir()] and not list(tmp_path.glob(".*.tmp"))  # moved into place


def test_range_plot_has_title_axis_labels_and_legend(tmp_path: Path, monkeypatch) -> None:
    """Read back what matplotlib drew: the title, both axis labels and the legend entries."""
    from matplotlib.figure import Figure

    seen: list[Figure] = []
    original = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: (seen.append(self), original(self, *a, **k)))
    a = {"lo": np.zeros(2), "hi": np.ones(2), "mean": np.full(2, 0.5)}
    range_plot(tmp_path / "t.png", a, a, {0}, title="action: base vs data")
    ax = seen[0].axes[0]
    assert ax.get_title() == "action: base vs data" and ax.get_xlabel() and ax.get_ylabel() == "dim"
    labels = [t.get_text() for t in seen[0].legends[0].get_texts()]
    assert any("base (A)" in t for t in labels) and any("dataset (C)" in t for t in labels)
    assert ax.get_yticklabels()[0].get_color() == "#cc0000"  # the flagged dim


def test_convention_settings_are_validated_with_their_key() -> None:
    from pipeline.errors import ConfigError
    from pipeline.stages.config import typed
    from pipeline.stages.contract.config import ContractConfig

    cases = {
        "stages.contract.offset.severity": {"offset": {"severity": "loud"}},
        "stages.contract.sign.min_gap": {"sign": {"tol": 0.5, "min_gap": 0.2}},
        "stages.contract.relation.min_corr": {"relation": {"min_corr": 1.5}},
        "stages.contract.units.feature_severity": {"units": {"feature_severity": "x"}},
        "stages.contract.stale.cancel_condition": {"stale": {"cancel_condition": 0.5}},
    }
    for key, section in cases.items():
        try:
            typed(ContractConfig, section, "stages.contract")
        except ConfigError as exc:
            assert exc.key == key, (key, str(exc))
        else:
            raise AssertionError(f"{key}: accepted {section}")
    assert (
        typed(ContractConfig, {"offset": {"severity": "soft"}}, "stages.contract").offset.severity == "soft"
    )
