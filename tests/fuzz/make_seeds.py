#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/): a few tiny valid
inputs per target, in the input layouts the harnesses document (tests/fuzz/<target>_fuzz.cc),
and the libFuzzer dictionaries (tests/fuzz/dict/<target>.dict: config keys and format tokens).
Regression seeds (inputs that once failed: a crash, a sanitizer report, a broken property) are
kept in the corpus folders under names starting with "regression-" and are not touched here.
Usage: tests/fuzz/make_seeds.py"""
import gzip
import json
import os
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "corpus")


def write(target, name, data):
    folder = os.path.join(ROOT, target)
    os.makedirs(folder, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def gz(data):
    return gzip.compress(data, compresslevel=6, mtime=0)


# ---- config: YAML job text, "#set key=value" lines are --set overrides ----
write("config", "minimal.yaml", "job: {name: fuzz}\n")
write("config", "mlp.yaml", """job:
  name: mlp_fashion_mnist
  seed: 1
model:
  type: mlp
  mlp:
    hidden: [256, 128]
data:
  batch_size: 128
  train: {type: idx_images, idx_images: {limit: 100}}
  test: {type: idx_images}
optimizer:
  type: sgd
  lr: 0.1
  momentum: 0.9
  nesterov: true
  schedule: {type: cosine, warmup_steps: 200}
train:
  epochs: 8
  log_every_steps: 100
  checkpoint: {every_steps: 10, keep_last: 2, resume: never}
log: {level: warn, levels: {data: info}}
""")
write("config", "wide_deep.yaml", """job: {name: wd, seed: 3}
model:
  type: wide_deep
  wide_deep: {embedding_dim: 8, hidden: [64], cross_features: [C1_x_C2], init_scale: 0.05}
data:
  batch_size: 256
  train:
    type: criteo_tsv
    criteo_tsv: {train_file: a.tsv, test_file: b.tsv, num_integer: 5, num_categorical: 3,
                 categorical_names: [origin, dest, route], malformed: skip}
  test: {type: synthetic_ctr, synthetic_ctr: {num_integer: 13, num_categorical: 26, size: 100}}
optimizer: {type: adam, lr: 0.001}
sparse_optimizer: {type: adagrad, lr: 0.05}
cluster:
  workers: 2
  servers: 2
  placement:
    - {match: "deep.*", place: ps}
  ps: {consistency: sync}
