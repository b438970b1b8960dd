"""Module formulas for transformer and mobile families (issue 15): crawl_module's module-formula
totals are complete on BERT, GPT-2, Llama and ViT (small random configurations), torchvision's ViT
and MobileNetV3, and `torchscan MODEL --strict` exits 0 for them. Where a family's module formula
is the operator count's arithmetic (RMSNorm, rotary embeddings), the two agree exactly."""

import pytest
import torch
import torchvision

import cli_models
import torchscan
from test_cli import run

pytest.importorskip("transformers")

TOTALS = ("module_flops", "macs", "dmas", "operator_flops")


def tokens():
    return torch.randint(0, 100, (2, 16))


@pytest.mark.parametrize(
    "factory, inputs",
    [
        (cli_models.bert_small, tokens),
        (cli_models.gpt2_small, tokens),
        (cli_models.llama_small, tokens),
        (cli_models.vit_small, lambda: torch.randn(1, 3, 32, 32)),
        (
            lambda: torchvision.models.VisionTransformer(
                image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64
            ).eval(),
            lambda: torch.randn(1, 3, 32, 32),
        ),
        (lambda: torchvision.models.mobilenet_v3_small().eval(), lambda: torch.randn(1, 3, 64, 64)),
    ],
)
def test_module_formula_totals_are_complete(factory, inputs):
    report = torchscan.crawl_module(factory(), args=(inputs(),), strict=True)
    assert {name: report["totals"][name]["status"] for name in TOTALS} == dict.fromkeys(TOTALS, "complete")
    assert report["diagnostics"] == []


def test_rms_norm_and_rotary_module_formulas_equal_their_operator_counts():
    report = torchscan.crawl_module(cli_models.llama_small(), args=(tokens(),))
    checked = set()
    for layer in report["layers"]:
        if layer["type"] in ("LlamaRMSNorm", "LlamaRotaryEmbedding"):
            metrics = layer["metrics"]
            assert metrics["module_flops"]["value"] == metrics["operator_flops"]["value"] > 0, layer["path"]
            checked.add(layer["type"])
    assert checked == {"LlamaRMSNorm", "LlamaRotaryEmbedding"}
    # RMSNorm(32) on [2, 16, 32]: N = 1024, R = 32: 4N + 2R = 4160.
    norm = next(layer for layer in report["layers"] if layer["type"] == "LlamaRMSNorm")
    assert norm["metrics"]["module_flops"]["value"] == 4160


def test_layer_norm_over_several_dimensions_has_no_receptive_field():
    norm = torch.nn.LayerNorm([4, 6, 6])
    report = torchscan.crawl_module(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), norm), (3, 8, 8), strict=True)
    rf = report["layers"][2]["metrics"]["receptive_field"]
    assert (rf["status"], rf["method"]) == ("unavailable", "not_applicable")
    token_norm = torchscan.crawl_module(torch.nn.LayerNorm(8), (5, 8))["layers"][0]["metrics"]["receptive_field"]
    assert (token_norm["status"], token_norm["value"]) == ("complete", 1.0)


