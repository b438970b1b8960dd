"""Whole loops end to end on small random-weight configurations (issue 21): text generation
(greedy, sampling, beam search, static cache; decoder-only, speech-to-text and a state-space
model), a mixed-precision training step with GradScaler, gradient clipping and a fused optimizer,
a graph neural network and a CTC training step. Each report is complete and its breakdowns add
up; the matrix work of one generation loop and of the GNN is checked against hand-computed
values; backward work is booked to the module whose forward created it, through custom autograd
Functions, in-place updates of views and shared layers."""

import pytest
import torch
from torch import nn

import torchscan

transformers = pytest.importorskip("transformers")


def checked(report):
    """The report is complete and every breakdown sums to the total."""
    assert report["total"]["status"] == "complete", report["diagnostics"]
    total = report["total"]["value"]
    assert sum(report["by_operator"].values()) == total
    assert sum(report["by_category"].values()) == total
    assert sum(phase["value"] for phase in report["by_phase"].values()) == total
    return report


def llama():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=64,
        vocab_size=100,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    return transformers.LlamaForCausalLM(config).eval()


def test_greedy_generation_by_hand():
    model, prompt = llama(), torch.randint(3, 100, (1, 6))
    with torch.no_grad():
        report = checked(
            torchscan.measure_flops(lambda: model.generate(prompt, max_new_tokens=5, min_new_tokens=5, do_sample=False))
        )
    # Per token and layer the projections q 32x32, k and v 32x16, o 32x32, gate and up 32x64,
    # down 64x32: 9,216 multiply-accumulates; 2 layers on 10 tokens (a 6-token prefill, then 4
    # cached steps), and the LM head (32x100) on the last token of each of the 5 steps.
    assert report["by_category"]["matmul"] == 2 * (10 * 2 * 9216 + 5 * 3200) == 400_640
    # Attention, 2 heads of 16: the prefill 2 x (2 x 2 x 6 x 6 x 16) per layer; each cached step
    # 2 x (2 x 2 x L x 16) for L = 7..10 keys; 2 layers.
    prefill, cached = 2 * (2 * 2 * 6 * 6 * 16), sum(2 * (2 * 2 * length * 16) for length in range(7, 11))
    assert report["by_category"]["attention"] == 2 * (prefill + cached) == 17_920


@pytest.mark.parametrize(
    "options",
    [
        {"do_sample": True, "top_k": 10, "top_p": 0.9, "temperature": 0.7},
        {"num_beams": 3},
        {"cache_implementation": "static"},
    ],
    ids=["sampling", "beam_search", "static_cache"],
)
def test_generation_strategies_are_complete(options):
    model, prompt = llama(), torch.randint(3, 100, (1, 6))
    with torch.no_grad():
        checked(torchscan.measure_flops(lambda: model.generate(prompt, max_new_tokens=4, **options)))


def test_speech_to_text_generation_is_complete():
    torch.manual_seed(0)
    config = transformers.WhisperConfig(
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        num_mel_bins=16,
        max_source_positions=32,
        max_target_positions=32,
        vocab_size=100,
        decoder_start_token_id=1,
        pad_token_id=0,
        eos_token_id=2,
        bos_token_id=1,
    )
    model = transformers.WhisperForConditionalGeneration(config).eval()
    with torch.no_grad():
        checked(torchscan.measure_flops(lambda: model.generate(torch.randn(1, 16, 64), max_new_tokens=4)))


def test_mixed_precision_step_with_grad_scaler_clipping_and_a_fused_optimizer():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
    optimizer = torch.optim.AdamW(model.parameters(), fused=True)
    scaler = torch.amp.GradScaler("cpu")
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))

    def step():
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        torch.nn.utils.clip_grad_value_(model.parameters(), 0.5)
        scaler.step(optimizer)
        scaler.update()

    step()
    report = checked(torchscan.measure_flops(step))
    parameters = sum(p.numel() for p in model.parameters())
    assert report["by_operator"]["aten._fused_adamw_"] == 14 * parameters
    assert report["by_operator"]["aten._amp_foreach_non_finite_check_and_unscale_"] == 2 * parameters