""")
write("config", "overrides.yaml", """#set model.mlp.hidden=[8, 4]
#set train.epochs=2
#set data.train.type=synthetic_images
#set job.name=overridden
model: {type: mlp}
""")
write("config", "anchors.yaml", """optimizer: &d {type: adagrad, lr: 0.5}
sparse_optimizer: *d
train: {epochs: 1, max_steps: 5}
""")

# ---- criteo: [flags][integer columns][categorical columns][chunk][TSV] ----
def criteo(flags, ni, nc, chunk, text):
    return bytes([flags, ni, nc, chunk]) + text.encode()

write("criteo", "plain", criteo(0, 2, 3, 0, "1\t5\t\t0a1b2c3d\t\tFFFFFFFF\n0\t-3\t12\t00000000\t1\t\n"))
write("criteo", "skip_crlf_chunks", criteo(2 | 4, 2, 3, 7,
      "1\t5\t7\tabc\tdef\t12\r\nlabel\tI1\tI2\tC1\tC2\tC3\r\n0\t\t\t\t\t\r\n1\t99999999999999999999\t1\t1\t1\t1\r\n0\t1\t2\t3\t4\t5"))
write("criteo", "gzip_limit", criteo(1 | 2 | (3 << 3), 1, 1, 3, "1\t2\t3\n0\t4\t5\n1\t6\t7\n0\t8\t9\n"))
write("criteo", "criteo_layout", criteo(0, 13, 26, 0,
      "1\t" + "\t".join(str(i) for i in range(13)) + "\t" + "\t".join("%08x" % (i * 2654435761 % 2**32) for i in range(26)) + "\n"))

# ---- idx: [flags][u16 images length][images][labels] ----
def idx(ndims, dims, payload):
    return struct.pack(">I", 0x800 | ndims) + b"".join(struct.pack(">I", d) for d in dims) + payload

def idx_input(flags, images, labels):
    return bytes([flags]) + struct.pack("<H", len(images)) + images + labels

images = idx(3, [3, 2, 2], bytes(range(12)))
labels = idx(1, [3], bytes([0, 9, 5]))
write("idx", "plain", idx_input(0, images, labels))
write("idx", "gzip_by_harness_test_split", idx_input(1 | 2 | 4, images, labels))
write("idx", "gzip_streams_limit", idx_input(2 << 3, gz(images), gz(labels)))
write("idx", "empty_set", idx_input(0, idx(3, [0, 28, 28], b""), idx(1, [0], b"")))

# ---- safetensors ----
def safetensors(tensors, metadata=None, pad=True):
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    data = b""
    for name, dtype, shape, payload in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data

f32 = lambda *v: struct.pack("<%df" % len(v), *v)
write("safetensors", "one_f32", safetensors([("w", "F32", [2, 2], f32(1, 2, 3, 4))]))
write("safetensors", "dtypes_metadata", safetensors([
    ("a", "F64", [1], struct.pack("<d", 0.5)), ("b", "F16", [2], b"\x00\x3c\x00\xc0"),
    ("c", "BF16", [1], b"\x80\x3f"), ("d", "I64", [1, 1], struct.pack("<q", -7)),
    ("e", "I32", [], struct.pack("<i", 3)), ("f", "U8", [3], b"xyz"), ("g", "F32", [0, 4], b"")],
    {"format": "pt", "aiacc.step": "12"}))
write("safetensors", "empty", safetensors([]))

# ---- checkpoint: [mode][...] ----
model = safetensors([("fc.weight", "F32", [2, 1], f32(0.25, -1)), ("fc.bias", "F32", [2], f32(0, 1))],
                    {"format": "pt", "aiacc.step": "7"})
manifest = json.dumps({"format": "aiacc-checkpoint", "version": 1, "step": 7,
                       "files": {"model": {"file": "model.safetensors", "bytes": len(model),
                                           "crc32": zlib.crc32(model), "tensors": 2}},
                       "state": {"epoch": 1, "position": 64, "rng": [1, 2]}}).encode()
write("checkpoint", "raw_manifest", bytes([0]) + struct.pack("<H", len(manifest)) + manifest + model)
write("checkpoint", "raw_manifest_latest", bytes([2]) + struct.pack("<H", len(manifest)) + manifest + model)
write("checkpoint", "consistent_manifest", bytes([1]) + model)

# ---- ps: table configs, requests, shard checkpoints ----
write("ps_table_config", "minimal", "name: emb\ndim: 8\n")
write("ps_table_config", "full", """name: deep.C1
dim: 16
init_scale: 0.05
seed: -1
optimizer: {type: adam, lr: 0.01}
table: {consistency: bounded, staleness: 2, num_workers: 2, min_count: 2, capacity_rows: 100,
        evict_to_fraction: 0.5}