@pytest.mark.parametrize("model", ["bert_small", "llama_small"])
def test_strict_command_line_succeeds_on_transformers(tmp_path, model):
    # Every metric judged, the module formulas included: complete for these transformers.
    args = ("--input-shape", "16", "--dtype", "int64", "--strict-metrics", "all")
    result = run(f"cli_models:{model}", *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Module-formula FLOPs (torchscan 0.2's method)" in result.stdout


def test_recurrent_module_formulas():
    # Two bidirectional LSTM layers on [5, 3, 8]: 15 rows x (2 x 3584 + 2 x 6656) (see
    # src/modules/recurrent.rs), complete under strict; the receptive field is not applicable.
    lstm = torch.nn.LSTM(8, 16, num_layers=2, bidirectional=True)
    report = torchscan.crawl_module(lstm, args=(torch.randn(5, 3, 8),), strict=True)
    metrics = report["layers"][0]["metrics"]
    assert metrics["module_flops"]["value"] == 15 * 20_480
    assert metrics["receptive_field"]["method"] == "not_applicable"
    # A packed GRU counts its packed rows (5 + 3 + 2): 10 x 2704.
    packed = torch.nn.utils.rnn.pack_padded_sequence(torch.randn(5, 3, 8), [5, 3, 2])
    report = torchscan.crawl_module(torch.nn.GRU(8, 16), args=(packed,), strict=True)
    assert report["layers"][0]["metrics"]["module_flops"]["value"] == 27_040


def test_normalization_movement_and_softmax_module_formulas():
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3),
        torch.nn.InstanceNorm2d(4, affine=True),
        torch.nn.GroupNorm(2, 4),
        torch.nn.Softmax(1),
        torch.nn.Upsample(scale_factor=2),
        torch.nn.PixelShuffle(2),
        torch.nn.ZeroPad2d(1),
        torch.nn.Unflatten(1, (1, 1)),
    )
    report = torchscan.crawl_module(model, (3, 8, 8), strict=True)
    flops = {layer["type"]: layer["metrics"]["module_flops"]["value"] for layer in report["layers"][1:]}
    # [1, 4, 6, 6]: N = 144. InstanceNorm: 6N + 2 x 4 rows + 2N affine; GroupNorm(2): 6N + 2 x 2 + 2N.
    assert flops["InstanceNorm2d"] == 6 * 144 + 8 + 2 * 144 == 1160
    assert flops["GroupNorm"] == 6 * 144 + 4 + 2 * 144 == 1156
    assert flops["Softmax"] == 5 * 144
    assert flops["Upsample"] == flops["PixelShuffle"] == flops["ZeroPad2d"] == flops["Unflatten"] == 0
    rf = {layer["type"]: layer["metrics"]["receptive_field"] for layer in report["layers"][1:]}
    assert rf["ZeroPad2d"]["status"] == "complete" and rf["Upsample"]["method"] == "not_applicable"


def test_classic_mnist_cnn_with_channel_dropout_is_complete():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3),
        torch.nn.ReLU(),
        torch.nn.Dropout2d(0.25),
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 26 * 26, 10),
        torch.nn.LogSoftmax(1),
    )
    report = torchscan.crawl_module(model, (1, 28, 28), strict=True)
    assert all(metric["status"] == "complete" for metric in report["totals"].values()), report["diagnostics"]
    dropout = report["layers"][3]
    assert dropout["type"] == "Dropout2d"
    # crawl_module runs the model in evaluation: dropout does nothing.
    assert dropout["metrics"]["module_flops"]["value"] == 0


@pytest.mark.parametrize(
    ("module", "flops"),
    [
        # [1, 4, 6, 6]: 144 elements; Softmin negates, then 5 per element.
        (torch.nn.Softmin(1), 6 * 144),
        # Bilinear: 4 taps per element of the [1, 4, 12, 12] output; bicubic 16; nearest-exact moves.
        (torch.nn.Upsample(scale_factor=2, mode="bilinear"), 4 * 576),
        (torch.nn.Upsample(scale_factor=2, mode="bicubic"), 16 * 576),
        (torch.nn.Upsample(scale_factor=2, mode="nearest-exact"), 0),
        (torch.nn.AlphaDropout(), 0),
        (torch.nn.FeatureAlphaDropout(), 0),
    ],
)
def test_more_module_formulas_agree_with_the_operators_they_run(module, flops):
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), module)
    report = torchscan.crawl_module(model, (3, 8, 8), strict=True)
    layer = report["layers"][2]
    assert layer["metrics"]["module_flops"] == {
        **layer["metrics"]["module_flops"],
        "status": "complete",
        "value": flops,
    }
    # The module formula and the operators dispatched inside the call count the same.
    assert layer["metrics"]["operator_flops"]["value"] == flops


def test_prelu_follows_the_activation_convention():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.PReLU(4))
    metrics = torchscan.crawl_module(model, (3, 8, 8), strict=True)["layers"][2]["metrics"]
    # As LeakyReLU, 4 per element of [1, 4, 6, 6] (the module convention); the operator counts 1.
    assert (metrics["module_flops"]["value"], metrics["operator_flops"]["value"]) == (4 * 144, 144)
    # DMAs: the input, the 4 slopes, the output.
    assert metrics["dmas"]["value"] == 144 + 4 + 144


def test_max_unpool_moves_values():
    pool = torch.nn.MaxPool2d(2, return_indices=True)
    values, indices = pool(torch.randn(1, 2, 4, 4))
    report = torchscan.crawl_module(torch.nn.MaxUnpool2d(2), args=(values, indices), strict=True)
    assert report["layers"][0]["metrics"]["module_flops"]["value"] == 0
    assert report["totals"]["module_flops"]["status"] == "complete"
