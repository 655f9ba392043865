#!/usr/bin/env python3
"""PyTorch twin of aiacc-train's `wide_deep` model, for speed (and AUC) comparisons.

Same model as `model: {type: wide_deep, wide_deep: {...}}`: per categorical field a 1-dim wide
table and an `embedding_dim` deep table (nn.EmbeddingBag, sum, sparse gradients), optional
crossed fields in the wide part, the integer features into a Linear(I -> 1) of the wide part and
concatenated with the deep embeddings into the MLP (Linear+ReLU(+Dropout) per hidden layer, then
-> 1), logit = wide + deep, binary cross-entropy with logits. Raw values are hashed exactly as
aiacc-train does (mix64(raw ^ salt(field name))), then folded modulo a fixed table size (PyTorch
tables are dense matrices; aiacc-train's stores take the 64-bit ids as they are). Embeddings use
Adagrad, dense parameters Adam, like configs/wide_deep_*.yaml.

Reads Criteo-format TSV (label, I integers, C hex categoricals; empty = missing) with plain
Python, transforms integers like the criteo_tsv reader (log1p(max(x, 0)), missing -> 0), trains,
and prints one JSON line measured after warm-up:
  {"framework": "pytorch", "model": "wide_deep", "batch": 512, "threads": 2, "samples_per_s": ...}

  /usr/bin/python3 tools/bench/pytorch/wide_deep.py --train data-cache/flights/train.tsv \
      --num-integer 5 --num-categorical 3 --names origin,dest,route --cross origin_x_dest \
      --threads 2 --limit 200000
  ... --test data-cache/flights/test.tsv --epochs 1     # a full run, with the test AUC
Needs python3-torch (Debian: /usr/bin/python3) and numpy.
"""

import argparse
import json
import math
import sys
import time

import numpy as np
import torch
from torch import nn

MASK64 = (1 << 64) - 1


def mix64(x):
    """splitmix64's finaliser on uint64 arrays (core/util/random.h mix64), wrapping like C++."""
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def salt_of(name):
    """FeatureHasher::salt_of: mix64 of the 64-bit FNV-1a hash of the name's UTF-8 bytes."""
    h = 0xCBF29CE484222325
    for byte in name.encode("utf-8"):
        h = ((h ^ byte) * 0x100000001B3) & MASK64
    return int(mix64(np.uint64(h)))


def read_tsv(path, num_integer, num_categorical, limit):
    """(labels f32 [N], ints f32 [N, I], raw int64 [N, C] with -1 for missing)."""
    labels, ints, cats = [], [], []
    with open(path, "r") as f:
        for line_number, line in enumerate(f, 1):
            cols = line.rstrip("\r\n").split("\t")
            if len(cols) != 1 + num_integer + num_categorical:
                raise ValueError(f"{path}:{line_number}: {len(cols)} columns, expected "
                                 f"{1 + num_integer + num_categorical}")
            labels.append(float(cols[0]))
            ints.append([math.log1p(max(int(v), 0)) if v else 0.0
                         for v in cols[1:1 + num_integer]])
            cats.append([int(v, 16) if v else -1 for v in cols[1 + num_integer:]])
            if limit and len(labels) >= limit:
                break
    return (np.asarray(labels, dtype=np.float32),
            np.asarray(ints, dtype=np.float32).reshape(len(labels), num_integer),
            np.asarray(cats, dtype=np.int64).reshape(len(labels), num_categorical))


def hashed_ids(raw, names, crosses, table_size):
    """Field ids [N, C] and cross ids [N, K] folded into [0, table_size), as int64."""
    full = np.stack([mix64(raw[:, f].astype(np.uint64) ^ np.uint64(salt_of(n)))
                     for f, n in enumerate(names)], axis=1) if names else np.zeros((len(raw), 0), np.uint64)
    size = np.uint64(table_size)
    fields = (full % size).astype(np.int64)
    cross_cols = []
    for name, a, b in crosses:
        left = mix64(full[:, a] ^ np.uint64(salt_of(name)))
        cross_cols.append((mix64(left ^ full[:, b]) % size).astype(np.int64))
    crossed = np.stack(cross_cols, axis=1) if cross_cols else np.zeros((len(raw), 0), np.int64)
    return fields, crossed


