#!/usr/bin/env python3
"""PyTorch twin of aiacc-train's `resnet` model, for speed (and accuracy) comparisons.

Builds the same network as `model: {type: resnet, resnet: {...}}` (same depths, styles, widths,
stems, torchvision state-dict names; torchvision.models.resnet* itself for ImageNet-style nets at
the default width), trains it on the same data with the same optimiser (SGD, Nesterov momentum,
weight decay on conv/linear weights only, label smoothing, warm-up + cosine) and prints one JSON
line measured after a few warm-up steps:
  {"framework": "pytorch", "model": "resnet20", "batch": 128, "threads": 2, "samples_per_s": ...}

  /usr/bin/python3 tools/bench/pytorch/resnet.py --depth 20 --threads 2 --steps 50
  /usr/bin/python3 tools/bench/pytorch/resnet.py --depth 50 --data synthetic --batch 256 \
      --image 3,224,224 --classes 1000 --steps 5 --warmup 2
  /usr/bin/python3 tools/bench/pytorch/resnet.py --depth 20 --epochs 12   # full run + accuracy
  /usr/bin/python3 tools/bench/pytorch/resnet.py --depth 18 --image 3,224,224 --classes 1000 \
      --data synthetic --print-state-dict-names
  /usr/bin/python3 tools/bench/pytorch/resnet.py --depth 20 \
      --eval-checkpoint runs/resnet_fashion_mnist/checkpoints/step-000000007020/model.safetensors
      (loads an aiacc-train dense checkpoint strictly by torchvision names and prints the test
      accuracy PyTorch computes with it: it must equal aiacc-train's eval accuracy)
  python3 tools/bench/pytorch/resnet.py --depth 50 --data synthetic --batch 256 --image 3,224,224 \
      --classes 1000 --device cuda --amp bf16 --channels-last --steps 20 --warmup 5   # on a GPU
Needs python3-torch (Debian: /usr/bin/python3); python3-torchvision for ImageNet-style nets.
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fashion_mnist  # noqa: E402

IMAGENET_DEPTHS = {18: ("basic", [2, 2, 2, 2]), 34: ("basic", [3, 4, 6, 3]),
                   50: ("bottleneck", [3, 4, 6, 3]), 101: ("bottleneck", [3, 4, 23, 3]),
                   152: ("bottleneck", [3, 8, 36, 3])}


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = projection(inplanes, planes, stride)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        skip = x if self.downsample is None else self.downsample(x)
        return self.relu(out + skip)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, 1, 0, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)  # v1.5: stride here
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, 1, 0, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = projection(inplanes, planes * 4, stride)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        skip = x if self.downsample is None else self.downsample(x)
        return self.relu(out + skip)


def projection(inplanes, outplanes, stride):
    """torchvision's downsample (1x1 strided conv + BN) where the shape changes, else None."""
    if stride == 1 and inplanes == outplanes:
        return None
    return nn.Sequential(nn.Conv2d(inplanes, outplanes, 1, stride, 0, bias=False),
                         nn.BatchNorm2d(outplanes))


