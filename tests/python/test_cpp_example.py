"""The C++ example (examples/cpp) builds against libtorchscan.a and the libtorch Python's torch
ships, runs, and reports exactly what Python's measure_flops reports for the same architecture,
input shapes and training step."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import torchscan
from torchscan.process import measure_peak_memory

ROOT = Path(__file__).resolve().parents[2]
BINARY = ROOT / "target" / "cpp-example" / "main"


@pytest.fixture(scope="module")
def cpp_report() -> dict:
    # `make` rebuilds only what changed; the static library comes from the package build.
    build = subprocess.run(
        ["make", "-C", str(ROOT / "examples" / "cpp"), f"PYTHON={sys.executable}"],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    run = subprocess.run([str(BINARY)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def python_model() -> tuple[nn.Module, torch.Tensor]:
    """examples/cpp/main.cpp's model and input, layer for layer."""
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, groups=2),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 10),
    ).train()
    return model, torch.randn(2, 3, 16, 16)


def test_cpp_report_equals_python_measure_flops(cpp_report):
    model, x = python_model()
    python = torchscan.measure_flops(lambda: model(x).mean().backward())
    cpp = cpp_report["flops"]
    assert cpp["diagnostics"] == []
    assert cpp["total"] == python["total"]
    assert cpp["total"]["status"] == "complete"
    for field in ("by_operator", "operator_calls", "by_category", "by_phase", "by_module", "by_module_status"):
        assert cpp[field] == python[field], field
    # Hand-computed anchors: conv 0 forward 2*(2*8*16*16)*27 = 221184 and its bias added to the
    # 2*8*16*16 = 4096 outputs; the grouped conv forward 2*(2*16*7*7)*36 = 112896 and 2*16*7*7 =
    # 1568 bias adds; the linear layer 2*2*16*10 = 640 and 2*10 = 20 (the bias convention).
    assert cpp["by_operator"]["aten.convolution"] == 221_184 + 4_096 + 112_896 + 1_568
    assert cpp["by_operator"]["aten.addmm"] == 640 + 20


def test_cpp_peak_memory_matches_the_python_peak(cpp_report):
    model, x = python_model()
    # As the example: one step (the counted one), gradients reset to None, then the measured step.
    model(x).mean().backward()
    model.zero_grad(set_to_none=True)
    python = measure_peak_memory(lambda: model(x).mean().backward(), device="cpu")
    memory = cpp_report["memory"]
    assert memory["device"] == "cpu" and memory["metric"] == "pytorch_tensor_bytes"
    # The same activations and gradients; the two front ends differ by a few small temporaries
    # (80 bytes on torch 2.13), so the peaks agree to well within 1%, not to the byte.
    assert abs(memory["peak_bytes"] - python["peak_bytes"]) <= python["peak_bytes"] // 100
    assert memory["peak_bytes"] > 2 * 8 * 16 * 16 * 4  # at least conv 0's activations