def parse_crosses(entries, names):
    crosses = []
    for entry in entries:
        for at in [i for i in range(len(entry)) if entry.startswith("_x_", i)]:
            a, b = entry[:at], entry[at + 3:]
            if a in names and b in names:
                crosses.append((entry, names.index(a), names.index(b)))
                break
        else:
            raise SystemExit(f"--cross {entry}: not <field>_x_<field> over {','.join(names)}")
    return crosses


class WideDeep(nn.Module):
    def __init__(self, num_fields, num_crosses, num_integer, table_size, dim, hidden, dropout,
                 wide, deep, init_scale):
        super().__init__()
        self.wide, self.deep = wide, deep
        self.sparse = nn.ModuleList()
        if wide:
            self.wide_tables = nn.ModuleList(
                nn.EmbeddingBag(table_size, 1, mode="sum", sparse=True)
                for _ in range(num_fields + num_crosses))
            for t in self.wide_tables:
                nn.init.zeros_(t.weight)  # wide_init_scale 0: logistic regression's start
            self.sparse.extend(self.wide_tables)
            self.wide_dense = nn.Linear(num_integer, 1, bias=False) if num_integer else None
            self.wide_bias = nn.Parameter(torch.zeros(1))
        if deep:
            self.deep_tables = nn.ModuleList(
                nn.EmbeddingBag(table_size, dim, mode="sum", sparse=True) for _ in range(num_fields))
            for t in self.deep_tables:
                nn.init.uniform_(t.weight, -init_scale, init_scale)
            self.sparse.extend(self.deep_tables)
            layers, width = [], num_fields * dim + num_integer
            for units in hidden:
                layers += [nn.Linear(width, units), nn.ReLU()]
                if dropout > 0:
                    layers.append(nn.Dropout(dropout))
                width = units
            layers.append(nn.Linear(width, 1))
            self.mlp = nn.Sequential(*layers)

    def forward(self, ints, fields, crossed):
        # fields [N, C], crossed [N, K]: one id per example and field (a bag of one).
        logit = torch.zeros(ints.shape[0], device=ints.device)
        if self.wide:
            columns = torch.cat([fields, crossed], dim=1)
            for k, table in enumerate(self.wide_tables):
                logit = logit + table(columns[:, k:k + 1]).squeeze(1)
            if self.wide_dense is not None:
                logit = logit + self.wide_dense(ints).squeeze(1)
            logit = logit + self.wide_bias
        if self.deep:
            pooled = [table(fields[:, f:f + 1]) for f, table in enumerate(self.deep_tables)]
            logit = logit + self.mlp(torch.cat(pooled + [ints], dim=1)).squeeze(1)
        return logit


