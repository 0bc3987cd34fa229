"""safetensors files written piece by piece, hashed while they are written.

`safetensors.torch.save` builds the whole file in memory (twice: a Rust buffer, then Python bytes) before
anything reaches the disk; for a 10 GB checkpoint that is 20 GB of RAM and most of the save's time. The
format is simple enough to stream (an 8-byte little-endian header length, a JSON header of dtype, shape
and byte offsets padded to 8 bytes, then the raw little-endian tensor bytes back to back), so here each
tensor's own memory is written directly while a second thread feeds the same chunks to sha256. Files
are byte-compatible with the library's readers (tested against `safetensors.*.load_file`).
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import struct
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import InputError

CHUNK = 32 * 2**20
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


def layout(tensors: Mapping[str, Any]) -> tuple[bytes, list[memoryview], int, list[Any]]:
    """(length-prefixed header, data pieces in file order, total size, the arrays to keep alive)."""
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
    return head, pieces, len(head) + offset, alive


def write_hashed(fd: int, head: bytes, pieces: list[memoryview]) -> str:
    """Write header and pieces to `fd` while a thread hashes the same chunks; returns the sha256."""
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
    finally:
        chunks.put(None)
        thread.join()
    return sha.hexdigest()


def _write_all(fd: int, chunk: memoryview) -> None:
    done = 0
    while done < len(chunk):
        done += os.write(fd, chunk[done:])


def file_sha256(path: Path) -> str:
    sha = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while chunk := handle.read(CHUNK):
            sha.update(chunk)
    return sha.hexdigest()