def test_graph_neural_network_by_hand():
    geometric = pytest.importorskip("torch_geometric.nn")
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.gcn = geometric.GCNConv(8, 16)
            self.gat = geometric.GATConv(16, 16, heads=2)
            self.sage = geometric.SAGEConv(32, 8)

        def forward(self, x, edges, batch):
            h = self.sage(self.gat(self.gcn(x, edges).relu(), edges).relu(), edges)
            return geometric.global_mean_pool(h, batch)

    net = Net()
    x, edges, batch = torch.randn(10, 8), torch.randint(0, 10, (2, 30)), torch.tensor([0] * 5 + [1] * 5)
    with torch.no_grad():
        report = checked(torchscan.measure_flops(lambda: net(x, edges, batch), modules=net))
    # 10 nodes: GCN 8->16, GAT 16->2x16, SAGE's two 32->8 maps: 2 x 10 x (128 + 512 + 2 x 256), and
    # SAGE's lin_l adds its bias inside its addmm (10 x 8, the bias convention; GCN adds its own
    # separately, GAT's and lin_r have none).
    assert report["by_category"]["matmul"] == 2 * 10 * (8 * 16 + 16 * 32 + 2 * 32 * 8) + 10 * 8 == 23_120
    assert report["by_module"]["Net"] == report["total"]["value"]
    training = checked(torchscan.measure_flops(lambda: net(x, edges, batch).sum().backward(), modules=net))
    assert training["by_phase"]["backward"]["value"] > 0
    # Every FLOP of the step goes to the network but the loss's sum over its [2, 8] output, taken
    # outside it (the backward of the scatters and gathers included).
    assert training["by_module"]["Net"] == training["total"]["value"] - 16


def test_state_space_generation_is_complete():
    torch.manual_seed(0)
    config = transformers.MambaConfig(
        vocab_size=64, hidden_size=32, state_size=8, num_hidden_layers=2, expand=2, conv_kernel=4
    )
    model = transformers.MambaForCausalLM(config).eval()
    prompt = torch.randint(0, 64, (1, 5))
    report = checked(
        torchscan.measure_flops(lambda: model.generate(prompt, max_new_tokens=4, do_sample=False), modules=model)
    )
    # The reference selective scan and causal convolution run as ATen operators, all priced.
    assert report["by_module"]["MambaForCausalLM.backbone.layers.1.mixer"] > 0
    assert report["by_category"]["matmul"] > 0


class Speech(nn.Module):
    """An LSTM acoustic model that computes its own CTC loss."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lstm, self.head = nn.LSTM(8, 16), nn.Linear(16, 6)

    def forward(self, x, targets, input_lengths, target_lengths):
        log_probs = self.head(self.lstm(x)[0]).log_softmax(2)
        return nn.functional.ctc_loss(log_probs, targets, input_lengths, target_lengths)


def test_ctc_training_step_is_complete_and_booked_to_the_model():
    model = Speech()
    time_steps, batch, labels = 20, 2, 5
    x, targets = torch.randn(time_steps, batch, 8), torch.randint(1, 6, (batch, labels))
    lengths, target_lengths = torch.full((batch,), time_steps), torch.full((batch,), labels)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def step():
        optimizer.zero_grad()
        model(x, targets, lengths, target_lengths).backward()
        optimizer.step()

    step()
    report = checked(torchscan.measure_flops(step, modules=model))
    # Each sequence's lattice: 20 steps x (2 x 5 + 1) states = 220 cells, 13 FLOPs each forward;
    # backward 26 per cell and 3 per log-probability (20 x 2 x 6).
    assert report["by_operator"]["aten._ctc_loss"] == 2 * 220 * 13
    assert report["by_operator"]["aten._ctc_loss_backward"] == 2 * 220 * 26 + 240 * 3
    # Everything but the optimizer step (outside the model: SGD's update, 1 FLOP per parameter
    # element) is the model's, backward of the LSTM and of the loss included.
    parameters = sum(p.numel() for p in model.parameters())
    assert report["by_module"]["Speech"] == report["total"]["value"] - parameters


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


class CustomFunction(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return Square.apply(self.fc(x)).sum()


class InPlaceOnView(nn.Module):
    """An in-place update of a view: autograd's CopySlices and view nodes, which no operator call
    announces, and the engine's sum of the two gradients that meet."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        z = self.fc(x).clone()
        z[:, 0] += 1
        return z.sum()


class SharedLayer(nn.Module):
    """One layer used twice: the engine accumulates its gradients."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return (self.fc(x) + self.fc(x).relu()).sum()


@pytest.mark.parametrize("model_class", [CustomFunction, InPlaceOnView, SharedLayer])
def test_backward_work_is_booked_to_the_module_whose_forward_created_it(model_class):
    torch.manual_seed(0)
    model, x = model_class(), torch.randn(3, 4)
    report = checked(torchscan.measure_flops(lambda: model(x).backward(), modules=model))
    assert report["by_phase"]["backward"]["value"] > 0
    assert report["by_module"][model_class.__name__] == report["total"]["value"]


def test_a_custom_functions_backward_goes_to_its_module_by_hand():
    torch.manual_seed(0)
    model, x = CustomFunction(), torch.randn(3, 4)
    report = checked(torchscan.measure_flops(lambda: model(x).backward(), modules=model))
    # Square's forward x * x (12) and its backward 2 * x * grad (24); the layer's addmm (96 and 12
    # bias adds), its weight gradient (96; x needs none) and bias gradient sum (12); the loss's sum (12).
    assert report["by_operator"]["aten.mul"] == 36
    assert report["by_module"]["CustomFunction.fc"] == 96 + 12 + 96 + 12
    assert report["total"]["value"] == 36 + 96 + 12 + 96 + 12 + 12
