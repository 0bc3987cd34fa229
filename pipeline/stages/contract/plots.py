"""One PNG per vector feature: the base's per-dim range (blue, top) against the dataset's (orange,
bottom), each row scaled to the union of both, means as dark ticks, the dim index at the left and a red
marker on rows another check flagged. Written with numpy and zlib only (no plotting dependency).
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

from pipeline.storage import atomic_write_bytes

BLUE, ORANGE, INK, RED, GRID = (52, 101, 164), (245, 121, 0), (30, 30, 30), (204, 0, 0), (225, 225, 225)
DIGITS = {  # 3x5 bitmap font, rows top to bottom
    "0": "111101101101111",
    "1": "010110010010111",
    "2": "111001111100111",
    "3": "111001111001111",
    "4": "101101111001001",
    "5": "111100111001111",
    "6": "111100111101111",
    "7": "111001001001001",
    "8": "111101111101111",
    "9": "111101111001111",
}


def write_png(path: Path, image: np.ndarray) -> Path:
    """RGB uint8 [H, W, 3] -> PNG (filter 0 per row, one zlib stream)."""
    height, width, _ = image.shape
    raw = b"".join(b"\x00" + image[y].tobytes() for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    blob = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 6))
        + chunk(b"IEND", b"")
    )
    return atomic_write_bytes(path, blob)  # a reader (the audit record) never sees half a plot


def _text(img: np.ndarray, x: int, y: int, text: str, color: tuple[int, int, int], scale: int = 2) -> None:
    for char in text:
        bits = DIGITS.get(char)
        if bits:
            for i, bit in enumerate(bits):
                if bit == "1":
                    r, c = divmod(i, 3)
                    img[y + r * scale : y + (r + 1) * scale, x + c * scale : x + (c + 1) * scale] = color
        x += 4 * scale


def range_plot(path: Path, a: dict[str, np.ndarray], c: dict[str, np.ndarray], flagged: set[int]) -> Path:
    """`a`/`c`: {lo, hi, mean} per dim, each in its own dim order, so a swap shows as crossed rows."""
    dims = len(a["lo"])
    row_h, left, width = 18, 44, 560
    img = np.full((dims * row_h + 8, left + width + 12, 3), 255, dtype=np.uint8)
    for d in range(dims):
        lo = np.nanmin([a["lo"][d], c["lo"][d]])
        hi = np.nanmax([a["hi"][d], c["hi"][d]])
        span = hi - lo if np.isfinite(hi - lo) and hi > lo else 1.0
        y = 4 + d * row_h

        def px(v: float, lo: float = lo, span: float = span) -> int:
            return left + int(np.clip((v - lo) / span, 0, 1) * (width - 1)) if np.isfinite(v) else left

        img[y + row_h - 1, left : left + width] = GRID
        for src, color, top in ((a, BLUE, y + 2), (c, ORANGE, y + 9)):
            x0, x1 = px(src["lo"][d]), px(src["hi"][d])
            img[top : top + 6, x0 : max(x1, x0 + 1) + 1] = color
            m = px(src["mean"][d])
            img[top - 1 : top + 7, max(m - 1, left) : m + 1] = INK
        _text(img, 4, y + 3, str(d), RED if d in flagged else INK)
        if d in flagged:
            img[y + 2 : y + row_h - 2, left - 6 : left - 2] = RED
    return write_png(path, img)
