#!/usr/bin/env python3
"""Reads a safetensors file the way PyTorch users will, and prints what it holds as JSON.

Usage: safetensors_torch_check.py FILE
Prints {"metadata": {...}, "tensors": {name: {"dtype", "shape", "sum"}}} on stdout, in file order.

The `safetensors` pip package is not available on our build machines, so this script is its
stand-in: it parses the file strictly per the published format (8-byte little-endian header size,
JSON header, contiguous data buffer) with only the standard library, and builds tensors with
torch.frombuffer, which is what safetensors.torch does underneath. A file this accepts with the
right sums is a file safetensors.torch.load_file accepts with the same names.

Exit status: 0 on success, 1 when the file violates the format, 77 (Meson's SKIP) when torch is
not installed.
"""
import json
import struct
import sys

try:
    import torch
except ImportError:
    print("SKIP: torch is not installed", file=sys.stderr)
    sys.exit(77)

DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}
ITEM_SIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
             "U8": 1, "BOOL": 1}


def fail(message):
    print(f"invalid safetensors file: {message}", file=sys.stderr)
    sys.exit(1)


def parse(data):
    """Returns ({name: tensor} in file order, metadata) of a safetensors file's bytes."""
    if len(data) < 8:
        fail("shorter than 8 bytes")
    (header_size,) = struct.unpack("<Q", data[:8])
    if header_size > len(data) - 8 or header_size > 100_000_000:
        fail(f"header size {header_size} out of range")
    header_bytes = data[8:8 + header_size]
    if header_size % 8 != 0:
        fail(f"header size {header_size} is not a multiple of 8 (our writer pads)")
    if not header_bytes.startswith(b"{"):
        fail("header does not start with '{'")
    header = json.loads(header_bytes.decode("utf-8"))  # trailing spaces are valid JSON
    buffer = data[8 + header_size:]
    metadata = header.pop("__metadata__", {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        fail("__metadata__ must map strings to strings")

    entries = sorted(header.items(), key=lambda item: tuple(item[1]["data_offsets"]))
    expected_begin = 0
    tensors = {}
    for name, info in entries:
        dtype = info["dtype"]
        shape = info["shape"]
        begin, end = info["data_offsets"]
        if begin != expected_begin:
            fail(f"tensor {name!r} starts at {begin}, expected {expected_begin} (hole or overlap)")
        numel = 1
        for dim in shape:
            numel *= dim
        if end - begin != numel * ITEM_SIZE[dtype]:
            fail(f"tensor {name!r}: {end - begin} bytes for shape {shape} of {dtype}")
        expected_begin = end
        if numel == 0:
            tensor = torch.empty(shape, dtype=DTYPES[dtype])  # frombuffer rejects empty buffers
        else:
            tensor = torch.frombuffer(bytearray(buffer[begin:end]), dtype=DTYPES[dtype])
            tensor = tensor.reshape(shape)
        tensors[name] = tensor
    if expected_begin != len(buffer):
        fail(f"{len(buffer) - expected_begin} bytes after the last tensor")
    ordered = sorted(header.items(), key=lambda item: tuple(item[1]["data_offsets"]))
    return {name: tensors[name] for name, _ in ordered}, metadata


def main(path):
    with open(path, "rb") as f:
        tensors, metadata = parse(f.read())
    result = {"metadata": metadata, "tensors": {}}
    for name, tensor in tensors.items():
        result["tensors"][name] = {
            "dtype": str(tensor.dtype).replace("torch.", ""),
            "shape": list(tensor.shape),
            "sum": tensor.to(torch.float64).sum().item(),
        }
    print(json.dumps(result))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1])
