"""torchscan.modules: the module formulas on real modules, with hand-computed values."""

import warnings

import pytest
import torch
from torch import nn

from torchscan.modules import module_dmas, module_flops, module_macs, module_rf


def run(module, in_shape):
    x = torch.zeros(in_shape)
    with torch.no_grad():
        y = module(x)
    return x, y


@pytest.mark.parametrize(
    "module, in_shape, flops, macs, dmas, rf",
    [
        # 4 outputs x (8 products + 7 adds + bias); MACs 8 x 4; DMAs 8 in + 36 params + 4 out.
        (nn.Linear(8, 4), (1, 8), 64, 32, 48, (1.0, 1.0, 0.0)),
        (nn.Linear(8, 4, bias=False), (1, 8), 60, 32, 44, (1.0, 1.0, 0.0)),
        (nn.Identity(), (1, 8), 0, 0, 8, (1.0, 1.0, 0.0)),
        (nn.Flatten(), (1, 8), 0, 0, 16, (1.0, 1.0, 0.0)),
        (nn.ReLU(), (1, 8), 8, 0, 16, (1.0, 1.0, 0.0)),
        (nn.ReLU(inplace=True), (1, 8), 8, 0, 8, (1.0, 1.0, 0.0)),
        (nn.ELU(), (1, 8), 48, 0, 17, (1.0, 1.0, 0.0)),
        (nn.LeakyReLU(), (1, 8), 32, 0, 17, (1.0, 1.0, 0.0)),
        (nn.ReLU6(), (1, 8), 16, 0, 16, (1.0, 1.0, 0.0)),
        (nn.Tanh(), (1, 8), 48, 0, 24, (1.0, 1.0, 0.0)),
        (nn.Sigmoid(), (1, 8), 32, 0, 16, (1.0, 1.0, 0.0)),
        # 7200 outputs x (2*27 - 1 + 1); DMAs 194_400 + 224 + 7200.
        (nn.Conv2d(3, 8, 3), (1, 3, 32, 32), 388_800, 194_400, 201_824, (3, 1, 0)),
        # dilation 2: 28x28 outputs of the same 27-term window: 6272 x 54.
        (nn.Conv2d(3, 8, 3, dilation=2), (1, 3, 32, 32), 338_688, 169_344, None, (5, 1, 0)),
        # 3072 inputs scatter into 8 x 9 outputs: 2 x 221_184 + 9248 bias adds.
        (nn.ConvTranspose2d(3, 8, 3), (1, 3, 32, 32), 451_616, 221_184, 259_178, (-3, 1.0, 0.0)),
        (nn.MaxPool2d((2, 2)), (1, 8, 4, 4), 96, 96, 160, (2, 2, 0)),
        (nn.AvgPool2d((2, 2)), (1, 8, 4, 4), 128, 160, 160, (2, 2, 0)),
        (nn.AdaptiveMaxPool2d((2, 2)), (1, 8, 4, 4), 96, 96, 160, (2, 2, 0.0)),
        (nn.AdaptiveAvgPool2d(2), (1, 8, 4, 4), 128, 160, 160, (2, 2, 0.0)),
        (nn.Dropout(), (1, 8), 16, 0, 17, (1.0, 1.0, 0.0)),
        (nn.Dropout(p=0), (1, 8), 0, 0, 17, (1.0, 1.0, 0.0)),
        (nn.BatchNorm1d(8), (1, 8, 4), 336, 176, 115, (1.0, 1.0, 0.0)),
    ],
)
def test_reference_values(module, in_shape, flops, macs, dmas, rf):
    x, y = run(module, in_shape)
    assert module_flops(module, (x,), y) == flops
    assert module_macs(module, x, y) == macs
    if dmas is not None:
        assert module_dmas(module, x, y) == dmas
    assert module_rf(module, x, y) == rf


def test_eval_batch_norm_and_dropout():
    bn = nn.BatchNorm1d(8).eval()
    x, y = run(bn, (1, 8, 4))
    assert module_flops(bn, (x,), y) == 2 * 8 + 2 * 32 + 2 * 32
    dropout = nn.Dropout().eval()
    x, y = run(dropout, (1, 8))
    assert module_flops(dropout, (x,), y) == 0


