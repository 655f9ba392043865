#!/usr/bin/env python3
"""Checks an aiacc-train ResNet against torchvision on the same weights.

Usage: torchvision_parity_check.py FILE ARCH NUM_CLASSES
FILE is a safetensors file holding the model's parameters and buffers under their PyTorch names,
plus "parity.input" [N, 3, H, W] and "parity.logits" [N, classes] (aiacc-train's eval-mode
output). The script builds torchvision.models.<ARCH>(num_classes=NUM_CLASSES), loads the model
tensors with load_state_dict(strict=True) (so every name and shape must match torchvision's), runs
the input in eval mode and compares the logits. Exit 0 on agreement, 1 otherwise, 77 (Meson's
SKIP) when torch or torchvision is missing.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import torch
    import torchvision
except ImportError:
    print("SKIP: torch or torchvision is not installed", file=sys.stderr)
    sys.exit(77)
import safetensors_torch_check as st  # the spec-level safetensors reader (no pip package here)


def main():
    path, arch, classes = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(path, "rb") as f:
        tensors, _ = st.parse(f.read())
    inputs = tensors.pop("parity.input")
    expected = tensors.pop("parity.logits")
    model = getattr(torchvision.models, arch)(num_classes=classes)
    model.load_state_dict(tensors, strict=True)  # every torchvision name, no extra, same shapes
    model.eval()
    with torch.no_grad():
        logits = model(inputs)
    err = (logits - expected).abs().max().item()
    scale = expected.abs().max().item()
    print(f"{arch}: {len(tensors)} tensors loaded strictly; max |logit difference| {err:.3g} "
          f"(logits up to {scale:.3g})")
    return 0 if err <= 1e-4 * max(1.0, scale) else 1


if __name__ == "__main__":
    sys.exit(main())