class ResNet(nn.Module):
    """ImageNet-style (4 stages) or CIFAR-style (3 stages) ResNet with torchvision's names."""

    def __init__(self, block, blocks_per_stage, width, in_channels, classes, imagenet_stem,
                 zero_init_residual):
        super().__init__()
        block_class = BasicBlock if block == "basic" else Bottleneck
        if imagenet_stem:
            self.conv1 = nn.Conv2d(in_channels, width, 7, 2, 3, bias=False)
        else:
            self.conv1 = nn.Conv2d(in_channels, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1) if imagenet_stem else nn.Identity()
        channels = width
        for stage, count in enumerate(blocks_per_stage):
            planes = width << stage
            blocks = []
            for b in range(count):
                stride = 2 if stage > 0 and b == 0 else 1
                blocks.append(block_class(channels, planes, stride))
                channels = planes * block_class.expansion
            setattr(self, f"layer{stage + 1}", nn.Sequential(*blocks))
        self.stages = len(blocks_per_stage)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, classes)
        for m in self.modules():  # torchvision's initialisation
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, (BasicBlock, Bottleneck)):
                    last = m.bn2 if isinstance(m, BasicBlock) else m.bn3
                    nn.init.zeros_(last.weight)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for stage in range(self.stages):
            x = getattr(self, f"layer{stage + 1}")(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resolve(args, image):
    """(style, block, blocks_per_stage, width, imagenet_stem) as aiacc's resnet resolves them."""
    style = args.style
    if style == "auto":
        style = "imagenet" if args.depth in IMAGENET_DEPTHS else "cifar"
    if style == "imagenet":
        if args.depth not in IMAGENET_DEPTHS:
            sys.exit(f"depth {args.depth} is not an imagenet-style depth {sorted(IMAGENET_DEPTHS)}")
        block, stages = IMAGENET_DEPTHS[args.depth]
    else:
        block = "bottleneck" if args.block == "bottleneck" else "basic"
        per = 3 * (2 if block == "basic" else 3)
        if args.depth < per + 2 or (args.depth - 2) % per:
            sys.exit(f"depth {args.depth} is not {per}n+2 for cifar-style {block} blocks")
        stages = [(args.depth - 2) // per] * 3
    width = args.width or (64 if style == "imagenet" else 16)
    stem = args.stem if args.stem != "auto" else ("imagenet" if max(image[1:]) > 64 else "small")
    return style, block, stages, width, stem == "imagenet"


def build_model(args, image, classes):
    style, block, stages, width, imagenet_stem = resolve(args, image)
    name = f"resnet{args.depth}"
    use_torchvision = (style == "imagenet" and width == 64 and not args.no_torchvision)
    if use_torchvision:
        try:
            import torchvision
        except ImportError:
            use_torchvision = False
    if use_torchvision:
        model = getattr(torchvision.models, name)(num_classes=classes,
                                                  zero_init_residual=args.zero_init_residual)
        if image[0] != 3 or not imagenet_stem:
            kernel, stride, pad = (7, 2, 3) if imagenet_stem else (3, 1, 1)
            model.conv1 = nn.Conv2d(image[0], 64, kernel, stride, pad, bias=False)
            nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
        if not imagenet_stem:
            model.maxpool = nn.Identity()
    else:
        model = ResNet(block, stages, width, image[0], classes, imagenet_stem,
                       args.zero_init_residual)
    return name, model, "torchvision" if use_torchvision else "own"


def cosine_lr(step, base, warmup, total):
    """Linear warm-up from 0, then cosine decay to 0 at `total` (aiacc's cosine schedule)."""
    if step < warmup:
        return base * step / warmup
    progress = (step - warmup) / max(total - warmup, 1)
    return base * 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))


def make_optimizer(model, args):
    # aiacc decays conv and linear weights only (not batch-norm parameters or biases).
    decay = [p for p in model.parameters() if p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.ndim <= 1]
    return torch.optim.SGD([{"params": decay, "weight_decay": args.weight_decay},
                            {"params": no_decay, "weight_decay": 0.0}],
                           lr=args.lr, momentum=args.momentum, nesterov=args.momentum > 0)


SAFETENSORS_DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "F16": np.float16}


