"""The one module tree every table is drawn from (src/module_tree.rs), on real models.

Every row's parameters are compared with what `named_modules()` gives, computed here by hand:
each parameter tensor belongs to the first module call that holds it (the report's rule, so
that a tied weight, GPT-2's `lm_head.weight` which is `wte.weight`, is counted once), and a
row holds the tensors of every module at or under its path. A module above calls that is never
called itself (GPT-2's `h`, Llama's `layers`) must have its row, with its blocks under it.
"""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

import zoo
from torchscan import crawl_module, summary
from torchscan.utils import _module_tree, call_order, format_flops, format_info

MODELS = ["resnet18", "timm_vit_tiny", "bert_sdpa", "gpt2_eager", "llama_sdpa"]


def analysed(name: str) -> tuple[nn.Module, dict]:
    spec = zoo.BY_NAME[name]
    if not zoo.available(spec.package):
        pytest.skip(f"{spec.package} is not installed")
    module, (args, kwargs) = zoo.prepare(spec, torch.float32)
    return module, crawl_module(module, args=args, kwargs=kwargs)


def expected_rows(module: nn.Module, report: dict) -> dict[str, int]:
    """{path: parameters held} of every module that holds parameters or has called children."""
    modules = dict(module.named_modules(remove_duplicate=False))
    owner: dict[int, str] = {}
    numel: dict[int, int] = {}
    for layer in report["layers"]:
        for tensor in modules[layer["path"]]._parameters.values():
            if tensor is not None and id(tensor) not in owner:
                owner[id(tensor)], numel[id(tensor)] = layer["path"], tensor.numel()
    called = {layer["path"] for layer in report["layers"]}

    def under(path: str, other: str) -> bool:
        return path == "" or other == path or other.startswith(f"{path}.")

    rows = {}
    for path, sub in modules.items():
        holds = any(p is not None for p in sub._parameters.values())
        if path in called or holds or any(under(path, c) for c in called if c != path):
            rows[path] = sum(n for key, n in numel.items() if under(path, owner[key]))
    return rows


@pytest.mark.parametrize("name", MODELS)
def test_every_row_holds_what_named_modules_says(name):
    module, report = analysed(name)
    tree = _module_tree(report)
    # A module's first call holds its parameters; a later call (resnet's `relu`, called twice
    # per block) finds them counted.
    by_path: dict[str, dict] = {}
    for row in tree:
        if row["path"] in by_path:
            assert row["parameters"] == 0, row
        by_path.setdefault(row["path"], row)
    assert {path: row["parameters"] for path, row in by_path.items()} == expected_rows(module, report)
    # The root holds every parameter, each once: Total params.
    assert tree[0]["path"] == "" and tree[0]["parameters"] == report["totals"]["parameters"]["value"]
    assert tree[0]["parameters"] == sum(p.numel() for p in module.parameters())
    assert tree[0]["name"] == type(module).__name__
    for index, row in enumerate(tree):
        # Each row sits under the module above it in the path, at the depth of its path.
        if row["path"]:
            parent = tree[row["parent"]]["path"]
            assert row["path"].startswith(f"{parent}.") if parent else "." not in row["path"], row
            assert row["depth"] == row["path"].count(".") + 1
            assert row["parent"] < index
        # A row is either a call or a container that is never called.
        called = row["layer"] is not None
        assert called == any(layer["path"] == row["path"] for layer in report["layers"])

    # Siblings in call order: a row's call (a container's: its first call below) comes before
    # its next sibling's.
    def first_call(index):
        row = tree[index]
        if row["layer"] is not None:
            return row["layer"]
        return min(first_call(i) for i, child in enumerate(tree) if child["parent"] == index)

    for index in range(len(tree)):
        siblings = [first_call(i) for i, row in enumerate(tree) if row["parent"] == index]
        assert siblings == sorted(siblings)


def table_rows(table: str) -> dict[str, list[str]]:
    """{name cell: [name, type, shape, Param #, ...]} of a layer table (the name column runs up
    to the Type header; the tree lines hold runs of spaces)."""
    lines = table.splitlines()
    start = lines[1].index("Type")
    body = lines[3 : lines.index(lines[2], 3)]
    rows = [[line[:start].rstrip(), *re.split(r"\s{2,}", line[start:].strip())] for line in body]
    return {row[0]: row for row in rows}