def auc(scores, labels):
    """Rank-sum AUC with tied scores sharing their average rank."""
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    sorted_scores = scores[order]
    i = 0
    while i < len(order):
        j = i
        while j < len(order) and sorted_scores[j] == sorted_scores[i]:
            j += 1
        ranks[order[i:j]] = 0.5 * (i + 1 + j)
        i = j
    positives = labels > 0.5
    n_pos, n_neg = positives.sum(), (~positives).sum()
    return float((ranks[positives].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train", required=True, help="Criteo-format TSV of the train split")
    p.add_argument("--test", help="TSV of the test split (AUC after --epochs)")
    p.add_argument("--num-integer", type=int, default=13)
    p.add_argument("--num-categorical", type=int, default=26)
    p.add_argument("--names", help="comma-separated categorical field names (default C1..Cn)")
    p.add_argument("--cross", action="append", default=[], help="crossed fields a_x_b (repeatable)")
    p.add_argument("--limit", type=int, default=0, help="read only the first N lines (0: all)")
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--embedding-dim", type=int, default=16)
    p.add_argument("--hidden", default="256,128")
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--no-wide", action="store_true")
    p.add_argument("--no-deep", action="store_true")
    p.add_argument("--table-size", type=int, default=1 << 18, help="rows per table (ids folded)")
    p.add_argument("--init-scale", type=float, default=0.05)
    p.add_argument("--lr", type=float, default=0.001, help="Adam, dense parameters")
    p.add_argument("--sparse-lr", type=float, default=0.05, help="Adagrad, embedding rows")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    p.add_argument("--steps", type=int, default=100, help="timed steps (bench mode)")
    p.add_argument("--epochs", type=int, default=0, help="> 0: train this many epochs instead")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", default="cpu",
                   help="cpu, or cuda[:N]: the model on that GPU, each batch copied there from the host")
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    names = args.names.split(",") if args.names else [f"C{i + 1}" for i in range(args.num_categorical)]
    if len(names) != args.num_categorical:
        raise SystemExit(f"--names lists {len(names)} fields, --num-categorical is {args.num_categorical}")
    crosses = parse_crosses(args.cross, names)

    labels, ints, raw = read_tsv(args.train, args.num_integer, args.num_categorical, args.limit)
    fields, crossed = hashed_ids(raw, names, crosses, args.table_size)
    labels_t, ints_t = torch.from_numpy(labels), torch.from_numpy(ints)
    fields_t, crossed_t = torch.from_numpy(fields), torch.from_numpy(crossed)
    n = len(labels)
    steps_per_epoch = n // args.batch  # drop_last, like the trainer
    if steps_per_epoch < 1:
        raise SystemExit(f"{n} examples: fewer than one batch of {args.batch}")

    hidden = [int(h) for h in args.hidden.split(",") if h]
    model = WideDeep(len(names), len(crosses), args.num_integer, args.table_size,
                     args.embedding_dim, hidden, args.dropout, not args.no_wide, not args.no_deep,
                     args.init_scale)
    device = torch.device(args.device)
    model = model.to(device)
    on_gpu = device.type == "cuda"

    def sync():  # GPU work is asynchronous: time what has finished
        if on_gpu:
            torch.cuda.synchronize(device)

    sparse_ids = {id(q) for q in model.sparse.parameters()}
    sparse = list(model.sparse.parameters())
    dense = [q for q in model.parameters() if id(q) not in sparse_ids]
    sparse_opt = torch.optim.Adagrad(sparse, lr=args.sparse_lr)
    dense_opt = torch.optim.Adam(dense, lr=args.lr)
    loss_fn = nn.BCEWithLogitsLoss()
    rng = np.random.default_rng(args.seed)

    def step(index):
        s = slice(index * args.batch, (index + 1) * args.batch)
        logit = model(ints_t[s].to(device), fields_t[s].to(device), crossed_t[s].to(device))
        loss = loss_fn(logit, labels_t[s].to(device))
        sparse_opt.zero_grad()
        dense_opt.zero_grad()
        loss.backward()
        sparse_opt.step()
        dense_opt.step()
        return loss

    model.train()
    if args.epochs > 0:
        start, done = time.perf_counter(), 0
        for _ in range(args.epochs):
            perm = torch.from_numpy(rng.permutation(n))
            labels_t, ints_t = labels_t[perm], ints_t[perm]
            fields_t, crossed_t = fields_t[perm], crossed_t[perm]
            for k in range(steps_per_epoch):
                step(k)
                done += 1
        sync()
        elapsed = time.perf_counter() - start
    else:
        for k in range(args.warmup):
            step(k % steps_per_epoch)
        sync()
        start = time.perf_counter()
        for k in range(args.steps):
            step((args.warmup + k) % steps_per_epoch)
        sync()
        elapsed, done = time.perf_counter() - start, args.steps

    result = {"framework": "pytorch", "model": "wide_deep", "batch": args.batch, "device": args.device,
              "threads": args.threads, "samples_per_s": round(done * args.batch / elapsed, 1)}
    if args.test:
        t_labels, t_ints, t_raw = read_tsv(args.test, args.num_integer, args.num_categorical, 0)
        t_fields, t_crossed = hashed_ids(t_raw, names, crosses, args.table_size)
        model.eval()
        with torch.no_grad():
            scores = model(torch.from_numpy(t_ints).to(device), torch.from_numpy(t_fields).to(device),
                           torch.from_numpy(t_crossed).to(device)).cpu().numpy()
        result["test_auc"] = round(auc(scores, t_labels), 4)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
