"""The floor under the per-operator cost: PyTorch's RecordFunction callbacks alone.

torchscan observes operators through one global RecordFunction callback that needs the
operator's inputs (and marks the threads it follows with a disabled thread-local one). This
script builds a C++ extension that registers the same callbacks doing nothing but count events
(`record_function_floor.cpp`, compiled with the C++ compiler against this venv's torch, about
30 s once; kept in target/bench-floor/), then times, side by side in one process and one thread:
the bare workload, the floor (the empty callbacks), `measure_flops(modules=[])` and
`measure_flops`. Workloads: N tiny adds (ns per operator) and the mobilenet_v3_small and
resnet18 forwards (ratios to bare, with the events each forward dispatches). Thread CPU time,
minimum over the rounds (steadiest on a shared machine).

    python benches/record_function_floor.py [--ops 20000] [--rounds 21]

What the floor costs is PyTorch's (boxing each operator's arguments for the callbacks), not
torchscan's: a target below it cannot be met by any RecordFunction observer.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torchvision
from torch.utils.cpp_extension import include_paths

import torchscan

ROOT = Path(__file__).resolve().parent.parent
SOURCE = Path(__file__).with_suffix(".cpp")


def build() -> object:
    """The extension, compiled once per torch and source (g++ or $CXX)."""
    out = ROOT / "target" / "bench-floor"
    out.mkdir(parents=True, exist_ok=True)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    library = out / f"record_function_floor{suffix}"
    stamp = f"{torch.__version__} {SOURCE.stat().st_mtime_ns}"
    stamp_file = out / "stamp"
    if not library.exists() or not stamp_file.exists() or stamp_file.read_text() != stamp:
        torch_lib = Path(torch.__file__).parent / "lib"
        abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
        command = [
            os.environ.get("CXX", "g++"), "-O2", "-shared", "-fPIC", "-std=c++17", "-w",
            f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-DTORCH_EXTENSION_NAME=record_function_floor",
            *(f"-I{path}" for path in include_paths()), f"-I{sysconfig.get_paths()['include']}",
            str(SOURCE), f"-L{torch_lib}", "-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python",
            f"-Wl,-rpath,{torch_lib}", "-o", str(library),
        ]  # fmt: skip
        print("building the floor extension (about 30 s)...", file=sys.stderr)
        subprocess.run(command, check=True)
        stamp_file.write_text(stamp)
    spec = importlib.util.spec_from_file_location("record_function_floor", library)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cpu_time(work: Callable[[], object]) -> float:
    start = time.thread_time()
    work()
    return time.thread_time() - start


def compare(work: Callable[[], object], floor: object, rounds: int) -> dict[str, float]:
    def floor_only() -> None:
        floor.install()
        try:
            work()
        finally:
            floor.uninstall()

    variants = {
        "bare": work,
        "floor (empty callbacks)": floor_only,
        "measure_flops(modules=[])": lambda: torchscan.measure_flops(work, modules=[]),
        "measure_flops": lambda: torchscan.measure_flops(work),
    }
    work()
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, variant in variants.items():
            times[name].append(cpu_time(variant))
    return {name: min(t) for name, t in times.items()}


def events_of(work: Callable[[], object], floor: object) -> tuple[int, int]:
    before = floor.events()
    floor.install()
    try:
        work()
    finally:
        floor.uninstall()
    after = floor.events()
    return after[0] - before[0], after[1] - before[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    torch.set_num_threads(1)
    floor = build()
    a = torch.randn(4, 4)

    def adds() -> None:
        for _ in range(args.ops):
            torch.add(a, a)

    result = compare(adds, floor, args.rounds)
    print(f"{args.ops} x torch.add on 4x4 (thread CPU time, min of {args.rounds}), per operator:")
    for name, t in result.items():
        added = (t - result["bare"]) / args.ops * 1e9
        print(f"  {name:28s} {t / args.ops * 1e9:7.0f} ns  (+{added:.0f} ns)")
    x = torch.randn(1, 3, 224, 224)
    for name in ("mobilenet_v3_small", "resnet18"):
        model = getattr(torchvision.models, name)(weights=None).eval()

        def forward(model: torch.nn.Module = model) -> None:
            with torch.no_grad():
                model(x)

        forward()
        events, outermost = events_of(forward, floor)
        result = compare(forward, floor, args.rounds)
        print(f"{name} forward, one thread ({events} dispatcher events, {outermost} outermost):")
        for variant, t in result.items():
            print(f"  {variant:28s} {t * 1e3:8.2f} ms  {t / result['bare']:.3f}x")


if __name__ == "__main__":
    main()