def test_gpt2_blocks_sit_under_h_not_under_drop(capsys):
    module, report = analysed("gpt2_eager")
    # GPT2Config(n_embd=32, n_layer=2, vocab 96, 64 positions). A block: ln_1 2*32, c_attn 32*96 + 96,
    # c_proj 32*32 + 32, ln_2 2*32, c_fc 32*128 + 128, c_proj 128*32 + 32 = 12,704; two: 25,408.
    rows = table_rows(format_info(report, None))
    assert rows["|    └─drop"][1] == "Dropout" and rows["|    └─drop"][3] == "0"
    assert rows["|    └─h"][1:4] == ["-", "-", "25,408"]
    assert rows["|    |    └─0"][1] == "GPT2Block" and rows["|    |    └─0"][3] == "12,704"
    # wte 96*32 + wpe 64*32 + blocks + ln_f 64 = 30,592; lm_head's weight is wte's (counted there).
    assert rows["├─transformer"][3] == "30,592" and rows["├─lm_head"][3] == "0"
    assert rows["GPT2LMHeadModel"][3] == "30,592"
    # summary prints the same table (columns, inclusive counts, the root's name), with 0.2's
    # footer; at max_depth=2 the blocks show what they hold, not 0.
    spec = zoo.BY_NAME["gpt2_eager"]
    args, kwargs = spec.batch(torch.float32)
    summary(module, args=args, kwargs=kwargs, max_depth=2)
    printed = capsys.readouterr().out
    assert printed.splitlines()[1].split() == ["Layer", "Type", "Output", "Shape", "Param", "#", "Buffers", "Trainable",
                                               "FLOPs"]  # fmt: skip
    summary_rows = table_rows(printed)
    assert summary_rows["|    └─h"][3] == "25,408"
    assert "|    |    └─0" not in summary_rows
    footer = printed.splitlines()
    at = footer.index("Trainable params: 30,592")
    assert footer[at + 1 : at + 3] == ["Non-trainable params: 0", "Total params: 30,592"]


def test_llama_rotary_embedding_holds_no_parameters():
    _, report = analysed("llama_sdpa")
    rows = table_rows(format_info(report, None))
    # Its 8 buffer elements (inv_freq: head_dim 8 / 2 = 4, and the original copy), no parameters.
    assert rows["|    └─rotary_emb"][1:5] == ["LlamaRotaryEmbedding", "((1, 8, 8), (1, 8, 8))", "0", "8"]
    # LlamaConfig(hidden 32, intermediate 64, 4 heads of 8, 2 key-value heads): a decoder layer
    # holds q 32*32, k and v 32*16 each, o 32*32, gate and up 32*64 each, down 64*32, two
    # RMSNorms of 32: 9,280; two: 18,560.
    assert rows["|    └─layers"][1:4] == ["-", "-", "18,560"]
    assert rows["|    |    └─0"][1:2] == ["LlamaDecoderLayer"] and rows["|    |    └─0"][3] == "9,280"
    # The operator FLOPs by module: the layers under their ModuleList, siblings in call order.
    flops = format_flops(report["operator_flops"], call_order=call_order(report), max_depth=3)
    names = [line.split()[0] for line in flops.splitlines()[3:] if line.startswith("  ")]
    assert names == ["model", "embed_tokens", "rotary_emb", "layers", "0", "1", "norm", "lm_head"]


def test_flops_by_module_follows_call_order_and_gives_containers_a_row():
    model = nn.Sequential()
    model.add_module("z", nn.Linear(4, 4))
    model.add_module("a", nn.Linear(4, 2))
    report = crawl_module(model, (4,))
    # Linear(4, 4) on one row: 2 * 4 * 4 = 32 FLOPs and 4 bias adds; Linear(4, 2): 16 and 2.
    ordered = format_flops(report["operator_flops"], call_order=call_order(report)).splitlines()
    assert [line.split()[:2] for line in ordered[3:6]] == [["Sequential", "54"], ["z", "36"], ["a", "18"]]
    alphabetical = format_flops(report["operator_flops"]).splitlines()
    assert [line.split()[0] for line in alphabetical[3:6]] == ["Sequential", "a", "z"]
    with pytest.raises(TypeError, match="call_order must be a sequence of module labels"):
        format_flops(report["operator_flops"], call_order="Sequential")
