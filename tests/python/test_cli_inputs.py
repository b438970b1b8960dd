"""The `torchscan` command on real models: generated inputs by name, dtype and shape, the batch
size, constructor keywords, Hugging Face models from their config classes, CSV output, and a
help that answers without importing torch."""

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import torchscan
from torchscan import cli
from torchscan.cli.inputs import default_integer_high, generate
from torchscan.cli.options import InputSpec, parse_input

transformers = pytest.importorskip("transformers")

SCRIPT = Path(sys.executable).parent / "torchscan"
HERE = Path(__file__).resolve().parent

# A BERT small enough for a test: 2 layers, hidden size 32, 2 heads, vocabulary 100.
BERT_KW = [
    "--kw",
    "num_hidden_layers=2",
    "--kw",
    "hidden_size=32",
    "--kw",
    "num_attention_heads=2",
    "--kw",
    "intermediate_size=64",
    "--kw",
    "vocab_size=100",
]


def bert_config() -> "transformers.BertConfig":
    return transformers.BertConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64, vocab_size=100
    )


def run(*args, cwd, env_extra=None):
    # The tests' helpers importable, before a PYTHONPATH that puts a source checkout first.
    path = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "COLUMNS": "100", **(env_extra or {})}
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, cwd=cwd, env=env, check=False)