def read_safetensors(path):
    """{name: torch.Tensor} of a safetensors file (little-endian header length, JSON header,
    raw data), read with numpy so the `safetensors` package is not needed."""
    with open(path, "rb") as f:
        data = f.read()
    header_len = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + header_len])
    body = memoryview(data)[8 + header_len:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        array = np.frombuffer(body[begin:end], dtype=SAFETENSORS_DTYPES[info["dtype"]])
        tensors[name] = torch.from_numpy(array.reshape(info["shape"]).copy())
    return tensors


def evaluate(model, images, labels, batch):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(labels), batch):
            logits = model(torch.from_numpy(images[i:i + batch]))
            correct += int((logits.argmax(1).numpy() == labels[i:i + batch]).sum())
    model.train()
    return correct / len(labels)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--depth", type=int, default=20)
    p.add_argument("--style", choices=["auto", "imagenet", "cifar"], default="auto")
    p.add_argument("--block", choices=["auto", "basic", "bottleneck"], default="auto")
    p.add_argument("--width", type=int, default=0, help="0: 64 imagenet-style, 16 cifar-style")
    p.add_argument("--stem", choices=["auto", "small", "imagenet"], default="auto")
    p.add_argument("--zero-init-residual", action="store_true")
    p.add_argument("--no-torchvision", action="store_true",
                   help="use this script's definition for ImageNet-style nets too")
    p.add_argument("--data", choices=["fashion_mnist", "synthetic"], default="fashion_mnist")
    p.add_argument("--data-dir", default=fashion_mnist.DEFAULT_DIRECTORY)
    p.add_argument("--image", default="1,28,28", help="C,H,W of synthetic images")
    p.add_argument("--classes", type=int, default=10, help="classes of synthetic images")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=50, help="timed steps (after --warmup)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    p.add_argument("--epochs", type=int, default=0,
                   help="train this many epochs and print test accuracy per epoch instead")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument("--lr-warmup-steps", type=int, default=250)
    p.add_argument("--crop-padding", type=int, default=2, help="augmentation (fashion_mnist)")
    p.add_argument("--no-flip", action="store_true")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N]: where the model trains")
    p.add_argument("--amp", choices=["none", "bf16"], default="none",
                   help="bf16: autocast forward and loss to bf16 (fp32 master weights)")
    p.add_argument("--channels-last", action="store_true", help="NHWC memory format (Tensor Cores)")
    p.add_argument("--print-state-dict-names", action="store_true",
                   help="print 'name shape' per state-dict entry and exit")
    p.add_argument("--eval-checkpoint", metavar="MODEL_SAFETENSORS",
                   help="load an aiacc-train model.safetensors (strict) and print test accuracy")
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    if args.data == "fashion_mnist":
        train_x, train_y = fashion_mnist.load("train", args.data_dir)
        image, classes = train_x.shape[1:], 10
    else:
        image = tuple(int(v) for v in args.image.split(","))
        classes = args.classes
    name, model, source = build_model(args, image, classes)
    if args.print_state_dict_names:
        for key, tensor in model.state_dict().items():
            print(key, list(tensor.shape))
        return
    if args.eval_checkpoint:
        state = read_safetensors(args.eval_checkpoint)
        model.load_state_dict(state, strict=True)  # raises naming missing/unexpected keys
        test_x, test_y = fashion_mnist.load("test", args.data_dir)
        print(json.dumps({"checkpoint": args.eval_checkpoint, "tensors": len(state),
                          "test_accuracy": evaluate(model, test_x, test_y, 500)}))
        return

    if args.data == "synthetic":  # a fixed pool, so data generation is not timed
        pool = 4
        train_x = rng.standard_normal((pool * args.batch, *image), dtype=np.float32)
        train_y = rng.integers(0, classes, size=pool * args.batch)
    steps_per_epoch = len(train_y) // args.batch
    total_steps = args.epochs * steps_per_epoch if args.epochs else args.warmup + args.steps
    device = torch.device(args.device)
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to(device, memory_format=memory_format)
    optimizer = make_optimizer(model, args)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    model.train()
    on_gpu = device.type == "cuda"

    def sync():  # GPU work is asynchronous: time what has finished
        if on_gpu:
            torch.cuda.synchronize(device)

    def batches():
        while True:
            order = rng.permutation(len(train_y))
            for i in range(steps_per_epoch):
                idx = order[i * args.batch:(i + 1) * args.batch]
                x = train_x[idx]
                if args.data == "fashion_mnist":
                    x = fashion_mnist.augment(x, args.crop_padding, not args.no_flip, rng)
                yield torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(train_y[idx])

    stream = batches()
    timed_start = None
    loss = float("nan")
    for step in range(total_steps):
        if step == args.warmup and not args.epochs:
            sync()
            timed_start = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = cosine_lr(step + 1, args.lr, args.lr_warmup_steps, total_steps)
        x, y = next(stream)
        x = x.to(device, non_blocking=True).contiguous(memory_format=memory_format)
        y = y.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.amp == "bf16"):
            out = loss_fn(model(x), y)
        out.backward()
        optimizer.step()
        loss = out.item()
        if args.epochs and (step + 1) % steps_per_epoch == 0:
            test_x, test_y = fashion_mnist.load("test", args.data_dir)
            acc = evaluate(model, test_x, test_y, 500)
            print(json.dumps({"epoch": (step + 1) // steps_per_epoch, "loss": loss,
                              "test_accuracy": acc}), flush=True)
    if args.epochs:
        return
    sync()
    seconds = time.perf_counter() - timed_start
    print(json.dumps({"framework": "pytorch", "model": name, "definition": source,
                      "batch": args.batch, "threads": args.threads, "device": args.device,
                      "amp": args.amp, "channels_last": args.channels_last,
                      "samples_per_s": round(args.steps * args.batch / seconds, 2),
                      "seconds_per_step": round(seconds / args.steps, 4), "steps": args.steps,
                      "final_loss": round(loss, 4), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