""")
write("ps_table_config", "sync", "name: t\ndim: 4\noptimizer: {type: ftrl}\ntable: {consistency: sync, num_workers: 2, sync_average: false}\n")


def table_key(name):
    h = 0xcbf29ce484222325
    for c in name.encode():
        h ^= c
        h = (h * 0x100000001b3) % 2**64
    return h


OPS = {"create_table": 1, "pull": 2, "push": 3, "stats": 4, "save": 5, "load": 6, "dump_rows": 8, "load_rows": 9}


PS_VERSION = 2  # ps/protocol.h kVersion


def header(op, table="", worker=0, step=0, seq=1, count=0, dim=0, lr=0.0, session=42):
    return struct.pack("<IHHIIQQQQQIId", 0x53504941, PS_VERSION, OPS[op], worker, 0,
                       table_key(table) if table else 0, session, step, seq, count, dim, 0, lr)


def message(*frames):
    out = bytes([len(frames) - 1])
    for f in frames:
        if isinstance(f, str):
            f = f.encode()
        out += struct.pack("<H", len(f)) + f
    return out


def ids(*v):
    return struct.pack("<%dq" % len(v), *v)


cfg = "name: t\ndim: 2\noptimizer: {type: sgd}\n"
write("ps_request", "async_pull_push", b"".join([
    message(header("create_table", seq=1), cfg),
    message(header("pull", "t", seq=2, count=3, dim=2), ids(1, 2, -5)),
    message(header("push", "t", seq=3, count=2, dim=2, lr=0.1), ids(1, 2), f32(1, 2, 3, 4)),
    message(header("dump_rows", "t", seq=4)),
    message(header("stats", seq=5))]))
write("ps_request", "save_load_rows", b"".join([
    message(header("create_table", seq=1), cfg),
    message(header("load_rows", "t", seq=2, count=2, dim=2), ids(7, 8), f32(1, 2, 3, 4), b""),
    message(header("save", seq=3), "path"),
    message(header("load", seq=4), "path"),
    message(header("pull", "t", seq=5, count=1, dim=2), ids(8))]))
sync_cfg = "name: s\ndim: 1\ntable: {consistency: sync, num_workers: 2}\n"
write("ps_request", "sync_two_workers", b"".join([
    message(header("create_table", seq=1), sync_cfg),
    message(header("push", "s", worker=0, step=1, seq=2, count=1, dim=1, lr=0.5), ids(3), f32(1)),
    message(header("push", "s", worker=1, step=1, seq=1, count=1, dim=1, lr=0.5, session=43), ids(3), f32(2)),
    message(header("push", "s", worker=1, step=1, seq=1, count=1, dim=1, lr=0.5, session=43), ids(3), f32(2))]))
bounded_cfg = "name: b\ndim: 1\ntable: {consistency: bounded, staleness: 1, num_workers: 2, min_count: 2, capacity_rows: 2}\n"
write("ps_request", "bounded_admission_eviction", b"".join([
    message(header("create_table", seq=1), bounded_cfg),
    message(header("pull", "b", worker=0, step=5, seq=2, count=1, dim=1), ids(1)),
    message(header("push", "b", worker=1, step=0, seq=1, count=3, dim=1, lr=1, session=9), ids(1, 2, 3), f32(1, 1, 1)),
    message(header("push", "b", worker=0, step=0, seq=3, count=3, dim=1, lr=1), ids(1, 2, 3), f32(1, 1, 1)),
    message(header("pull", "b", worker=0, step=1, seq=4, count=4, dim=1), ids(1, 2, 3, 4))]))


def shard_checkpoint(tables, shard=0, num_shards=1):
    metadata = {"aiacc.ps.format": "ps-shard-v1", "aiacc.ps.shard": str(shard), "aiacc.ps.num_shards": str(num_shards)}
    tensors = []
    for name, yaml, dim, state, rows in tables:
        metadata["aiacc.ps.table." + name] = yaml
        tensors.append((name + ".ids", "I64", [len(rows)], ids(*rows)))
        tensors.append((name + ".values", "F32", [len(rows), dim], f32(*([0.5] * (len(rows) * dim)))))
        tensors.append((name + ".state", "F32", [len(rows), state], f32(*([0.1] * (len(rows) * state)))))
    return safetensors(tensors, metadata)


write("ps_shard_checkpoint", "sgd", shard_checkpoint([("t", cfg, 2, 0, [1, 5, 9])]))
write("ps_shard_checkpoint", "adagrad_two_tables", shard_checkpoint([
    ("a", "name: a\ndim: 3\noptimizer: {type: adagrad}\n", 3, 3, [4, 2]),
    ("e", "name: e\ndim: 1\noptimizer: {type: sgd}\n", 1, 0, [])]))

# ---- net: mesh handshake, rendezvous requests ----
def wire_str(s):
    s = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(s)) + s


def hello(kind, from_rank, to_rank, stream, job, reason="", proof=b""):
    return (struct.pack("<IIiii", 0x41494D32, kind, from_rank, to_rank, stream) + wire_str(job) +
            wire_str(reason) + wire_str(proof))


write("net_hello", "hello", hello(1, 1, 0, 2, "job-abc"))
write("net_hello", "hello_with_proof", hello(1, 1, 0, 2, "job-abc", proof=bytes(range(32))))
write("net_hello", "accept", hello(2, 0, 1, 2, "job-abc"))
write("net_hello", "reject", hello(3, 0, 1, 0, "job-abc", "wrong job"))


def rendezvous(connection, seq, op, body=b""):
    frame = struct.pack("<QI", seq, op) + body
    return bytes([connection]) + struct.pack("<H", len(frame)) + frame


def strings(*values):
    return struct.pack("<Q", len(values)) + b"".join(wire_str(v) for v in values)


write("rendezvous", "job", b"".join([
    rendezvous(0, 1, 1, struct.pack("<ii", 0, 2) + strings("tcp://10.0.0.1:4000", "tcp://10.0.0.1:4001")),
    rendezvous(1, 1, 1, struct.pack("<ii", 1, 2) + strings("tcp://10.0.0.2:4000")),
    rendezvous(0, 2, 2),
    rendezvous(0, 3, 3, wire_str("config-hash") + wire_str("abc123")),
    rendezvous(1, 2, 4, wire_str("config-hash")),
    rendezvous(1, 3, 4, wire_str("missing")),
    rendezvous(0, 4, 5, wire_str("start") + struct.pack("<i", 0)),
    rendezvous(1, 4, 5, wire_str("start") + struct.pack("<i", 1))]))
write("rendezvous", "abort", b"".join([
    rendezvous(0, 1, 1, struct.pack("<ii", 0, 2) + strings("a")),
    rendezvous(1, 1, 1, struct.pack("<ii", 1, 2) + strings("b")),
    rendezvous(1, 2, 6, struct.pack("<iI", 1, 1) + wire_str("d/train.tsv: no such file")),
    rendezvous(0, 2, 4, wire_str("data-size/1")),
    rendezvous(0, 3, 6, struct.pack("<iI", 0, 0) + wire_str("later"))]))
write("rendezvous", "duplicate_rank", b"".join([
    rendezvous(0, 1, 1, struct.pack("<ii", 0, 1) + strings("a")),
    rendezvous(2, 1, 1, struct.pack("<ii", 0, 1) + strings("b")),
    rendezvous(0, 2, 2)]))


# ---- libFuzzer dictionaries ----
def write_dict(target, tokens):
    folder = os.path.join(HERE, "dict")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, target + ".dict"), "w") as f:
        for token in sorted(set(tokens)):
            escaped = "".join("\\x%02x" % ord(c) if c in '"\\' or not c.isprintable() else c for c in token)
            f.write('"%s"\n' % escaped)


keys = set()
with open(os.path.join(HERE, "..", "..", "configs", "reference.yaml")) as f:
    for line in f:
        head = line.split("#", 1)[0].strip()
        if head and ":" in head and not head.startswith("-"):
            keys.add(head.split(":", 1)[0].strip() + ": ")
yaml_tokens = ["{", "}", "[", "]", ", ", "\n", "- ", "&a ", "*a", "!!str ", "~", "null", "true", "false",
               ".inf", ".nan", "1e308", "-1", "#set ", "=", "sgd", "adam", "adagrad", "ftrl", "async", "sync",
               "bounded"]
write_dict("config", sorted(keys) + yaml_tokens)
write_dict("ps_table_config", ["name: ", "dim: ", "init_scale: ", "seed: ", "optimizer: ", "table: ", "type: ",
                               "lr: ", "consistency: ", "staleness: ", "num_workers: ", "sync_average: ",
                               "min_count: ", "capacity_rows: ", "evict_to_fraction: "] + yaml_tokens)
json_tokens = ["{", "}", "[", "]", ",", ":", '"', "null", "true", "false", "-1", "1e400",
               "18446744073709551615", "9223372036854775807", "4611686018427387904"]
write_dict("safetensors", json_tokens + ['"dtype"', '"shape"', '"data_offsets"', '"__metadata__"', '"F32"',
                                         '"F64"', '"F16"', '"BF16"', '"I64"', '"I32"', '"U8"'])
write_dict("checkpoint", json_tokens + ['"format"', '"aiacc-checkpoint"', '"version"', '"step"', '"files"',
                                        '"state"', '"file"', '"bytes"', '"crc32"', '"model"',
                                        '"model.safetensors"', '"dtype"', '"shape"', '"data_offsets"'])
write_dict("ps_shard_checkpoint", json_tokens + ['"aiacc.ps.format"', '"ps-shard-v1"', '"aiacc.ps.shard"',
                                                 '"aiacc.ps.num_shards"', '"aiacc.ps.table.', '.ids"',
                                                 '.values"', '.state"', '"I64"', '"F32"', "\\ndim: ",
                                                 "\\nname: "])
