"""The streamed safetensors writer against the library's own readers and the project's header check."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file as load_numpy
from safetensors.torch import load_file as load_torch

from pipeline.errors import InputError
from pipeline.readers.base import safetensors_header
from pipeline.storage import save_checkpoint


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
