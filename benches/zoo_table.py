"""The model-zoo coverage table: per model and workload, torchscan's total and status,
PyTorch's FlopCounterMode total, and the operators each leaves uncounted.

    python benches/zoo_table.py [--dtype float32|bfloat16] [--models resnet18,vit] [--json out.json]

FlopCounterMode has formulas for matrix products, convolutions and attention only; the last
column lists the operators it ran without a formula that do arithmetic (those torchscan
counted in the same workload).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))

import torchscan
import zoo


def fcm_run(work) -> tuple[int, set[str]]:
    """FlopCounterMode's total, and every operator packet the workload dispatched."""
    seen: set[str] = set()

    class Seen(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.add(str(func.overloadpacket).replace("aten::", "aten."))
            return func(*args, **(kwargs or {}))

    with FlopCounterMode(display=False) as counter, Seen():
        work()
    counted = {str(op) for op in counter.flop_registry}
    return counter.get_total_flops(), {op for op in seen if op not in counted}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", default="float32", choices=sorted(zoo.DTYPES))
    parser.add_argument("--models", help="comma-separated names (default: every available model)")
    parser.add_argument("--json", help="also write the rows to this file")
    options = parser.parse_args()
    dtype = zoo.DTYPES[options.dtype]
    names = options.models.split(",") if options.models else [m.name for m in zoo.MODELS]
    rows = []
    print("| model | workload | torchscan | status | FlopCounterMode | FCM: ran without a formula |")
    print("|---|---|---:|---|---:|---|")
    for name in names:
        model = zoo.BY_NAME[name]
        if not zoo.available(model.package):
            continue
        for kind in zoo.WORKLOADS:
            report = torchscan.measure_flops(zoo.workload(model, kind, dtype))
            fcm_total, fcm_missing = fcm_run(zoo.workload(model, kind, dtype))
            arithmetic = sorted(op for op in fcm_missing if report["by_operator"].get(op))
            total = report["total"]["known_value"]
            row = {
                "model": name,
                "workload": kind,
                "torchscan": total,
                "status": report["total"]["status"],
                "flop_counter_mode": fcm_total,
                "fcm_uncounted": arithmetic,
                "diagnostics": [d["operator"] for d in report["diagnostics"] if d.get("operator")],
            }
            rows.append(row)
            missing = ", ".join(arithmetic[:6]) + (f" (+{len(arithmetic) - 6})" if len(arithmetic) > 6 else "")
            print(f"| {name} | {kind} | {total:,} | {row['status']} | {fcm_total:,} | {missing} |", flush=True)
            if row["diagnostics"]:
                print(f"<!-- {name} {kind} uncounted: {', '.join(row['diagnostics'])} -->", flush=True)
    if options.json:
        Path(options.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
