"""The streamed safetensors writer against the library's own readers and the project's header check."""

from __future__ import annotations

import errno
import hashlib
import os

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file as load_numpy
from safetensors.torch import load_file as load_torch

from pipeline.errors import InputError
from pipeline.readers.base import safetensors_header
from pipeline.storage import latest_checkpoint, save_checkpoint, tensorfile


def test_torch_dtypes_shapes_and_layouts_round_trip(tmp_path):
    tensors = {
        "w": torch.randn(3, 4),
        "half": torch.randn(7).to(torch.bfloat16),
        "step": torch.tensor(7, dtype=torch.int64),  # 0-d
        "empty": torch.zeros(0, 3),
        "mask": torch.tensor([[True, False], [False, True]]),
        "transposed": torch.randn(4, 6).t(),  # not contiguous
    }
    saved = save_checkpoint(tensors, {"step": 1}, primary=tmp_path)
    back = load_torch(str(saved.path))
    assert set(back) == set(tensors)
    for key, value in tensors.items():
        assert back[key].dtype == value.dtype and torch.equal(back[key], value), key
    assert set(safetensors_header(saved.path)) == {"__metadata__", *tensors}
    assert saved.sha256 == hashlib.sha256(saved.path.read_bytes()).hexdigest()
    assert saved.size == saved.path.stat().st_size


def test_numpy_arrays_any_byte_order_round_trip(tmp_path):
    arrays = {
        "big_endian": np.arange(10, dtype=">i4"),
        "f16": np.ones((2, 3), np.float16),
        "scalar": np.array(1.5),
    }
    saved = save_checkpoint(arrays, {"step": 1}, primary=tmp_path)
    back = load_numpy(str(saved.path))
    for key, value in arrays.items():
        assert np.array_equal(back[key], value), key


def test_unstorable_values_are_named(tmp_path):
    with pytest.raises(InputError, match=r"array 'names' has dtype <U1"):
        save_checkpoint({"names": np.array(["a", "b"])}, primary=tmp_path)
    with pytest.raises(InputError, match="no tensors to save"):
        save_checkpoint({}, primary=tmp_path)
    assert not list(tmp_path.glob("*.safetensors"))


def _written(path, tensors):
    """A real file written the way a save writes it (hashed while written, fsynced), and its layout."""
    data = tensorfile.layout(tensors)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        sha = tensorfile.write_hashed(fd, data.head, data.pieces)
    finally:
        os.close(fd)
    return data, sha


def test_verification_catches_a_file_changed_after_writing(tmp_path):
    tensors = {"a": torch.arange(5000, dtype=torch.float32), "b": torch.ones(3, 3, dtype=torch.int64)}
    path = tmp_path / "x.safetensors"
    data, sha = _written(path, tensors)
    tensorfile.verify_written(path, data)  # the untouched file passes, and its hash is the file's
    assert sha == hashlib.sha256(path.read_bytes()).hexdigest()
    b_start = len(data.head) + data.pieces[0].nbytes
    for at, what in [(20, "the header"), (b_start, "tensor 'b'"), (path.stat().st_size - 1, "tensor 'b'")]:
        original = path.read_bytes()
        fd = os.open(path, os.O_WRONLY)
        os.pwrite(fd, bytes([original[at] ^ 0xFF]), at)  # one flipped byte, as a bad write would leave
        os.close(fd)
        with pytest.raises(OSError, match=f"at byte {at} \\({what}\\)") as caught:
            tensorfile.verify_written(path, data)
        assert caught.value.errno == errno.EIO and caught.value.filename == str(path)
        path.write_bytes(original)
    os.truncate(path, data.size - 8)
    with pytest.raises(OSError, match=f"is {data.size - 8} bytes, the layout says {data.size}"):
        tensorfile.verify_written(path, data)


def test_a_tensor_changed_during_the_save_fails_it_and_keeps_the_previous(tmp_path, monkeypatch):
    weights = torch.zeros(20000)
    first = save_checkpoint({"w": weights}, {"step": 1}, primary=tmp_path)
    real_write = tensorfile.write_hashed

    def training_step_meanwhile(fd, head, pieces):
        # a concurrent optimizer step cannot be timed in a test, so it runs right after the write
        sha = real_write(fd, head, pieces)
        weights.add_(1.0)
        return sha

    monkeypatch.setattr(tensorfile, "write_hashed", training_step_meanwhile)
    with pytest.raises(OSError, match="tensor 'w'.*tensor changed while it was being saved"):
        save_checkpoint({"w": weights}, {"step": 2}, primary=tmp_path)
    assert sorted(p.name for p in tmp_path.glob("*.safetensors")) == [first.path.name]
    assert not list(tmp_path.glob(".*.tmp"))
    assert latest_checkpoint(tmp_path).name == first.name