def json_main(capsys, *args):
    assert cli.main([*args, "--json", "-"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


# ---- the input specs ----


@pytest.mark.parametrize(
    "text, spec",
    [
        ("input_ids:int64:128", InputSpec("input_ids", "int64", (128,))),
        ("float32:3,224,224", InputSpec(None, "float32", (3, 224, 224))),
        ("attention_mask:int64:128:1..2", InputSpec("attention_mask", "int64", (128,), 1, 2)),
        ("torch.bfloat16:4", InputSpec(None, "bfloat16", (4,))),
        ("t:float32:", InputSpec("t", "float32", ())),
        ("int64:5:-3..3", InputSpec(None, "int64", (5,), -3, 3)),
    ],
)
def test_input_specs_parse(text, spec):
    assert parse_input(text) == spec


def test_generated_inputs_are_seeded_batched_and_in_range():
    model = nn.Sequential(nn.Embedding(50, 4), nn.Embedding(30, 4))
    # The default integer range keeps ids valid for every embedding: [0, 30).
    assert default_integer_high(model) == 30
    assert default_integer_high(nn.Linear(2, 2)) == 2
    specs = [
        InputSpec(None, "int64", (1000,)),
        InputSpec("mask", "int64", (7,), 1, 2),
        InputSpec("flag", "bool", (500,)),
        InputSpec("x", "float16", (2, 3)),
    ]
    first, second = generate(specs, 3, model, None), generate(specs, 3, model, None)
    ids = first.args[0]
    assert ids.shape == (3, 1000) and ids.dtype == torch.int64
    assert int(ids.min()) == 0 and int(ids.max()) == 29
    assert torch.equal(first.kwargs["mask"], torch.ones(3, 7, dtype=torch.int64))
    assert first.kwargs["flag"].dtype == torch.bool and 0 < int(first.kwargs["flag"].sum()) < 1500
    assert first.kwargs["x"].shape == (3, 2, 3) and first.kwargs["x"].dtype == torch.float16
    # Seeded: the same inputs every run.
    assert all(torch.equal(a, b) for a, b in zip(first.args, second.args, strict=True))
    assert all(torch.equal(first.kwargs[k], second.kwargs[k]) for k in first.kwargs)
    assert first.describe() == "(3, 1000) int64, mask=(3, 7) int64, flag=(3, 500) bool, x=(3, 2, 3) float16"


# ---- keyword inputs, batch size, constructor keywords ----


def test_inputs_by_name_and_batch_size(capsys):
    report = json_main(
        capsys, "cli_models:TwoInputs", "--input", "float32:3,8,8", "--input", "side:float32:5", "--batch-size", "4"
    )
    assert [a["shape"] for a in report["inputs"]["args"]] == [[4, 3, 8, 8]]
    assert report["inputs"]["kwargs"]["side"]["shape"] == [4, 5]
    # Conv2d(3, 4, 3) on 8x8: 6x6x4 outputs of 27 MACs each, per sample; Linear(5, 4): 20 MACs
    # (2 FLOPs per MAC), and one bias add per output element (the bias convention).
    conv, linear = 2 * 27 * 6 * 6 * 4 + 6 * 6 * 4, 2 * 5 * 4 + 4
    by_module = report["operator_flops"]["by_module"]
    assert by_module["TwoInputs.image"] == 4 * conv == 31_680
    assert by_module["TwoInputs.side"] == 4 * linear == 176


def test_constructor_keywords(capsys):
    report = json_main(capsys, "torch.nn:Linear", "--kw", "in_features=6", "--kw", "out_features=3", "--kw",
                       "bias=False", "--input", "float32:6")  # fmt: skip
    assert report["totals"]["parameters"]["value"] == 18
    # A bare word is a string: nn.GELU(approximate=tanh).
    report = json_main(capsys, "torch.nn:GELU", "--kw", "approximate=tanh", "--input", "float32:4")
    assert report["layers"][0]["type"] == "GELU"
    assert cli.main(["torch.nn:GELU", "--kw", "slope=2", "--input", "float32:4"]) == 2
    assert "cannot build MODEL 'torch.nn:GELU' by calling it with slope=2: TypeError" in capsys.readouterr().err


# ---- Hugging Face models, nothing downloaded ----


def test_a_transformers_config_class_with_keywords(tmp_path):
    result = run("transformers:BertConfig", *BERT_KW, "--input", "input_ids:int64:16", "--input",
                 "attention_mask:int64:16:1..2", "--batch-size", "2", "--json", "-", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    # The same model built in-process, on the same shapes: the same counts.
    model = transformers.AutoModel.from_config(bert_config())
    ids = torch.randint(0, 100, (2, 16))
    expected = torchscan.crawl_module(model, kwargs={"input_ids": ids, "attention_mask": torch.ones(2, 16, dtype=int)})
    for name in ("parameters", "operator_flops", "buffer_elements"):
        assert report["totals"][name] == expected["totals"][name], name
    assert report["operator_flops"]["by_module"] == expected["operator_flops"]["by_module"]
    assert report["inputs"]["kwargs"]["input_ids"]["dtype"] == "torch.int64"


def test_a_transformers_model_class_takes_token_ids_by_default(tmp_path):
    # --input-shape without --dtype: a model whose main input is input_ids gets int64 ids.
    result = run("transformers:BertModel", *BERT_KW, "--input-shape", "16", "--json", "-", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["inputs"]["args"][0] == {**report["inputs"]["args"][0], "shape": [1, 16], "dtype": "torch.int64"}
    assert report["context"]["model_type"].endswith("BertModel")
    # Without inputs: the error says what to give.
    missing = run("transformers:BertModel", *BERT_KW, cwd=tmp_path)
    assert missing.returncode == 2
    assert "the inputs are required with MODEL 'transformers:BertModel' (for example --input input_ids:int64:128)" in (
        missing.stderr
    )


def test_float_inputs_to_an_embedding_model_get_a_hint(tmp_path):
    result = run("transformers:BertModel", *BERT_KW, "--input-shape", "16", "--dtype", "float32", cwd=tmp_path)
    assert result.returncode == 1
    assert "failed on the inputs (1, 16) float32" in result.stderr
    assert "give --dtype int64 or --input NAME:int64:SHAPE" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_batch_dimension_in_the_shape_gets_a_hint(tmp_path):
    result = run("torchvision.models:resnet18", "--input-shape", "1,3,32,32", cwd=tmp_path)
    assert result.returncode == 1
    assert "each SHAPE is given without the batch dimension, which --batch-size (1) adds" in result.stderr


def test_strict_passes_a_transformer_whose_operator_flops_are_complete(tmp_path):
    # nn.TransformerEncoderLayer has no module formulas (partial module_flops): --strict judges
    # the table's metrics; naming module_flops judges it too.
    args = ("torch.nn:TransformerEncoderLayer", "--kw", "d_model=8", "--kw", "nhead=2", "--kw",
            "dim_feedforward=16", "--kw", "batch_first=True", "--input", "float32:5,8")  # fmt: skip
    assert run(*args, "--strict", cwd=tmp_path).returncode == 0
    named = run(*args, "--strict-metrics", "module_flops", cwd=tmp_path)
    assert named.returncode == 1 and "incomplete for: module_flops" in named.stderr


# ---- CSV ----


def test_csv_has_every_layer_call_with_exact_numbers(tmp_path):
    path = tmp_path / "layers.csv"
    result = run("torchvision.models:resnet18", "--input-shape", "3,32,32", "--csv", str(path), "--max-depth", "1",
                 "--json", str(tmp_path / "r.json"), cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    report = json.loads((tmp_path / "r.json").read_text())
    # Every layer call (not cut to --max-depth: that is the printed table's view).
    assert len(rows) == len(report["layers"])
    for row, layer in zip(rows, report["layers"], strict=True):
        assert row["path"] == layer["path"] and row["type"] == layer["type"]
        assert row["operator_flops"] == str(layer["metrics"]["operator_flops"]["value"])
        assert row["parameters"] == str(layer["parameters"]["trainable"] + layer["parameters"]["frozen"])
        assert row["buffers"] == str(layer["buffers"]["elements"])
    conv1 = next(row for row in rows if row["path"] == "conv1")
    assert conv1["output_shape"] == "1x64x16x16"
    assert conv1["operator_flops_status"] == "complete"
    # The CSV alone on stdout.
    alone = run("--csv", "-", cwd=tmp_path)
    assert alone.returncode == 0 and alone.stdout.startswith("path,call_index,depth,type,output_shape")
    assert "Totals" not in alone.stdout


# ---- help without torch ----


def test_help_answers_without_importing_torch(tmp_path):
    # The launcher loads the option parsers alone: no torch (seconds) before the help prints.
    result = run("--help", cwd=tmp_path)
    assert result.returncode == 0
    assert "--input SPEC" in result.stdout and "--batch-size N" in result.stdout
    compare = run("compare", "--help", cwd=tmp_path)
    assert compare.returncode == 0 and "BEFORE.json" in compare.stdout
    # No torch in the process: a sitecustomize that makes importing torch fail proves it.
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\nclass _Block:\n    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch':\n            raise ImportError('torch imported')\n"
        "sys.meta_path.insert(0, _Block())\n"
    )
    blocked = run("--help", cwd=tmp_path, env_extra={"PYTHONPATH": f"{blocker}{os.pathsep}{HERE}"})
    assert blocked.returncode == 0, blocked.stderr
    assert "usage: torchscan" in blocked.stdout
    # A usage error after the help option is still the parser's (exit 2), without torch too.
    bad = run("--max-depth", "x", "--help", cwd=tmp_path, env_extra={"PYTHONPATH": f"{blocker}{os.pathsep}{HERE}"})
    assert bad.returncode == 2 and "invalid depth 'x'" in bad.stderr


# ---- --train and --memory ----


def section(stdout, title):
    """The lines of the block that starts with `title`, up to the next blank line."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


def test_train_counts_forward_backward_and_the_optimizer_step_by_hand(tmp_path):
    args = ("torch.nn:Linear", "--kw", "in_features=4", "--kw", "out_features=3", "--input", "float32:4",
            "--batch-size", "2", "--train", "--optimizer", "sgd")  # fmt: skip
    result = run(*args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in section(result.stdout, "Training step")[2:]]
    # Forward: addmm 2*(2*4*3) = 48 and its 6 bias adds, the loss sums 6 outputs: 6. Backward (the input needs no
    # gradient): the weight's gradient mm 2*(3*2*4) = 48, the bias's sums the batch: 6. SGD:
    # p.add_(grad, alpha=-lr), one FLOP per parameter: 15.
    assert rows == [
        ["forward", "60", "complete"],
        ["backward", "54", "complete"],
        ["optimizer", "step", "(sgd)", "15", "complete"],
        ["total", "129", "complete"],
    ]


def test_memory_of_the_forward_is_exact(tmp_path):
    args = ("torch.nn:Linear", "--kw", "in_features=4", "--kw", "out_features=3", "--input", "float32:4",
            "--batch-size", "2", "--memory")  # fmt: skip
    result = run(*args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    # The forward allocates its 2x3 float32 output: 24 bytes.
    assert section(result.stdout, "Peak memory") == [
        "Peak memory (MB = 10^6 bytes)",
        "  forward on cpu: 0.00 MB (24 bytes); pytorch_tensor_bytes",
    ]


def test_train_errors_say_what_to_change(tmp_path):
    # BatchNorm in training mode needs more than one value per channel.
    norm = run("torch.nn:BatchNorm1d", "--kw", "num_features=4", "--input", "float32:4", "--train", cwd=tmp_path)
    assert norm.returncode == 1
    assert "a training step of torch.nn:BatchNorm1d failed" in norm.stderr
    assert "needs --batch-size 2 or more in training mode" in norm.stderr
    # Nothing to train.
    relu = run("torch.nn:ReLU", "--input", "float32:4", "--train", cwd=tmp_path)
    assert relu.returncode == 1 and "the model has no trainable parameters" in relu.stderr
    assert "Traceback" not in norm.stderr + relu.stderr


def test_train_on_a_transformer_uses_its_loss(tmp_path):
    # Given labels, a transformers model returns its own loss, which the step trains on.
    args = ("transformers:BertConfig", *BERT_KW, "--input", "input_ids:int64:8", "--input", "labels:int64:8",
            "--batch-size", "2", "--train")  # fmt: skip
    with_labels = run("transformers:BertForMaskedLM", *args[1:], cwd=tmp_path)
    assert with_labels.returncode == 0, with_labels.stderr
    rows = {line.split()[0]: line.split() for line in section(with_labels.stdout, "Training step")[2:]}
    assert rows["forward"][-1] == rows["backward"][-1] == rows["total"][-1] == "complete"
    assert int(rows["backward"][1].replace(",", "")) > int(rows["forward"][1].replace(",", ""))


# ---- the smaller findings of issue 17, each through the console script ----


def test_a_depth_beyond_the_model_shows_every_layer(tmp_path):
    deep = run("torchvision.models:resnet18", "--input-shape", "3,32,32", "--max-depth", "10", cwd=tmp_path)
    whole = run("torchvision.models:resnet18", "--input-shape", "3,32,32", cwd=tmp_path)
    assert deep.returncode == 0, deep.stderr
    assert deep.stdout == whole.stdout


def test_an_output_folder_that_does_not_exist_is_refused_before_the_analysis(tmp_path):
    result = run("cli_models:Broken", "--input-shape", "4", "--json", "/nonexistent/x.json", cwd=tmp_path)
    # Exit 2 with the path named, not the model's error: the analysis never ran.
    assert result.returncode == 2
    assert "argument --json: the folder '/nonexistent' of '/nonexistent/x.json' does not exist" in result.stderr
    assert "rejects every input" not in result.stderr


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\xff\xfe{}", "is not UTF-8 text (byte 0)"),
        (b"[" * 100_000 + b"]" * 100_000, "nests its JSON too deeply to be a report"),
        (b'{"a": ' + b"9" * 5000 + b"}", "holds a value that cannot be read"),
    ],
    ids=["not-utf8", "deep", "digits"],
)
def test_compare_on_unreadable_files_is_a_clean_error(tmp_path, content, message):
    good = tmp_path / "good.json"
    assert run("--json", str(good), cwd=tmp_path).returncode == 0
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    result = run("compare", str(good), str(bad), cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.startswith(f"torchscan compare: error: {bad} {message}"), result.stderr
    assert "Traceback" not in result.stderr


def test_escape_bytes_in_layer_names_do_not_reach_the_terminal(tmp_path):
    result = run("cli_models:escape_names", "--input-shape", "4", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout
    assert "\\x1b[31mred" in result.stdout


def test_inputs_too_large_to_allocate_are_a_clean_failure(capsys):
    assert cli.main(["--input", "float32:99999999,99999999"]) == 1
    error = capsys.readouterr().err
    assert error.startswith("torchscan: error: cannot generate the inputs (1, 99999999, 99999999): RuntimeError")
    assert "Traceback" not in error


# ---- every result of a run in every output (issue 44) ----


def test_train_and_memory_reach_the_json_and_the_csv(tmp_path):
    json_path, csv_path = tmp_path / "r.json", tmp_path / "r.csv"
    args = ("torch.nn:Linear", "--kw", "in_features=4", "--kw", "out_features=3", "--input", "float32:4",
            "--batch-size", "2", "--train", "--optimizer", "sgd", "--memory", "--json", str(json_path),
            "--csv", str(csv_path))  # fmt: skip
    result = run(*args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(json_path.read_text())
    from helpers import schema_validator

    schema_validator("analysis_report").validate(report)
    # The same hand-computed step as the terminal's (forward 48 + 6 bias adds + 6 for the sum = 60,
    # backward 54, SGD 15).
    training = report["training"]
    assert training["optimizer"] == "sgd"
    phases = {name: m["value"] for name, m in training["flops"]["by_phase"].items()}
    assert phases == {"forward": 60, "backward": 54, "optimizer": 15}
    assert training["flops"]["total"]["value"] == 129
    # The forward's peak: its 2x3 float32 output, 24 bytes.
    assert report["memory"]["delta_bytes"] == 24 and report["memory"]["device"] == "cpu"
    assert training["memory"]["delta_bytes"] > 0
    rows = list(csv.DictReader(io.StringIO(csv_path.read_text())))
    steps = {row["path"]: row for row in rows if row["type"] == "training_step"}
    assert {name: row["operator_flops"] for name, row in steps.items()} == {
        "forward": "60",
        "backward": "54",
        "optimizer": "15",
        "total": "129",
    }
    assert all(row["operator_flops_status"] == "complete" for row in steps.values())
    memory = {row["path"]: row["memory_bytes"] for row in rows if row["type"] == "peak_memory"}
    assert memory == {"forward": "24", "training_step": str(training["memory"]["delta_bytes"])}
    # The layer rows come first and carry no memory.
    assert rows[0]["type"] == "Linear" and rows[0]["memory_bytes"] == ""


def test_a_plain_run_writes_neither_training_nor_memory(capsys):
    report = json_main(capsys, "torch.nn:Linear", "--kw", "in_features=4", "--kw", "out_features=3", "--input",
                       "float32:4")  # fmt: skip
    assert "training" not in report and "memory" not in report


# ---- a safe first contact (issue 44) ----


def test_an_unknown_config_keyword_names_the_close_match(capsys):
    assert cli.main(["transformers:LlamaConfig", "--kw", "hidden_sizee=64", "--input-shape", "8"]) == 2
    err = capsys.readouterr().err
    assert "its config LlamaConfig takes no keyword 'hidden_sizee'; did you mean 'hidden_size'?" in err
    # A model class is checked against its config too.
    assert cli.main(["transformers:BertModel", *BERT_KW, "--kw", "num_layers=2", "--input-shape", "8"]) == 2
    assert "BertConfig takes no keyword 'num_layers'" in capsys.readouterr().err


def test_a_model_too_large_for_memory_is_refused_with_its_size(capsys, monkeypatch):
    from torchscan.cli import models

    # BERT as BERT_KW sizes it, on the meta device: embeddings 100*32 + 512*32 + 2*32 + LayerNorm
    # 2*32 = 19,712; per layer: attention 4*(32*32 + 32) = 4,224, its LayerNorm 64, intermediate
    # 32*64 + 64 = 2,112, output 64*32 + 32 = 2,080, LayerNorm 64: 8,544; two layers 17,088; the
    # pooler 32*32 + 32 = 1,056: 37,856 parameters, 151,424 bytes in float32, and the position
    # ids and token type ids buffers: 2 * 512 int64 = 8,192 bytes.
    monkeypatch.setattr(models, "available_memory", lambda: 100_000)
    assert cli.main(["transformers:BertModel", *BERT_KW, "--input-shape", "8"]) == 2
    err = capsys.readouterr().err
    assert "has 37,856 parameters: 0.16 MB (159,616 bytes) of parameters and buffers, more than the 0.10 MB" in err
    assert "not built" in err
    needed = 37_856 * 4 + 2 * 512 * 8
    monkeypatch.setattr(models, "available_memory", lambda: needed)
    assert cli.main(["transformers:BertModel", *BERT_KW, "--input-shape", "8"]) == 0
    monkeypatch.setattr(models, "available_memory", lambda: needed - 1)
    assert cli.main(["transformers:BertModel", *BERT_KW, "--input-shape", "8"]) == 2


def test_a_timm_model_by_name(capsys):
    pytest.importorskip("timm")
    report = json_main(capsys, "timm:resnet18", "--kw", "num_classes=10", "--input-shape", "3,32,32")
    assert report["context"]["model_type"] == "timm.models.resnet.ResNet"
    # conv1 7x7x3x64 + bn1 ... the same parameters as timm.create_model's own model.
    import timm

    expected = sum(p.numel() for p in timm.create_model("resnet18", num_classes=10).parameters())
    assert report["totals"]["parameters"]["value"] == expected
    assert cli.main(["timm:resnet1", "--input-shape", "3,32,32"]) == 2
    err = capsys.readouterr().err
    assert "timm has no attribute or model named 'resnet1'; close matches:" in err and "resnet18" in err
