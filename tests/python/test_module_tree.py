"""The one module tree every table is drawn from (src/module_tree.rs), on real models.

Every row's parameters are compared with what `named_modules()` gives, computed here by hand:
each parameter tensor belongs to the first module call that holds it (the report's rule, so
that a tied weight, GPT-2's `lm_head.weight` which is `wte.weight`, is counted once), else to
the first module never called that holds it, and a row holds the tensors of every module at or
under its path. A module above calls that is never called itself (GPT-2's `h`, Llama's
`layers`) must have its row, with its blocks under it; so must a module never called that holds
parameters (an unused `nn.Linear` kept as an attribute).
"""

from __future__ import annotations

import csv
import inspect
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import torchscan
import zoo
from helpers import schema_validator
from torchscan import crawl_module, summary
from torchscan.utils import _module_tree, call_order, format_flops, format_html, format_info

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
    # Then the modules never called that hold parameters, in named_modules() order, take the
    # tensors no call holds (the report's `uncalled_modules`).
    for path, sub in modules.items():
        for tensor in sub._parameters.values():
            if tensor is not None and id(tensor) not in owner:
                owner[id(tensor)], numel[id(tensor)] = path, tensor.numel()
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


class WithUnused(nn.Module):
    """A called Linear(3, 4) and an unused Linear(3, 5) kept as an attribute (never called)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.unused = nn.Linear(3, 5)

    def forward(self, x):
        return self.fc(x)


# The same class as a file the command imports (`unused_model:WithUnused`).
UNUSED_MODULE = "from torch import nn\n\n\n" + inspect.getsource(WithUnused)


def test_an_unused_linear_has_a_row_in_every_table(capsys, tmp_path):
    # fc: 3*4 + 4 = 16 parameters, called; unused: 3*5 + 5 = 20, never called; the root
    # holds 16 + 20 = 36, the model's parameters, each once.
    model = WithUnused()
    assert sum(p.numel() for p in model.parameters()) == 36
    report = crawl_module(model, (3,))
    assert [(m["path"], m["type"], m["parameters"]["trainable"]) for m in report["uncalled_modules"]] == [
        ("unused", "Linear", 20)
    ]
    assert report["operator_flops"]["uncalled_modules"] == ["WithUnused.unused"]
    tree = _module_tree(report)
    assert [(row["path"], row["parameters"], row["uncalled"]) for row in tree] == [
        ("", 36, False),
        ("fc", 16, False),
        ("unused", 20, True),
    ]
    assert tree[0]["parameters"] == report["totals"]["parameters"]["value"] == 36
    # Its FLOPs: none ran (0); the root's 28 are fc's, 2*3*4 = 24 and 4 bias adds.
    assert tree[2]["operator_flops"]["value"] == 0 and tree[0]["operator_flops"]["value"] == 28

    # summary(): the row, with its type, no output, its 20 parameters; the root's 36.
    summary(model, (3,))
    printed = capsys.readouterr().out
    rows = table_rows(printed)
    assert rows["├─unused"][1:7] == ["Linear", "-", "20", "0", "True", "0"]
    assert rows["WithUnused"][3] == "36" and rows["├─fc"][3] == "16"
    assert "Total params: 36" in printed.splitlines()
    assert "A row with a type and output '-' is a module never called" in printed

    # The command's table (python -m torchscan with this worktree's package).
    (tmp_path / "unused_model.py").write_text(UNUSED_MODULE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(Path(torchscan.__file__).parents[1])]))
    result = subprocess.run(
        [sys.executable, "-m", "torchscan", "unused_model:WithUnused", "--input-shape", "3"],
        capture_output=True, text=True, cwd=tmp_path, env={**env, "COLUMNS": "120"}, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    command_rows = table_rows(result.stdout)
    assert command_rows["├─unused"][1:4] == ["Linear", "-", "20"]
    assert command_rows["WithUnused"][3] == "36"
    # Its --json report carries the module, valid against the generated schema.
    written = subprocess.run(
        [sys.executable, "-m", "torchscan", "unused_model:WithUnused", "--input-shape", "3", "--json", "out.json"],
        capture_output=True, text=True, cwd=tmp_path, env=env, check=False,
    )  # fmt: skip
    assert written.returncode == 0, written.stderr
    document = json.loads((tmp_path / "out.json").read_text())
    assert [(m["path"], m["parameters"]["trainable"]) for m in document["uncalled_modules"]] == [("unused", 20)]
    assert [(e.message, list(e.absolute_path)) for e in schema_validator("analysis_report").iter_errors(document)] == []

    # format_flops: a row of 0 FLOPs (0.0% of 28) after its called sibling, no status.
    flops = format_flops(report["operator_flops"], call_order=call_order(report)).splitlines()
    assert [line.split() for line in flops[3:6]] == [
        ["WithUnused", "28", "100.0%", "complete"],
        ["fc", "28", "100.0%", "complete"],
        ["unused", "0", "0.0%"],
    ]

    # The HTML page's layer table: the row, its type, 20 parameters.
    page = format_html(report)
    row = re.search(r'<tr data-row="unused"[^>]*>(.*?)</tr>', page)
    assert row is not None, "no row for the unused module"
    assert 'data-type="Linear, never called"' in row.group(0)
    assert "<td>Linear</td>" in row.group(1) and '<td class="num">20</td>' in row.group(1)


def test_the_csv_has_a_row_for_an_unused_module(tmp_path):
    # `torchscan MODEL --csv -` (python -m torchscan with this worktree's package): the layer
    # calls, then the module never called: no call index, depth 1, Linear, no output shape,
    # 3*5 + 5 = 20 parameters (all trainable), 0 buffers, operator FLOPs 0 and complete (the
    # table's 0), no other metric. The calls: the root and fc, 2*3*4 = 24 + 4 bias adds = 28.
    (tmp_path / "unused_model.py").write_text(UNUSED_MODULE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(Path(torchscan.__file__).parents[1])]))

    def csv_rows(*extra: str) -> list[dict[str, str]]:
        result = subprocess.run(
            [sys.executable, "-m", "torchscan", "unused_model:WithUnused", "--input-shape", "3", "--csv", "-", *extra],
            capture_output=True, text=True, cwd=tmp_path, env=env, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return list(csv.DictReader(io.StringIO(result.stdout)))

    rows = csv_rows()
    assert [(row["path"], row["call_index"], row["parameters"]) for row in rows] == [
        ("", "0", "0"),
        ("fc", "0", "16"),
        ("unused", "", "20"),
    ]
    unused = rows[2]
    assert (unused["depth"], unused["type"], unused["output_shape"]) == ("1", "Linear", "")
    assert (unused["trainable_parameters"], unused["buffers"]) == ("20", "0")
    assert (unused["operator_flops"], unused["operator_flops_status"]) == ("0", "complete")
    assert [unused[name] for name in ("module_flops", "macs", "dmas", "receptive_field", "memory_bytes")] == [""] * 5
    assert rows[0]["operator_flops"] == "28"
    # The rows' parameters add up to the model's, 16 + 20 = 36.
    assert sum(int(row["parameters"]) for row in rows) == 36

    # Structure mode counts no operator: the row's FLOPs and status are empty.
    structure = csv_rows("--mode", "structure")
    assert [(row["path"], row["parameters"], row["operator_flops"], row["operator_flops_status"]) for row in structure][
        2
    ] == ("unused", "20", "", "")


def test_an_uncalled_module_sharing_a_weight_counts_it_once():
    # tied: a Linear(3, 4) never called whose weight is fc's: only its bias (4) is its own;
    # fc 16 + tied 4 = 20 = the model's parameters, each once.
    model = WithUnused()
    del model.unused
    model.tied = nn.Linear(3, 4)
    model.tied.weight = model.fc.weight
    assert sum(p.numel() for p in model.parameters()) == 20
    report = crawl_module(model, (3,))
    (uncalled,) = report["uncalled_modules"]
    assert uncalled["parameters"] == {"trainable": 4, "frozen": 0, "bytes": 16, "shared": True}
    tree = _module_tree(report)
    assert [(row["path"], row["parameters"]) for row in tree] == [("", 20), ("fc", 16), ("tied", 4)]
    # A report without the field (written before) still reads: no uncalled rows.
    del report["uncalled_modules"]
    assert [row["path"] for row in _module_tree(report)] == ["", "fc"]


def test_gpt2_every_module_holding_parameters_has_its_row():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    # Untied embeddings: no tensor is shared, so every row holds what module.parameters() says.
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, tie_word_embeddings=False)
    model = transformers.GPT2LMHeadModel(config).eval()
    # A never-called Linear(64, 8) deep in the tree: 64*8 + 8 = 520 parameters.
    model.transformer.h[1].spare = nn.Linear(64, 8)
    report = crawl_module(model, args=(torch.randint(0, 100, (1, 8)),), mode="structure")
    tree = _module_tree(report)
    by_path: dict[str, dict] = {}
    for row in tree:
        by_path.setdefault(row["path"], row)
    holding = {path for path, sub in model.named_modules() if any(True for _ in sub.parameters(recurse=False))}
    assert holding - set(by_path) == set()
    assert "transformer.h.1.spare" in holding
    for path, sub in model.named_modules():
        if path in by_path:
            assert by_path[path]["parameters"] == sum(p.numel() for p in sub.parameters()), path
    assert (
        tree[0]["parameters"] == sum(p.numel() for p in model.parameters()) == report["totals"]["parameters"]["value"]
    )
    spare = by_path["transformer.h.1.spare"]
    assert (spare["type"], spare["uncalled"], spare["parameters"]) == ("Linear", True, 520)
    assert tree[spare["parent"]]["path"] == "transformer.h.1"


def test_an_uncalled_attention_module_holds_its_projections_and_a_lazy_one_has_no_row():
    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)
            self.attn = nn.MultiheadAttention(8, 2)  # never called
            self.lazy = nn.LazyLinear(3)  # never called: its size is unknown

        def forward(self, x):
            return self.fc(x)

    report = crawl_module(Holder(), (5, 8))
    # MultiheadAttention(8, 2): in_proj 3*8*8 + 3*8 = 216, out_proj 8*8 + 8 = 72: 288, one row
    # (out_proj, inside it, has none of its own: the attention module's call would count it).
    assert [(m["path"], m["parameters"]["trainable"]) for m in report["uncalled_modules"]] == [("attn", 288)]
    tree = _module_tree(report)
    # fc 8*8 + 8 = 72; the root 72 + 288 = 360 (the lazy module's parameters are not counted).
    assert [(row["path"], row["type"], row["parameters"]) for row in tree] == [
        ("", "Holder", 360),
        ("fc", "Linear", 72),
        ("attn", "MultiheadAttention", 288),
    ]
    assert report["totals"]["parameters"]["status"] == "unavailable"  # the lazy one's size
