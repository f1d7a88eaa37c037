#!/usr/bin/env python3
"""Interoperability goldens for hybridseq::io (include/hybridseq/io/safetensors.hpp).

Both directions use the same content (see ``expected_content``):

* ``write_io_goldens(outdir)`` writes ``<outdir>/io_python_written.safetensors`` with the
  reference Python ``safetensors`` library; tests/io/test_safetensors.cpp loads it with the
  C++ reader and checks every value exactly.
* ``check_cpp_written(path)`` loads ``io_cpp_written.safetensors`` (written by the C++
  SafetensorsWriter, committed, and compared byte-for-byte by the C++ test) with the
  reference library and asserts its contents: proof that Python reads what C++ writes.

Run standalone from the repository root:

    python3 tests/reference/golden_io.py tests/golden

which writes the Python golden and, if the C++ golden exists, checks it.

numpy has no bfloat16 type, so BF16 data is handled as raw uint16 bit patterns: the file is
written through ``safetensors.serialize_file`` (the function ``safetensors.numpy.save_file``
itself calls) and read through ``safetensors.deserialize`` for the BF16 tensor, because
``safetensors.numpy.load_file`` fails on BF16 without the optional ml_dtypes package.
"""

from __future__ import annotations

import os
import sys
from typing import Dict, Tuple

import numpy as np
from safetensors import TensorSpec, deserialize, safe_open, serialize_file

PYTHON_WRITTEN = "io_python_written.safetensors"
CPP_WRITTEN = "io_cpp_written.safetensors"

METADATA = {"format": "pt"}

# bfloat16 bit patterns (round to nearest even from float32) of [1.0, -0.15625, 3.0e38, 1e-3];
# hard-coded so that both sides are checked against the same literal bits.
BF16_BITS = [0x3F80, 0xBE20, 0x7F62, 0x3A83]


def float32_to_bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 (nearest, ties to even); returns uint16 bits."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def bfloat16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def expected_content() -> Dict[str, Tuple[str, np.ndarray]]:
    """name -> (safetensors dtype, array). BF16 arrays hold uint16 bit patterns."""
    bf16 = float32_to_bfloat16_bits(np.array([1.0, -0.15625, 3.0e38, 1e-3], dtype=np.float32))
    assert bf16.tolist() == BF16_BITS, [hex(b) for b in bf16.tolist()]
    return {
        "a_f32": ("F32", (0.5 * np.arange(6, dtype=np.float32) - 1.0).astype(np.float32)
                  .reshape(2, 3)),
        "b_f64": ("F64", np.array([1e-300, -2.0, 3.25, 1e300], dtype=np.float64)),
        "c_f16": ("F16", np.array([1.0, -2.5, 65504.0], dtype=np.float16)),
        "d_bf16": ("BF16", bf16.reshape(2, 2)),
        "e_i64": ("I64", np.array([-1, 0, 9007199254740993], dtype=np.int64)),
        "f_scalar": ("F32", np.array(7.0, dtype=np.float32)),
    }


_SPEC_DTYPE = {"F32": "float32", "F64": "float64", "F16": "float16", "BF16": "bfloat16",
               "I64": "int64", "I32": "int32"}


def write_io_goldens(outdir: str) -> str:
    """Writes <outdir>/io_python_written.safetensors; returns its path."""
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, PYTHON_WRITTEN)
    arrays = {}  # keeps the buffers alive while serialize_file reads them through data_ptr
    specs = {}
    for name, (dtype, array) in expected_content().items():
        # A C-contiguous copy; not np.ascontiguousarray, which turns a 0-d array into 1-d.
        array = np.array(array, order="C", copy=True)
        arrays[name] = array
        specs[name] = TensorSpec(dtype=_SPEC_DTYPE[dtype], shape=array.shape,
                                 data_ptr=array.ctypes.data, data_len=array.nbytes)
    serialize_file(specs, path, metadata=dict(METADATA))
    os.chmod(path, 0o644)  # the library creates the file owner-only; goldens are plain files
    print(f"wrote {path}")
    return path


def check_cpp_written(path: str) -> None:
    """Asserts that the reference library reads `path` as exactly the expected content."""
    expected = expected_content()

    with safe_open(path, framework="np") as f:
        assert f.metadata() == METADATA, f.metadata()
        assert sorted(f.keys()) == sorted(expected), f.keys()
        loaded = {name: f.get_tensor(name) for name, (dt, _) in expected.items() if dt != "BF16"}

    with open(path, "rb") as fh:
        raw = {name: info for name, info in deserialize(fh.read())}

    for name, (dtype, want) in expected.items():
        assert raw[name]["dtype"] == dtype, (name, raw[name]["dtype"], dtype)
        assert list(raw[name]["shape"]) == list(want.shape), (name, raw[name]["shape"], want.shape)
        if dtype == "BF16":
            got = np.frombuffer(bytes(raw[name]["data"]), dtype="<u2").reshape(want.shape)
            assert got.tolist() == want.tolist(), (name, [hex(b) for b in got.ravel().tolist()])
        else:
            got = loaded[name]
            assert got.dtype == want.dtype, (name, got.dtype, want.dtype)
            assert got.shape == want.shape, (name, got.shape, want.shape)
            # Bit-exact comparison (also distinguishes -0.0 and NaN payloads).
            assert got.tobytes() == want.tobytes(), (name, got, want)
    print(f"checked {path}: read by the Python safetensors library as expected")


def main(argv) -> int:
    outdir = argv[1] if len(argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "golden")
    write_io_goldens(outdir)
    cpp_path = os.path.join(outdir, CPP_WRITTEN)
    if os.path.exists(cpp_path):
        check_cpp_written(cpp_path)
    else:
        print(f"note: {cpp_path} not found; generate it with the C++ writer to check it")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
