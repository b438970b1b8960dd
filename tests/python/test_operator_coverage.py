"""The operator surface, classified (issue 15): every ATen (and torchvision) operator with a kernel
for a dense backend in the running torch, and what the formula registry does with it. The table
is generated into docs/coverage.md; this test fails when the running torch and the registry no
longer give that page (regenerate it with TORCHSCAN_BLESS=1), or when the registry names an
operator the running torch does not have (a typo counts nothing).
"""

from __future__ import annotations

import collections
import os
from pathlib import Path

import torch
import torchvision  # noqa: F401  (registers the torchvision:: operators)

import torchscan  # noqa: F401  (registers torch.ops.torchscan)

PAGE = Path(__file__).resolve().parents[2] / "docs" / "coverage.md"
NAMESPACES = ("aten::", "torchvision::")
DENSE_KEYS = ("CPU", "CUDA")
CLASSES = {
    "counted": "counted by a formula (by category)",
    "ignored": "no arithmetic, listed with its reason (by reason)",
    "uncounted": "arithmetic deliberately not counted, with its reason",
    "unclassified": "not in the registry: a call is an uncounted operator (partial total, named)",
}


def packets() -> dict[str, list[str]]:
    """Operator packet (`aten::add`) -> its overloads (`aten::add.Tensor`, ...)."""
    found: dict[str, list[str]] = collections.defaultdict(list)
    for name in torch._C._dispatch_get_all_op_names():
        found[name.split(".")[0]].append(name)
    return found


def dense_operators(found: dict[str, list[str]]) -> list[str]:
    def has_dense_kernel(overloads: list[str]) -> bool:
        return any(torch._C._dispatch_has_kernel_for_dispatch_key(o, k) for o in overloads for k in DENSE_KEYS)

    return sorted(p for p, overloads in found.items() if p.startswith(NAMESPACES) and has_dense_kernel(overloads))


def page() -> str:
    operators = dense_operators(packets())
    by_class: dict[str, dict[str, list[str]]] = {kind: collections.defaultdict(list) for kind in CLASSES}
    for operator in operators:
        kind, detail = torch.ops.torchscan.classify_operator(operator)
        by_class[kind][detail].append(operator.replace("::", ".", 1))
    total = len(operators)
    classified = total - sum(len(names) for names in by_class["unclassified"].values())
    lines = [
        "# Operator coverage",
        "",
        f"Generated for torch {torch.__version__.split('+')[0]} by `tests/python/test_operator_coverage.py` "
        "(`TORCHSCAN_BLESS=1` rewrites it); the test fails when the running torch and the formula registry no "
        "longer give this page.",
        "",
        "The operators are every ATen and torchvision operator with a kernel for a dense backend (CPU or CUDA) in "
        "the running torch; composite operators (no kernel of their own) are left out, since their nested operators "
        "are what is counted. An in-place variant takes its functional form's class. See `docs/formulas.md` for "
        "each formula and its convention.",
        "",
        f"**Coverage: {classified} of {total} operators classified ({100 * classified / total:.1f}%).**",
        "",
        "| class | operators | meaning |",
        "|---|---|---|",
    ]
    for kind, meaning in CLASSES.items():
        lines.append(f"| {kind} | {sum(len(v) for v in by_class[kind].values())} | {meaning} |")
    for kind in CLASSES:
        groups = by_class[kind]
        if not groups:
            continue
        lines += ["", f"## {kind}", ""]
        for detail in sorted(groups):
            names = ", ".join(f"`{name}`" for name in groups[detail])
            lines.append(f"- {detail or 'no formula'} ({len(groups[detail])}): {names}")
    return "\n".join(lines) + "\n"


def test_every_registry_operator_exists_in_the_running_torch():
    found = packets()
    missing = [name for name in torch.ops.torchscan.registry_operators() if name not in found]
    assert missing == [], f"the registry names operators this torch does not have: {missing}"


def test_docs_coverage_md_is_generated_from_the_running_torch():
    expected = page()
    if os.environ.get("TORCHSCAN_BLESS"):
        PAGE.write_text(expected)
    assert PAGE.exists(), f"{PAGE} is missing: run with TORCHSCAN_BLESS=1"
    assert PAGE.read_text() == expected, "docs/coverage.md is stale: run this test with TORCHSCAN_BLESS=1"
