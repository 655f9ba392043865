#!/usr/bin/env python3
"""Training speed of aiacc-train against the same model in PyTorch, measured back to back.

For a preset (a config in configs/ plus its PyTorch twin in tools/bench/pytorch/) it trains the
same model with the same batch size on the same data and thread count, first with aiacc-train,
then with PyTorch, repeats that R times, and prints the median samples/s of both (with min and
max) and the ratio aiacc / PyTorch. --json FILE appends one JSON object per preset.

  tools/bench/compare_pytorch.py wide_deep_flights resnet_fashion_mnist --threads 2 --repeats 3

aiacc-train's figure is its own per-interval samples/s (metrics.jsonl) over the timed steps after
the first logging interval (warm-up); PyTorch's twin prints one JSON line measured after warm-up
steps. Evaluation, checkpoints and data loading before the first step are excluded on both sides.
PyTorch comes from Debian (python3-torch, run with /usr/bin/python3); install libopenblas0-pthread
first or Debian's torch falls back to the reference BLAS (shared/BENCHMARKS.md).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TORCH_PYTHON = "/usr/bin/python3"

# Each preset: the aiacc-train config, overrides that shape the timed run, and the PyTorch twin's
# command line for the same model, batch and data. {threads} and {steps} are filled in.
# The PyTorch twin of configs/resnet50_synthetic.yaml.
RESNET50_TWIN = ["tools/bench/pytorch/resnet.py", "--depth", "50", "--data", "synthetic",
                 "--batch", "256", "--image", "3,224,224", "--classes", "1000", "--label-smoothing", "0",
                 "--weight-decay", "1e-4", "--warmup", "3", "--threads", "{threads}", "--steps", "{steps}"]

PRESETS = {
    "wide_deep_flights": {
        "config": "configs/wide_deep_flights.yaml",
        "needs": ["data-cache/flights/train.tsv"],
        "hint": "run tools/flights/fetch_flights.sh first",
        "log_every": 50,
        "steps": 200,
        # One process with the twin's batch and threads (the config runs 2 workers x 256; two
        # processes given job.threads each would oversubscribe the cores).
        "overrides": ["cluster.workers=1", "data.batch_size=512"],
        "torch": ["tools/bench/pytorch/wide_deep.py", "--train", "data-cache/flights/train.tsv",
                  "--num-integer", "5", "--num-categorical", "3", "--names", "origin,dest,route",
                  "--cross", "origin_x_dest", "--embedding-dim", "16", "--hidden", "256,128",
                  "--batch", "512", "--limit", "400000", "--warmup", "20",
                  "--threads", "{threads}", "--steps", "{steps}"],
    },
    "wide_deep_synthetic": {
        "config": "configs/wide_deep_synthetic.yaml",
        "needs": [],
        "log_every": 50,
        "steps": 200,
        "torch": None,  # the twin reads TSV files; synthetic data has no file form
    },
    "resnet50_synthetic": {
        "config": "configs/resnet50_synthetic.yaml",
        "needs": [],
        "log_every": 1,
        "steps": 10,
        "overrides": ["optimizer.schedule.warmup_steps=0"],
        # ResNet-50 at 224x224, batch 256, as issue 8's benchmark names it. On a GPU (--device
        # cuda) the twin runs as the issue asks PyTorch to: channels_last and bf16 autocast.
        "torch": RESNET50_TWIN,
        # ... and aiacc-train with its mixed precision (bf16 channels-last activations, f32 weights).
        "torch_gpu": ["--amp", "bf16", "--channels-last"],
        "gpu_overrides": ["job.precision=bf16"],
    },
    "resnet_fashion_mnist": {
        "config": "configs/resnet_fashion_mnist.yaml",
        "needs": ["/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"],
        "hint": "apt-get install dataset-fashion-mnist",
        "log_every": 5,
        "steps": 30,
        "overrides": ["optimizer.schedule.warmup_steps=0"],  # short timed runs
        # ResNet-20 (CIFAR-style), batch 128, SGD Nesterov, crop padding 2 + flip, as the config.
        "torch": ["tools/bench/pytorch/resnet.py", "--depth", "20", "--batch", "128",
                  "--data", "fashion_mnist", "--crop-padding", "2", "--warmup", "5",
                  "--threads", "{threads}", "--steps", "{steps}"],
    },
}
# Wide&Deep on a GPU with the deep tables' bags pooled on the host (pooled rows copied over)
# instead of on the GPU (model.wide_deep.embedding_bags: device, the default): ours only.
PRESETS["wide_deep_flights_host_bags"] = dict(PRESETS["wide_deep_flights"], torch=None, gpu_only=True,
                                              overrides=PRESETS["wide_deep_flights"]["overrides"]
                                              + ["model.wide_deep.embedding_bags=host"])
# The same on a GPU in fp32 on both sides (TF32 convolutions, PyTorch's default), NCHW.
PRESETS["resnet50_synthetic_fp32"] = {key: value for key, value in PRESETS["resnet50_synthetic"].items()
                                      if key not in ("torch_gpu", "gpu_overrides")}


def run_aiacc(binary, preset, threads, steps, workdir, device):
    log_every = preset["log_every"]
    total = steps + log_every  # the first interval is warm-up
    run_dir = os.path.join(workdir, "aiacc")
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = [binary, os.path.join(ROOT, preset["config"]),
           "--set", f"job.run_dir={run_dir}", "--set", "job.name=bench",
           "--set", f"job.threads={threads}", "--set", f"train.max_steps={total}",
           "--set", f"train.log_every_steps={log_every}", "--set", "train.eval_each_epoch=false",
           "--set", "train.checkpoint.at_end=false", "--set", "train.checkpoint.resume=never",
           "--set", "log.level=warn"]
    for override in preset.get("overrides", []):
        cmd += ["--set", override]
    if device != "cpu":
        cmd += ["--set", f"job.device={device}", "--set", "cluster.workers=1"]
        for override in preset.get("gpu_overrides", []):
            cmd += ["--set", override]
    subprocess.run(cmd, cwd=ROOT, check=True)
    rates = []
    with open(os.path.join(run_dir, "bench", "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    train = [r for r in records if r.get("kind") == "train"]
    for r in train[1:]:
        rates.append(r["samples_per_s"])
    if not rates:
        raise RuntimeError("aiacc-train logged no timed interval")
    # Interval rates are per equal-sized interval: their mean is the throughput.
    return statistics.fmean(rates)


def run_torch(preset, threads, steps, device, python):
    args = [a.format(threads=threads, steps=steps) for a in preset["torch"]]
    if device != "cpu":
        args += ["--device", device] + preset.get("torch_gpu", [])
    out = subprocess.run([python] + args, cwd=ROOT, check=True, capture_output=True, text=True)
    for line in reversed(out.stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)["samples_per_s"]
    raise RuntimeError("the PyTorch twin printed no JSON line:\n" + out.stdout + out.stderr)


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("presets", nargs="+", choices=sorted(PRESETS))
    p.add_argument("--binary", default=os.path.join(ROOT, "build", "tools", "aiacc-train"))
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--steps", type=int, default=0,
                   help="timed steps per run (0: each preset's default)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", help="append one JSON object per preset to this file")
    p.add_argument("--device", default="cpu",
                   help="cpu, or cuda[:N]: aiacc-train with job.device (one worker), PyTorch on that GPU")
    p.add_argument("--python", default=TORCH_PYTHON if os.path.exists(TORCH_PYTHON) else sys.executable,
                   help="the Python with torch (default: Debian's /usr/bin/python3 where present)")
    a = p.parse_args()

    print(f"machine: {os.cpu_count()} cores; threads per side: {a.threads}; repeats: {a.repeats}; "
          f"device: {a.device}")
    print(f"{'preset':<28} {'aiacc samples/s':>22} {'pytorch samples/s':>22} {'ratio':>7}")
    for name in a.presets:
        preset = PRESETS[name]
        missing = [n for n in preset["needs"] if not os.path.exists(os.path.join(ROOT, n))]
        if missing:
            print(f"{name:<28} skipped: missing {missing[0]} ({preset.get('hint', '')})")
            continue
        if preset.get("gpu_only") and a.device == "cpu":
            print(f"{name:<28} skipped: a GPU preset (--device cuda)")
            continue
        steps = a.steps or preset["steps"]
        with tempfile.TemporaryDirectory() as workdir:
            aiacc, torch = [], []
            for _ in range(a.repeats):
                aiacc.append(run_aiacc(a.binary, preset, a.threads, steps, workdir, a.device))
                if preset["torch"]:
                    torch.append(run_torch(preset, a.threads, steps, a.device, a.python))
        ours = summary(aiacc)
        theirs = summary(torch) if torch else None
        ratio = ours["median"] / theirs["median"] if theirs else None
        fmt = lambda s: f"{s['median']:.0f} [{s['min']:.0f}-{s['max']:.0f}]" if s else "n/a"
        print(f"{name:<28} {fmt(ours):>22} {fmt(theirs):>22} {'n/a' if ratio is None else f'{ratio:.2f}x':>7}")
        if a.json:
            with open(a.json, "a") as f:
                f.write(json.dumps({"preset": name, "device": a.device, "threads": a.threads, "steps": steps,
                                    "repeats": a.repeats, "aiacc_samples_per_s": ours,
                                    "pytorch_samples_per_s": theirs, "ratio": ratio}) + "\n")


if __name__ == "__main__":
    sys.exit(main())
