"""Operator families beyond the first zoo (issue 15), on real PyTorch calls: recurrent layers,
elementwise losses, fused optimizers, sorting and scattered accumulation, grid sampling, pairwise
distances, RMS and weight normalization. Every number is computed by hand from the conventions
in docs/formulas.md; every report must be complete."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchscan
from helpers import fcm_total


def report_of(workload):
    report = torchscan.measure_flops(workload)
    assert report["total"]["status"] == "complete", report["diagnostics"]
    return report


def lstm_layer(rows: int, input_size: int, hidden: int, biases: bool = True) -> int:
    """One LSTM layer-direction: per row 2·4H·(I + H) for the products, 4H for their sum, 9H gates,
    and 2·4H for the two biases' adds (the bias convention: lstm_cell's two linear calls)."""
    bias = 2 * 4 * hidden if biases else 0
    return rows * (2 * 4 * hidden * (input_size + hidden) + 4 * hidden + 9 * hidden + bias)


def test_lstm_inference_counts_every_layer_and_direction():
    torch.manual_seed(0)
    lstm = nn.LSTM(8, 16, num_layers=2, bidirectional=True, batch_first=True).eval()
    x = torch.randn(3, 5, 8)
    with torch.no_grad():
        report = report_of(lambda: lstm(x))
    # 15 rows; layer 1 reads 8 features, layer 2 the 32 of both directions.
    expected = 2 * lstm_layer(15, 8, 16) + 2 * lstm_layer(15, 32, 16)
    assert lstm_layer(15, 8, 16, biases=False) == 49_200
    assert lstm_layer(15, 8, 16) == 49_200 + 15 * 128 == 51_120
    assert report["by_operator"]["aten.mkldnn_rnn_layer"] == expected == 296_640
    assert report["operator_calls"]["aten.mkldnn_rnn_layer"] == 4
    # PyTorch's FlopCounterMode has no formula for the fused layer: it counts nothing.
    with torch.no_grad():
        assert fcm_total(lambda: lstm(x)) == 0


def test_lstm_training_step_counts_the_backward_layer():
    lstm = nn.LSTM(8, 16)
    x = torch.randn(5, 3, 8, requires_grad=True)
    report = report_of(lambda: lstm(x)[0].sum().backward())
    # 49,200 for the products and gates, 15 rows x 128 for the two biases; backward twice the
    # products and gates, and the two bias gradients' sums (15 x 128).
    assert report["by_operator"]["aten.mkldnn_rnn_layer"] == 49_200 + 1_920
    assert report["by_operator"]["aten.mkldnn_rnn_layer_backward"] == 2 * 49_200 + 1_920
    no_bias = nn.LSTM(8, 16, bias=False)
    report = report_of(lambda: no_bias(x)[0].sum().backward())
    assert report["by_operator"]["aten.mkldnn_rnn_layer"] == 49_200
    assert report["by_operator"]["aten.mkldnn_rnn_layer_backward"] == 2 * 49_200


@pytest.mark.parametrize(
    "loss, forward, backward",
    [
        # [4, 6] inputs, mean reduction: per element + 1 to accumulate; backward per element.
        (F.mse_loss, 24 * 3, 24 * 3),
        (F.huber_loss, 24 * 6, 24 * 4),
        (F.smooth_l1_loss, 24 * 6, 24 * 4),
    ],
)
def test_elementwise_losses(loss, forward, backward):
    x, target = torch.randn(4, 6, requires_grad=True), torch.randn(4, 6)
    report = report_of(lambda: loss(x, target).backward())
    name = {F.mse_loss: "mse_loss", F.huber_loss: "huber_loss", F.smooth_l1_loss: "smooth_l1_loss"}[loss]
    assert report["by_operator"][f"aten.{name}"] == forward
    assert report["by_operator"][f"aten.{name}_backward"] == backward
    assert report["by_category"]["loss"] == forward + backward


def test_binary_cross_entropy_with_weight():
    p = torch.rand(4, 6).clamp(0.05, 0.95).requires_grad_()
    target, weight = torch.rand(4, 6), torch.rand(4, 6)
    report = report_of(lambda: F.binary_cross_entropy(p, target, weight=weight).backward())
    assert report["by_operator"]["aten.binary_cross_entropy"] == 24 * (8 + 1 + 1)
    assert report["by_operator"]["aten.binary_cross_entropy_backward"] == 24 * (6 + 1)


def test_a_kernel_writing_into_an_unresized_out_tensor_is_counted():
    # soft_margin_loss's kernel runs neg_out / mul_ / exp_ / log1p_ into an empty output.
    x, target = torch.randn(4, 6), torch.randn(4, 6)
    report = report_of(lambda: F.soft_margin_loss(x, target))
    assert report["by_operator"]["aten.neg"] == 24
    assert report["by_operator"]["aten.log1p_"] == 24


def test_in_place_variants_take_their_functional_rows():
    x = torch.randn(3, 5)
    report = report_of(lambda: x.clone().cos_().sinh_().atan2_(x))
    assert report["by_operator"] == {"aten.cos_": 15, "aten.sinh_": 15, "aten.atan2_": 15}


def optimizer_step_flops(make, **options):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 10), nn.Linear(10, 3))
    optimizer = make(model.parameters(), **options)
    for _ in range(3):  # past the first step, whose momentum buffers are copies
        optimizer.zero_grad()
        model(torch.randn(2, 10)).sum().backward()
        report = report_of(optimizer.step)
    return report


@pytest.mark.parametrize(
    "make, options",
    [
        (torch.optim.Adam, {}),
        (torch.optim.Adam, {"weight_decay": 0.1, "amsgrad": True}),
        (torch.optim.AdamW, {}),
        (torch.optim.AdamW, {"maximize": True}),
        (torch.optim.Adagrad, {}),
        (torch.optim.Adagrad, {"weight_decay": 0.1, "maximize": True}),
        (torch.optim.SGD, {"lr": 0.1}),
        (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
        (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-4}),
    ],
)
def test_fused_optimizer_steps_count_what_foreach_steps_count(make, options):
    fused = optimizer_step_flops(make, fused=True, **options)
    foreach = optimizer_step_flops(make, foreach=True, **options)
    assert fused["total"]["value"] == foreach["total"]["value"] > 0
    assert any(name.startswith("aten._fused_") for name in fused["by_operator"])


def test_gradient_clipping_norms():
    model = nn.Linear(6, 6)
    model(torch.randn(3, 6)).sum().backward()
    report = report_of(lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
    # 42 gradient elements: a square and an add each.
    assert report["by_operator"]["aten._foreach_norm"] == 2 * 42


def test_sorting_and_selection():
    x = torch.randn(4, 50)
    assert report_of(lambda: torch.sort(x))["by_operator"] == {"aten.sort": 4 * 50 * 6}
    assert report_of(lambda: torch.topk(x, 5))["by_operator"] == {"aten.topk": 4 * 50 * 3}
    assert report_of(lambda: torch.kthvalue(x, 3, 1))["by_operator"] == {"aten.kthvalue": 200}
    assert report_of(lambda: torch.histc(x, 10, -1.0, 1.0))["by_operator"] == {"aten.histc": 600}
    assert report_of(lambda: torch.argsort(x, dim=0))["by_operator"] == {"aten.sort": 50 * 4 * 2}


def test_mixture_of_experts_routing_is_complete():
    # Top-2 routing over 4 experts for 6 tokens, counted per expert with index_add (Mixtral's loop).
    torch.manual_seed(0)
    tokens, experts = torch.randn(6, 8), nn.ModuleList(nn.Linear(8, 8) for _ in range(4))
    gate = nn.Linear(8, 4)

    def route():
        weights, chosen = torch.topk(gate(tokens).softmax(-1), 2)
        out = torch.zeros_like(tokens)
        for e, expert in enumerate(experts):
            rows, slot = torch.where(chosen == e)
            out.index_add_(0, rows, expert(tokens[rows]) * weights[rows, slot, None])
        return torch.histc(chosen.float(), 4, 0, 3)

    report = report_of(route)
    assert report["by_operator"]["aten.topk"] == 6 * 4 * 2
    assert report["by_operator"]["aten.index_add_"] == 12 * 8  # 12 routed rows of 8 features


def test_scattered_accumulation_and_embedding_bags():
    index = torch.tensor([[0, 2, 4]] * 4)
    src = torch.randn(4, 3)
    assert report_of(lambda: torch.zeros(4, 6).scatter_add_(1, index, src))["by_operator"]["aten.scatter_add_"] == 12
    plain = report_of(lambda: torch.zeros(4, 6).scatter_(1, index, src))
    assert plain["by_operator"]["aten.scatter_"] == 0, "a plain scatter is a copy"
    reduced = report_of(lambda: torch.zeros(4, 6).scatter_(1, index, src, reduce="add"))
    assert reduced["by_operator"]["aten.scatter_"] == 12
    bag = nn.EmbeddingBag(10, 5, mode="sum")
    indices, offsets = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 4])
    report = report_of(lambda: bag(indices, offsets).sum().backward())
    assert report["by_operator"]["aten._embedding_bag"] == 8 * 5
    assert sum(v for k, v in report["by_operator"].items() if "embedding_bag" in k and "backward" in k) == 8 * 5


def test_sparse_embedding_trained_by_sgd_is_priced_by_stored_values():
    # nn.Embedding(sparse=True): the gradient is a sparse COO tensor of the 6 looked-up rows (id 5
    # twice, uncoalesced) x 16: 96 stored values; SGD's weight.add_(grad, alpha=-lr) adds each
    # once: 96 (a dense price would be 100 x 16 = 1,600). The loss's sum: 96.
    torch.manual_seed(0)
    embedding = nn.Embedding(100, 16, sparse=True)
    optimizer = torch.optim.SGD(embedding.parameters(), lr=0.1)
    ids = torch.tensor([[1, 5, 7], [5, 9, 2]])

    def step():
        optimizer.zero_grad()
        embedding(ids).sum().backward()
        optimizer.step()

    report = report_of(step)
    assert report["total"]["status"] == "complete", report["diagnostics"]
    assert report["by_operator"] == {"aten.sum": 96, "aten.add_": 96}


def test_embedding_bag_with_padding_counts_the_ids_the_kernel_accumulates():
    # 20 ids in 4 bags, 7 of them padding_idx 0: the kernel accumulates 13 rows of 16 = 208 (not
    # 320, every id); the shim reads the ids, so the count is exact and complete. Its gradient
    # reaches the same 13 rows: 208.
    torch.manual_seed(0)
    bag = nn.EmbeddingBag(50, 16, mode="mean", padding_idx=0)
    ids = torch.tensor([0, 3, 0, 7, 9, 0, 0, 12, 4, 0, 5, 6, 0, 8, 0, 11, 13, 14, 15, 2])
    offsets = torch.tensor([0, 5, 10, 15])
    assert int((ids != 0).sum()) == 13
    with torch.no_grad():
        report = report_of(lambda: bag(ids, offsets))
    assert report["total"]["status"] == "complete", report["diagnostics"]
    assert report["by_operator"] == {"aten._embedding_bag": 208}
    report = report_of(lambda: bag(ids, offsets).sum().backward())
    assert report["total"]["status"] == "complete", report["diagnostics"]
    assert report["by_operator"]["aten._embedding_bag"] == 208
    assert sum(v for k, v in report["by_operator"].items() if "embedding_bag" in k and "backward" in k) == 208
    # Other ids, same shapes: the count follows the data (no price remembered by shape).
    with torch.no_grad():
        none_padded = report_of(lambda: bag(ids + 1, offsets))
    assert none_padded["by_operator"] == {"aten._embedding_bag": 320, "aten.add": 20}  # ids + 1: 20


def test_grid_sampling_and_pairwise_distances():
    x = torch.randn(1, 3, 8, 8, requires_grad=True)
    grid = torch.rand(1, 4, 4, 2) * 2 - 1
    report = report_of(lambda: F.grid_sample(x, grid, align_corners=False).sum().backward())
    assert report["by_operator"]["aten.grid_sampler_2d"] == 3 * 16 * 4
    assert report["by_operator"]["aten.grid_sampler_2d_backward"] == 2 * 3 * 16 * 4
    a, b = torch.randn(5, 4), torch.randn(6, 4)
    assert report_of(lambda: torch.cdist(a, b, p=1.0))["by_operator"] == {"aten._cdist_forward": 5 * 6 * 4 * 3}


def has_cpu_kernel(operator):
    """Whether this torch runs `operator` on CPU (its own kernel or a composite one); older
    releases lack some (make test-torch runs these tests against them)."""
    try:
        return torch._C._dispatch_has_computed_kernel_for_dispatch_key(operator, "CPU")
    except RuntimeError:  # the operator does not exist in this release
        return False


def test_rms_and_weight_normalization():
    x = torch.randn(4, 6)
    # 24 elements in 4 rows: 4 per element, 2 per row, by the fused operator's formula where it
    # has a kernel of its own, by its decomposition (pow, mean, add_, rsqrt, mul, mul) where its
    # composite runs (CPU in torch 2.9-2.13; before 2.9 RMSNorm is a composite), never both.
    report = report_of(lambda: nn.RMSNorm(6)(x))
    assert report["total"]["value"] == 24 * 4 + 4 * 2 == 104
    own_kernel = has_cpu_kernel("aten::_fused_rms_norm") and torch._C._dispatch_has_kernel_for_dispatch_key(
        "aten::_fused_rms_norm", "CPU"
    )
    assert ("aten._fused_rms_norm" in report["by_operator"]) == own_kernel
    linear = torch.nn.utils.parametrizations.weight_norm(nn.Linear(5, 4))
    report = report_of(lambda: linear(torch.randn(2, 5)))
    assert report["by_operator"]["aten._weight_norm_interface"] == 20 * 3


def test_activations_and_elementwise_math():
    x = torch.randn(4, 6, requires_grad=True)
    prelu, glu = nn.PReLU(6), nn.GLU()
    report = report_of(lambda: (prelu(x).sum() + glu(x).sum()).backward())
    assert report["by_operator"]["aten._prelu_kernel"] == 24
    assert report["by_operator"]["aten._prelu_kernel_backward"] == 48
    assert report["by_operator"]["aten.glu"] == 24  # 12 outputs, a sigmoid and a multiply each
    assert report["by_operator"]["aten.glu_backward"] == 24
    y = torch.rand(4, 6) + 0.1
    report = report_of(lambda: torch.special.xlogy(y, y) + torch.lgamma(y) + torch.logit(y * 0.5))
    assert report["by_operator"]["aten.xlogy"] == report["by_operator"]["aten.lgamma"] == 24


@pytest.mark.skipif(not has_cpu_kernel("aten::_grouped_mm"), reason="this torch has no CPU _grouped_mm (< 2.9)")
def test_grouped_expert_products():
    # 6 tokens routed to 3 experts [8, 4] (offsets along the tokens): 2 x 6 x 8 x 4.
    tokens, weights = torch.randn(6, 8), torch.randn(3, 8, 4)
    offsets = torch.tensor([2, 4, 6], dtype=torch.int32)
    report = report_of(lambda: torch._grouped_mm(tokens, weights, offs=offsets))
    assert report["by_operator"] == {"aten._grouped_mm": 384}
    assert report["by_category"] == {"matmul": 384}
    # FlopCounterMode has no formula for it: it counts nothing.
    assert fcm_total(lambda: torch._grouped_mm(tokens, weights, offs=offsets)) == 0


def test_linear_algebra_by_lapack_counts():
    a = torch.randn(4, 4) + 4 * torch.eye(4)
    spd = a @ a.T
    # (linalg.inv also checks the factorization's status: one `any` over a 1-element tensor.)
    assert report_of(lambda: torch.linalg.inv(a))["by_operator"]["aten.linalg_inv_ex"] == 2 * 4**3
    # LU (2/3 x 64 = 42.67) and two triangular solves for 2 right-hand sides (2 x 16 x 2): 107.
    assert report_of(lambda: torch.linalg.solve(a, torch.randn(4, 2)))["by_category"]["linalg"] == 107
    assert report_of(lambda: torch.linalg.cholesky(spd))["by_category"]["linalg"] == 21
    eigh = report_of(lambda: torch.linalg.eigh(spd))["by_category"]["linalg"]
    assert eigh == 9 * 64
    # Complex matrices count 4x (a complex multiply-add is 8 real FLOPs).
    z = torch.randn(4, 4, dtype=torch.complex64) + 4 * torch.eye(4)
    assert report_of(lambda: torch.linalg.inv(z))["by_operator"]["aten.linalg_inv_ex"] == 4 * 128
    # 3 x (6 x 4): thin SVD 14 m n^2 + 8 n^3 = 1856 each.
    report = report_of(lambda: torch.linalg.svd(torch.randn(3, 6, 4), full_matrices=False))
    assert report["by_operator"]["aten._linalg_svd"] == 3 * 1856


def test_fourier_transforms():
    x = torch.randn(4, 16)
    # rfft: 4 transforms of 16 real points: 4 x 16 x 5 x 4 / 2 = 640.
    assert report_of(lambda: torch.fft.rfft(x))["by_category"] == {"spectral": 640}
    z = torch.randn(4, 16, dtype=torch.complex64)
    assert report_of(lambda: torch.fft.fft(z))["by_operator"] == {"aten._fft_c2c": 1280}
    # Orthonormal scaling: + 2 per complex output element.
    assert report_of(lambda: torch.fft.fft(z, norm="ortho"))["by_operator"] == {"aten._fft_c2c": 1280 + 128}
    # irfft back to 16 real points: 640, the same as the forward.
    spectrum = torch.fft.rfft(x)
    assert report_of(lambda: torch.fft.irfft(spectrum, n=16, norm="forward"))["by_operator"] == {"aten._fft_c2r": 640}


def test_ctc_loss_lattices():
    log_probs = torch.randn(7, 2, 5).log_softmax(2).requires_grad_()
    targets, inputs, labels = torch.tensor([[1, 2, 3], [1, 2, 0]]), torch.tensor([7, 5]), torch.tensor([3, 2])
    report = report_of(lambda: F.ctc_loss(log_probs, targets, inputs, labels).backward())
    # Lattices 7 x (2 x 3 + 1) + 5 x (2 x 2 + 1) = 74 cells: 13 each forward; backward 26 each and 3
    # per log-probability (70).
    assert report["by_operator"]["aten._ctc_loss"] == 74 * 13
    assert report["by_operator"]["aten._ctc_loss_backward"] == 74 * 26 + 70 * 3


def test_fp8_scaled_products_agree_with_flop_counter_mode():
    a = torch.randn(16, 32).to(torch.float8_e4m3fn)
    b = torch.randn(64, 32).to(torch.float8_e4m3fn).t()
    one = torch.tensor(1.0)

    def product():
        return torch._scaled_mm(a, b, one, one, out_dtype=torch.float32)

    assert report_of(product)["by_operator"] == {"aten._scaled_mm": 2 * 16 * 32 * 64}
    assert fcm_total(product) == 2 * 16 * 32 * 64


def test_strided_nested_tensors_are_priced_over_their_elements():
    nested = torch.nested.nested_tensor([torch.randn(3, 8), torch.randn(5, 8)], layout=torch.strided)
    # 64 elements: softmax 5 each forward; the product 1 each.
    assert report_of(lambda: torch.softmax(nested, -1))["by_operator"] == {"aten._softmax": 320}
    assert report_of(lambda: nested * nested)["by_operator"] == {"aten.mul": 64}
    # A product needs the components' shapes, which a flat record does not give: named, not guessed.
    report = torchscan.measure_flops(lambda: torch.bmm(nested, nested.transpose(1, 2)))
    assert report["total"]["status"] == "partial"
    assert [d["code"] for d in report["diagnostics"]] == ["formula_error"]


def test_transformer_encoder_fast_path_by_hand():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 2, 64, batch_first=True, dropout=0.0).eval()
    x = torch.randn(2, 6, 32)
    with torch.no_grad():
        report = report_of(lambda: layer(x))
    # 12 tokens. Attention: in-projection 2 x 12 x 32 x 96, scores and weighted values
    # 2 x (2 x 2 heads x 6 x 6 x 16) each, out-projection 2 x 12 x 32 x 32, and the projections'
    # biases added to their 12 x 96 and 12 x 32 outputs (the bias convention).
    attention = 2 * 12 * 32 * 96 + 2 * (2 * 2 * 2 * 6 * 6 * 16) + 2 * 12 * 32 * 32 + 12 * 96 + 12 * 32
    # Feed-forward: two products, their biases' adds (12 x 64 and 12 x 32, the bias convention)
    # and the fused ReLU; two residual adds; two LayerNorms at 5 FLOPs per element.
    feed_forward = 2 * (2 * 12 * 32 * 64) + 12 * 64 + 12 * 32 + 12 * 64
    expected = attention + feed_forward + 2 * 12 * 32 + 2 * 5 * 12 * 32
    assert report["by_operator"]["aten._native_multi_head_attention"] == attention == 109_056
    assert report["total"]["value"] == expected == 213_888


def test_margin_losses_and_unfold_gradients():
    scores = torch.randn(4, 6, requires_grad=True)
    report = report_of(lambda: F.multi_margin_loss(scores, torch.tensor([0, 1, 2, 3]), p=2).backward())
    assert report["by_operator"]["aten.multi_margin_loss"] == 24 * 5
    assert report["by_operator"]["aten.multi_margin_loss_backward"] == 24 * 3
    labels = torch.tensor([[0, 1, -1, 0, 0, 0]] * 4)
    report = report_of(lambda: F.multilabel_margin_loss(scores, labels).backward())
    # The worst case of 6 classes: floor(36 / 4) = 9 label pairs per sample.
    assert report["by_operator"]["aten.multilabel_margin_loss_forward"] == 4 * (6 + 4 * 9)
    x = torch.randn(1, 2, 8, 8, requires_grad=True)
    report = report_of(lambda: x.unfold(2, 3, 1).sum().backward())
    assert report["by_operator"]["aten.unfold_backward"] == 1 * 2 * 6 * 8 * 3
