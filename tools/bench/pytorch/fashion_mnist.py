"""Fashion-MNIST for the PyTorch twins: reads Debian's gzip'd IDX files (dataset-fashion-mnist)
with gzip + numpy and normalises exactly like aiacc-train's idx_images dataset
((pixel / 255 - 0.286) / 0.353), plus the augmentation of data.augment (random crop of the
zero-padded normalised image, horizontal flip)."""

import gzip
import os
import struct

import numpy as np

DEFAULT_DIRECTORY = "/usr/share/datasets/fashion-mnist"
MEAN = 0.286
STD = 0.353


def read_idx(path):
    """Returns the array stored in an IDX file (gzip'd or not), shaped by its header."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, dtype_code, ndims = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype_code != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file (magic {data[:4].hex()})")
    dims = struct.unpack(">" + "I" * ndims, data[4:4 + 4 * ndims])
    array = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndims)
    if array.size != int(np.prod(dims)):
        raise ValueError(f"{path}: header says {dims}, file holds {array.size} values")
    return array.reshape(dims)


def load(split, directory=DEFAULT_DIRECTORY):
    """(images float32 [N, 1, 28, 28] normalised, labels int64 [N]) of "train" or "test"."""
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(os.path.join(directory, f"{prefix}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(directory, f"{prefix}-labels-idx1-ubyte.gz"))
    images = (images.astype(np.float32) / 255.0 - MEAN) / STD
    return images[:, None, :, :], labels.astype(np.int64)


def augment(batch, padding, flip, rng):
    """Random crop of the zero-padded batch [N, C, H, W] back to H x W, then a left-right flip
    with probability 1/2, per example (numpy, returns a new array)."""
    n, c, h, w = batch.shape
    out = batch
    if padding > 0:
        padded = np.zeros((n, c, h + 2 * padding, w + 2 * padding), dtype=batch.dtype)
        padded[:, :, padding:padding + h, padding:padding + w] = batch
        tops = rng.integers(0, 2 * padding + 1, size=n)
        lefts = rng.integers(0, 2 * padding + 1, size=n)
        rows = tops[:, None] + np.arange(h)[None, :]   # [N, H]
        cols = lefts[:, None] + np.arange(w)[None, :]  # [N, W]
        index_n = np.arange(n)[:, None, None, None]
        index_c = np.arange(c)[None, :, None, None]
        out = padded[index_n, index_c, rows[:, None, :, None], cols[:, None, None, :]]
    if flip:
        mirror = rng.random(n) < 0.5
        out = out.copy() if out is batch else out
        out[mirror] = out[mirror][..., ::-1]
    return out
