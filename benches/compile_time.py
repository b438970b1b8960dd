"""What pricing compiled graphs adds to torch.compile's compile time (inductor and aot_eager).

Importing torchscan wraps inductor's `compile_fx` and AOTAutograd's backend entry: each graph is
traced once more by AOTAutograd (without decompositions) and replayed on the meta device. This
script times the first call of a freshly compiled model (compilation included) in two fresh
interpreters, one that imports torchscan and one that does not, alternating, with a fresh
inductor cache each time (a warm cache would hide the compilation).

    python benches/compile_time.py [--rounds 3] [--model resnet18] [--backend inductor]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time
import torch, torchvision
if sys.argv[1] == "with":
    import torchscan  # noqa: F401  (installs the pricing wrappers)
model = getattr(torchvision.models, sys.argv[2])().eval()
x = torch.randn(1, 3, 224, 224)
compiled = torch.compile(model, backend=sys.argv[3])
start = time.perf_counter()
with torch.no_grad():
    compiled(x)
first = time.perf_counter() - start
start = time.perf_counter()
with torch.no_grad():
    compiled(x)
print(json.dumps({"first_call_s": first, "second_call_s": time.perf_counter() - start}))
"""


def run(variant: str, model: str, backend: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as cache:
        out = subprocess.run(
            [sys.executable, "-c", CHILD, variant, model, backend],
            check=True,
            capture_output=True,
            text=True,
            env=dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache),
        )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--backend", default="inductor")
    args = parser.parse_args()
    times: dict[str, list[float]] = {"without": [], "with": []}
    for _ in range(args.rounds):
        for variant in ("without", "with"):
            times[variant].append(run(variant, args.model, args.backend)["first_call_s"])
    without, with_ = statistics.median(times["without"]), statistics.median(times["with"])
    print(f"{args.model}, backend={args.backend}, first call (compilation included), median of {args.rounds}:")
    print(f"  without torchscan: {without:.2f} s   with torchscan (pricing): {with_:.2f} s")
    print(f"  ratio: {with_ / without:.2f}x")


if __name__ == "__main__":
    main()
