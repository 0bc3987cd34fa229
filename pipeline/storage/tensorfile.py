"""safetensors files written piece by piece, hashed while they are written.

`safetensors.torch.save` builds the whole file in memory (twice: a Rust buffer, then Python bytes) before
anything reaches the disk; for a 10 GB checkpoint that is 20 GB of RAM and most of the save's time. The
format is simple enough to stream (an 8-byte little-endian header length, a JSON header of dtype, shape
and byte offsets padded to 8 bytes, then the raw little-endian tensor bytes back to back), so here each
tensor's own memory is written directly while a second thread feeds the same chunks to sha256. Files
are byte-compatible with the library's readers (tested against `safetensors.*.load_file`).

What a save verifies, and why that is enough (`write_hashed` + `verify_written`):
- the sha256 is computed from the very memoryviews handed to `os.write`, chunk by chunk, so it is the
  hash of the bytes the kernel accepted (every short write is resumed; a failed one raises) as long
  as the tensors hold still during the save: the hasher and the writer read each chunk moments apart;
- fsync (run while the hash finishes) returned without error: since Linux 4.13 a write-back failure
  of any of those pages is reported there (EIO/ENOSPC), so the kernel vouches that storage holds them;
- after fsync, a fresh descriptor re-reads the file: its size must be the layout's exact size, and
  the whole header plus the first and last 4 KiB of every tensor must equal the memory that was
  hashed. That catches a truncated or misplaced write, a wrong offset in the header, pieces out of
  order, and a tensor that a concurrent thread changed during the save (at those places).
A full read-back is deliberately not done: on a local filesystem it re-reads the same page-cache pages
the write just filled (it cannot see the medium without dropping them, which doubles the I/O), and it
measured 0.5-0.8x of a whole `save_file` on tmpfs -- more than the rest of the save's overhead.
`storage.digest.sha256_file` (used by `latest_checkpoint`) re-hashes the file when a checkpoint is loaded.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import queue
import struct
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from pipeline.errors import InputError

CHUNK = 8 * 2**20  # the unit handed to the writer and the hasher (32 MiB and 2 MiB timed alike)
SAMPLE = 4096  # bytes re-read at each end of every tensor
NUMPY_CODES = {
    "float64": "F64",
    "float32": "F32",
    "float16": "F16",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint64": "U64",
    "uint32": "U32",
    "uint16": "U16",
    "uint8": "U8",
    "bool": "BOOL",
}
TORCH_CODES = {"bfloat16": "BF16", "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2", **NUMPY_CODES}


def _torch_piece(name: str, tensor: Any) -> tuple[str, list[int], memoryview, Any]:
    code = TORCH_CODES.get(str(tensor.dtype).removeprefix("torch."))
    if code is None:
        raise InputError(
            f"save_checkpoint: tensor {name!r} has dtype {tensor.dtype}, not storable in safetensors",
            field=f"tensors.{name}",
        )
    import torch

    flat = tensor.detach().cpu().contiguous().reshape(-1)
    raw = flat.view(torch.uint8).numpy()
    return code, list(tensor.shape), memoryview(raw).cast("B"), flat


def _numpy_piece(name: str, array: Any) -> tuple[str, list[int], memoryview, Any]:
    array = np.asarray(array)
    code = NUMPY_CODES.get(array.dtype.name)
    if code is None or array.dtype.hasobject:
        raise InputError(
            f"save_checkpoint: array {name!r} has dtype {array.dtype}, not storable in safetensors",
            field=f"tensors.{name}",
        )
    flat = np.ascontiguousarray(array.astype(array.dtype.newbyteorder("<"), copy=False)).reshape(-1)
    return code, list(array.shape), memoryview(flat.view(np.uint8)), flat


class Layout(NamedTuple):
    """A safetensors file as pieces of memory: nothing copied but the header."""

    head: bytes  # length-prefixed JSON header
    pieces: list[memoryview]  # each tensor's bytes, in file order
    size: int  # the file's exact size
    alive: list[Any]  # the arrays behind `pieces`, kept alive until written
    names: list[str]  # tensor names, in file order (for error messages)


def layout(tensors: Mapping[str, Any]) -> Layout:
    """The header and the pieces of a safetensors file for `tensors` (no tensor data copied)."""
    if not tensors:
        raise InputError("save_checkpoint: no tensors to save (expected a non-empty dict)", field="tensors")
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    pieces, alive, offset = [], [], 0
    for name, value in tensors.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise InputError(f"save_checkpoint: tensor name {name!r} is not allowed", field="tensors")
        is_torch = type(value).__module__.startswith("torch")
        code, shape, raw, keep = (_torch_piece if is_torch else _numpy_piece)(name, value)
        header[name] = {"dtype": code, "shape": shape, "data_offsets": [offset, offset + raw.nbytes]}
        offset += raw.nbytes
        pieces.append(raw)
        alive.append(keep)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    head = struct.pack("<Q", len(text)) + text
    return Layout(head, pieces, len(head) + offset, alive, list(tensors))


def write_hashed(fd: int, head: bytes, pieces: list[memoryview], *, fsync: bool = True) -> str:
    """Write header and pieces to `fd` while a thread hashes the same chunks, then fsync `fd` while that
    thread finishes its backlog (on a disk the device's write-back overlaps the hash's last chunks
    instead of following them); returns the sha256."""
    sha = hashlib.sha256()
    chunks: queue.SimpleQueue[memoryview | bytes | None] = queue.SimpleQueue()

    def hasher() -> None:
        while (chunk := chunks.get()) is not None:
            sha.update(chunk)

    thread = threading.Thread(target=hasher, name="checkpoint-sha256", daemon=True)
    thread.start()
    try:
        for piece in [memoryview(head), *pieces]:
            for start in range(0, len(piece), CHUNK):
                chunk = piece[start : start + CHUNK]
                chunks.put(chunk)
                _write_all(fd, chunk)
        if fsync:
            os.fsync(fd)
    finally:
        chunks.put(None)
        thread.join()
    return sha.hexdigest()


def verify_written(path: Path, data: Layout) -> None:
    """Re-read `path` through a fresh descriptor: the exact size, the whole header, and the first and
    last `SAMPLE` bytes of every tensor must equal the memory that was hashed (see the module doc for
    why this, and not a full read-back). Raises OSError(EIO) naming the file, offset and tensor."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size != data.size:
            raise _mismatch(path, f"is {size} bytes, the layout says {data.size}")
        spots: list[tuple[int, memoryview, str]] = [(0, memoryview(data.head), "the header")]
        offset = len(data.head)
        for name, piece in zip(data.names, data.pieces, strict=True):
            ends = {0, max(len(piece) - SAMPLE, 0)} if len(piece) else set()
            spots += [(offset + at, piece[at : at + SAMPLE], f"tensor {name!r}") for at in sorted(ends)]
            offset += len(piece)
        for at, meant, what in spots:
            got, want = os.pread(fd, len(meant), at), bytes(meant)
            if got != want:
                first = next((i for i, (x, y) in enumerate(zip(got, want, strict=False)) if x != y), len(got))
                raise _mismatch(path, f"differs from memory at byte {at + first} ({what})")
    finally:
        os.close(fd)


def _mismatch(path: Path, what: str) -> OSError:
    return OSError(
        errno.EIO,
        f"checkpoint verification failed: the written file {what} -- a write that went wrong, or a "
        "tensor changed while it was being saved (save from a quiescent state dict)",
        str(path),
    )


def _write_all(fd: int, chunk: memoryview) -> None:
    done = 0
    while done < len(chunk):
        done += os.write(fd, chunk[done:])