def test_layer_norm():
    x = torch.zeros(2, 3, 4)
    for module, flops in (
        (nn.LayerNorm(4), 204),
        (nn.LayerNorm(4, bias=False), 180),
        (nn.LayerNorm(4, elementwise_affine=False), 156),
    ):
        assert module_flops(module, (x,), module(x)) == flops
    ln = nn.LayerNorm(4)
    assert module_macs(ln, x, ln(x)) == 48
    # Over one (feature) dimension a LayerNorm is pointwise; over several it mixes positions and
    # has no receptive field: warned, with the neutral triple (as for an unsupported module).
    assert module_rf(ln, x, ln(x)) == (1.0, 1.0, 0.0)
    wide = nn.LayerNorm([3, 4])
    with pytest.warns(UserWarning, match="LayerNorm: not applicable"):
        assert module_rf(wide, x, wide(x)) == (1.0, 1.0, 0.0)


@pytest.mark.parametrize("bias, flops", [(False, 1592), (True, 1720)])
def test_multihead_attention(bias, flops):
    mha = nn.MultiheadAttention(4, 2, bias=bias).eval()
    q, kv = torch.zeros(3, 2, 4), torch.zeros(5, 2, 4)
    with torch.no_grad():
        out = mha(q, kv, kv, need_weights=False)
        averaged = mha(q, kv, kv)
    assert module_flops(mha, (q, kv, kv, None, False), out) == flops
    # Returned head-averaged weights add one add per score: 2*2*3*5 = 60.
    assert module_flops(mha, (q, kv, kv), averaged) == flops + 60


def test_unsupported_module_warns_and_returns_the_neutral_value():
    class Custom(nn.Module):
        def forward(self, x):
            return x

    x = torch.zeros(2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert module_flops(Custom(), (x,), x) == 0
        assert module_macs(Custom(), x, x) == 0
        assert module_dmas(Custom(), x, x) == 0
        assert module_rf(Custom(), x, x) == (1.0, 1.0, 0.0)
    assert [str(w.message) for w in caught] == ["Module type not supported: Custom"] * 4


def test_bad_input():
    with pytest.raises(TypeError, match=r"module must be an nn\.Module, got str"):
        module_flops("conv", (torch.zeros(1),), torch.zeros(1))
    with pytest.raises(ValueError, match="Linear: the module call exposed no input tensor"):
        module_flops(nn.Linear(2, 2), (None,), torch.zeros(1, 2))
    with pytest.raises(NotImplementedError, match="MultiheadAttention FLOPs only support batched 3D inputs"):
        mha = nn.MultiheadAttention(4, 2)
        q = torch.zeros(3, 4)
        module_flops(mha, (q, q, q), mha(q, q, q))


def small_transformer():
    return nn.Transformer(
        d_model=4, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=8, dropout=0.0, batch_first=True
    ).eval()


def test_root_transformer_flops():
    model = small_transformer()
    src, tgt = torch.zeros(1, 3, 4), torch.zeros(1, 2, 4)
    with torch.no_grad():
        out = model(src, tgt)
    # Encoder layer 1224 + its LayerNorm 102 + decoder layer 1300 + its LayerNorm 68 (torchscan 0.2).
    assert module_flops(model, (src, tgt), out) == 2694
    masks = (
        torch.zeros(3, 3, dtype=torch.bool),
        torch.zeros(2, 2, dtype=torch.bool),
        torch.zeros(2, 3, dtype=torch.bool),
        torch.zeros(1, 3, dtype=torch.bool),
        torch.zeros(1, 2, dtype=torch.bool),
        torch.zeros(1, 3, dtype=torch.bool),
    )
    assert module_flops(model, (src, tgt, *masks), out) == 2770  # one add per masked score


def test_root_transformer_in_crawl_module():
    from torchscan import crawl_module

    model = small_transformer()
    report = crawl_module(model, args=(torch.zeros(1, 3, 4), torch.zeros(1, 2, 4)))
    [layer] = report["layers"]  # the root alone: its formula covers the whole stack
    assert layer["metrics"]["module_flops"]["value"] == 2694
    assert layer["metrics"]["receptive_field"]["method"] == "not_applicable"
    assert layer["parameters"]["trainable"] == sum(p.numel() for p in model.parameters())
    codes = {(d["code"], d["metric"]) for d in report["diagnostics"] if d["code"] != "uncounted_operator"}
    assert codes == {("unsupported_module_metric", "macs"), ("unsupported_module_metric", "dmas")}
