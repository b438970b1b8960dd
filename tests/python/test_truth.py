"""Ground truth for the observation rule: each kernel that ran is counted once.

Every expected value is computed by hand from the shapes. The reference network is
Sequential(Linear(8, 16, bias=False), ReLU(), Linear(16, 4, bias=False)) on x = [2, 8]; the
constants below are its pieces.
"""

import functools

import pytest
import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.func import functional_call, grad, hessian, jacfwd, jacrev, jvp, vjp, vmap
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    checkpoint_sequential,
    create_selective_checkpoint_contexts,
    set_checkpoint_early_stop,
)
from torch.utils.flop_counter import FlopCounterMode

import torchscan
from torchscan.process import measure_peak_memory

MM1 = 2 * 2 * 8 * 16  # [2,8] @ [8,16] = 512
MM2 = 2 * 2 * 16 * 4  # [2,16] @ [16,4] = 256
RELU = 2 * 16  # one per element of [2,16] = 32
SUM = 2 * 4  # sum of the [2,4] output = 8
FORWARD = MM1 + MM2 + RELU  # 800
# Backward of sum(net(x)) with x not requiring grad: dR = dOut[2,4] @ W2[4,16] (256),
# dW2 = dOut^T[4,2] @ R[2,16] (256), threshold_backward on [2,16] (32), dW1 = dH^T[16,2] @ x[2,8] (512).
BACKWARD = 2 * 2 * 4 * 16 + 2 * 4 * 2 * 16 + 2 * 16 + 2 * 16 * 2 * 8  # 1056
STEP = FORWARD + SUM + BACKWARD  # 1864
MB = 1_000_000


def mlp():
    return nn.Sequential(nn.Linear(8, 16, bias=False), nn.ReLU(), nn.Linear(16, 4, bias=False))


def counted(workload, **kwargs):
    report = torchscan.measure_flops(workload, **kwargs)
    assert report["total"]["status"] == "complete", report["diagnostics"]
    assert report["diagnostics"] == []
    return report


def step_of(net, x, wrap=None):
    """zero_grad, forward (optionally through `wrap`), sum, backward."""

    def step():
        net.zero_grad()
        out = net(x) if wrap is None else wrap(net, x)
        out.sum().backward()

    return step


def test_reference_forward_and_training_step():
    net, x = mlp(), torch.randn(2, 8)
    with torch.no_grad():
        assert counted(lambda: net(x))["total"]["value"] == FORWARD == 800
    report = counted(step_of(net, x))
    assert report["total"]["value"] == STEP == 1864
    assert report["by_phase"]["backward"]["value"] == BACKWARD


# Rule 1: priced at its start, counted when it returns.


def test_an_operator_that_raises_is_not_counted():
    def workload():
        try:
            torch.mm(torch.randn(2, 3), torch.randn(4, 5))  # inner sizes 3 != 4: raises
        except RuntimeError:
            pass

    report = counted(workload)
    assert report["total"]["value"] == 0
    assert report["operator_calls"] == {}


def test_only_the_call_that_returned_is_counted():
    a, b = torch.randn(2, 3), torch.randn(3, 4)

    def workload():
        torch.mm(a, b)
        try:
            torch.mm(a, a)  # [2,3] @ [2,3]: raises
        except RuntimeError:
            pass

    report = counted(workload)
    assert report["total"]["value"] == 2 * 2 * 3 * 4  # the first [2,3] @ [3,4] only
    assert report["operator_calls"] == {"aten.mm": 1}


def test_checkpoint_early_stop_does_not_count_the_operator_it_stops_in():
    net, x = mlp(), torch.randn(2, 8)
    wrap = functools.partial(checkpoint, use_reentrant=False)
    report = counted(step_of(net, x, lambda n, t: wrap(n, t)))
    # Saved in order: x (mm1), relu's result, then mm2's inputs R and W2^T. Recomputation reruns
    # mm1 and relu; mm2 packs its inputs before its kernel runs, and the last pack raises the stop.
    assert report["total"]["value"] == STEP + MM1 + RELU == 2408
    assert report["by_phase"]["backward"]["value"] == BACKWARD + MM1 + RELU
    assert report["operator_calls"]["aten.mm"] == 2 + 1 + 3  # forward, recomputed mm1, backward
    assert report["operator_calls"]["aten.relu"] == 2
    # Without early stop the whole forward is rerun, mm2 included.
    with set_checkpoint_early_stop(False):
        assert counted(step_of(net, x, lambda n, t: wrap(n, t)))["total"]["value"] == STEP + FORWARD == 2664


def deep_mlp():
    return nn.Sequential(
        nn.Linear(8, 16, bias=False),
        nn.ReLU(),
        nn.Linear(16, 16, bias=False),
        nn.ReLU(),
        nn.Linear(16, 4, bias=False),
    )


def test_checkpoint_sequential():
    net, x = deep_mlp(), torch.randn(2, 8)
    mm1, mm2, mm3 = 2 * 2 * 8 * 16, 2 * 2 * 16 * 16, 2 * 2 * 16 * 4  # 512, 1024, 256
    relu = 2 * 16  # each ReLU on [2,16]
    forward = mm1 + mm2 + mm3 + 2 * relu + 2 * 4  # + the sum of [2,4]
    # dR2, dW3 (256 each), threshold_backward, dR1, dW2 (1024 each), threshold_backward, dW1 (512).
    backward = 2 * mm3 + relu + 2 * mm2 + relu + mm1
    plain = counted(step_of(net, x))["total"]["value"]
    assert plain == forward + backward == 5000
    # Two segments of 5 modules: [Linear, ReLU] is checkpointed, the rest runs plainly. The segment
    # saves x (mm1's input) and the ReLU's result: recomputation reruns mm1, then ReLU's kernel, and
    # the stop is raised from the pack hook of ReLU's result: ReLU does not return and is not counted.
    segments = lambda n, t: checkpoint_sequential(n, 2, t, use_reentrant=False)  # noqa: E731
    report = counted(step_of(net, x, segments))
    assert report["total"]["value"] == plain + mm1 == 5512
    assert report["operator_calls"]["aten.relu"] == 2
    with set_checkpoint_early_stop(False):
        assert counted(step_of(net, x, segments))["total"]["value"] == plain + mm1 + relu == 5544


def test_selective_checkpoint_serves_saved_operators_from_its_cache():
    net, x = mlp(), torch.randn(2, 8)

    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op == torch.ops.aten.mm.default else CheckpointPolicy.PREFER_RECOMPUTE

    context = functools.partial(create_selective_checkpoint_contexts, policy)
    sac = lambda n, t: checkpoint(n, t, use_reentrant=False, context_fn=context)  # noqa: E731
    report = counted(step_of(net, x, sac))
    # Only relu is recomputed; both mm are answered from the cache (no kernel, nothing counted).
    assert report["total"]["value"] == STEP + RELU == 1896
    assert report["operator_calls"]["aten.mm"] == 5


def test_hf_llama_gradient_checkpointing():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
        attn_implementation="eager",
        use_cache=False,
    )
    model = transformers.LlamaForCausalLM(config).train()
    ids = torch.randint(0, 64, (2, 8))

    def step():
        model.zero_grad()
        model(input_ids=ids, labels=ids).loss.backward()

    plain = counted(step)
    forward = counted(lambda: model(input_ids=ids, labels=ids).loss, modules=model)
    layers = [forward["by_module"][f"LlamaForCausalLM.model.layers.{i}"] for i in range(2)]
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ckpt = counted(step)
    # Each decoder layer is recomputed during backward up to its last saved tensor: down_proj's mm
    # packs its input [16,64] and weight before its kernel runs, so that mm (2*16*64*32) and the
    # residual add after it (16*32) are not recomputed.
    down_proj, residual = 2 * 16 * 64 * 32, 16 * 32
    recomputed = sum(layer - down_proj - residual for layer in layers)
    assert ckpt["by_phase"]["forward"]["value"] == plain["by_phase"]["forward"]["value"]
    assert ckpt["total"]["value"] == plain["total"]["value"] + recomputed
    with set_checkpoint_early_stop(False):
        full = counted(step)
    assert full["total"]["value"] == plain["total"]["value"] + sum(layers)  # the whole layer reruns
    assert ckpt["total"]["value"] < full["total"]["value"]


# Rule 3: calls from a claimed kernel's autograd layer are operators of their own.


def test_forward_ad_dual_tensors():
    net, x = mlp(), torch.randn(2, 8)

    def workload():
        with fwAD.dual_level():
            out = net(fwAD.make_dual(x, torch.ones_like(x)))
            assert fwAD.unpack_dual(out).tangent is not None

    report = counted(workload)
    # Each mm's tangent is dA @ B + A @ dB; the weight's zero tangent is materialized and its mm
    # runs: 3 products per mm. Tangent sums: add on [2,16] and [2,4]; relu's tangent is a
    # threshold_backward on [2,16].
    assert report["by_operator"] == {
        "aten.mm": 3 * (MM1 + MM2),  # 2304
        "aten.add": 2 * 16 + 2 * 4,
        "aten.relu": RELU,
        "aten.threshold_backward": 2 * 16,
    }
    assert report["total"]["value"] == 2408


def test_saved_tensors_hooks_count_in_the_module_that_saved():
    net, x = mlp(), torch.randn(2, 8)

    def workload():
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t * 2, lambda t: t / 2):
            net(x).sum()

    report = counted(workload, modules=net)
    # One mul per element saved: x [2,8] by mm1 (16), relu's result [2,16] (32), mm2's R [2,16]
    # (32) and W2^T [16,4] (64). (W1^T is not saved: x does not require grad.)
    assert report["by_operator"]["aten.mul"] == 16 + 32 + 32 + 64 == 144
    assert report["operator_calls"]["aten.mul"] == 4
    assert report["total"]["value"] == FORWARD + SUM + 144 == 952
    assert report["by_module"] == {
        "Sequential": FORWARD + 144,
        "Sequential.0": MM1 + 16,
        "Sequential.1": RELU + 32,
        "Sequential.2": MM2 + 32 + 64,
    }


# Rule 2: wrappers (dispatch modes, subclasses, torch.func transforms) are transparent.


def test_flop_counter_mode_outside_the_measurement():
    net, x = mlp(), torch.randn(2, 8)
    alone = counted(step_of(net, x))
    with FlopCounterMode(display=False) as fcm:
        report = counted(step_of(net, x))
    assert report["by_operator"] == alone["by_operator"]
    assert report["operator_calls"] == alone["operator_calls"]
    assert report["total"]["value"] == STEP
    assert fcm.get_total_flops() == 2 * MM1 + 3 * MM2  # its own count: the 5 mm, 512 + 256 + 256 + 256 + 512


def test_flop_counter_mode_inside_the_measurement():
    net, x = mlp(), torch.randn(2, 8)
    seen = []

    def workload():
        with FlopCounterMode(display=False) as fcm:
            step_of(net, x)()
        seen.append(fcm.get_total_flops())

    report = counted(workload)
    assert report["total"]["value"] == STEP
    assert report["operator_calls"] == counted(step_of(net, x))["operator_calls"]
    assert seen == [2 * MM1 + 3 * MM2]  # the 5 matrix products: 512 + 256 + 256 + 256 + 512


class Wrapped(torch.Tensor):
    """A wrapper subclass that unwraps, runs the op on the inner tensor, and wraps the result."""

    @staticmethod
    def __new__(cls, inner):
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype, device=inner.device)

    def __init__(self, inner):
        self.inner = inner

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        unwrap = lambda t: t.inner if isinstance(t, Wrapped) else t  # noqa: E731
        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))
        return tree_map(lambda t: Wrapped(t) if isinstance(t, torch.Tensor) else t, out)


def test_tensor_subclass_wrapper_is_transparent():
    a, b = Wrapped(torch.randn(3, 4)), Wrapped(torch.randn(4, 5))
    report = counted(lambda: torch.relu(a @ b))
    assert report["total"]["value"] == 2 * 3 * 4 * 5 + 3 * 5  # the inner mm and relu, once each
    assert report["operator_calls"] == {"aten.mm": 1, "aten.relu": 1}


class MatmulCache(TorchDispatchMode):
    """Answers a repeated mm on the same operands from a cache, without a kernel."""

    def __init__(self):
        super().__init__()
        self.cache = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.mm.default:
            key = (id(args[0]), id(args[1]))
            if key not in self.cache:
                self.cache[key] = func(*args)
            return self.cache[key]
        return func(*args, **(kwargs or {}))


def test_a_cache_hit_in_a_dispatch_mode_counts_nothing():
    a, b = torch.randn(3, 4), torch.randn(4, 5)

    def workload():
        with MatmulCache():
            for _ in range(3):
                a @ b

    report = counted(workload)
    assert report["total"]["value"] == 2 * 3 * 4 * 5  # one kernel ran; two calls were cache hits
    assert report["operator_calls"] == {"aten.mm": 1}


def test_jvp_matches_forward_ad():
    net, x = mlp(), torch.randn(2, 8)
    report = counted(lambda: jvp(net, (x,), (torch.ones_like(x),)))
    assert report["by_operator"]["aten.mm"] == 3 * (MM1 + MM2)  # primal + 2 tangent products per mm
    assert report["total"]["value"] == 2408


def without_basis(report, constructions=1):
    """The report's by_operator and total less the work that torch releases before 2.13 (make
    test-torch) do to build a transform's standard basis: per construction, a cumsum of the chunk
    sizes (one element, 1 FLOP) and a neg of an empty tensor (0), counted as they ran."""
    by_operator = dict(report["by_operator"])
    basis = {name: by_operator.pop(name) for name in ("aten.cumsum", "aten.neg") if name in by_operator}
    assert basis in ({}, {"aten.cumsum": constructions, "aten.neg": 0}), basis
    return by_operator, report["total"]["value"] - sum(basis.values())


def test_jacrev():
    net, x = mlp(), torch.randn(2, 8)
    report = counted(lambda: jacrev(net)(x))
    by_operator, total = without_basis(report)
    # Forward once, then one vmapped backward over the 8 output basis vectors (batch folded into mm):
    # dR [16,4] @ [4,16], threshold_backward on [8,2,16], dX [16,16] @ [16,8].
    assert by_operator == {
        "aten.mm": MM1 + MM2 + 2 * 16 * 4 * 16 + 2 * 16 * 16 * 8,
        "aten.relu": RELU,
        "aten.threshold_backward": 8 * 2 * 16,
    }
    assert total == 7200


def test_jacfwd():
    net, x = mlp(), torch.randn(2, 8)
    report = counted(lambda: jacfwd(net)(x))
    # Forward mode over the 16 basis tangents of x: per mm the primal, the (unbatched) product with
    # the weight's zero tangent, the batched tangent product, and the tangent sum.
    layer1 = MM1 + MM1 + 2 * 32 * 8 * 16 + 16 * 2 * 16  # [32,8] @ [8,16]; add on [16,2,16]
    relu = RELU + 16 * 2 * 16  # threshold_backward on the [16,2,16] tangents
    layer2 = MM2 + MM2 + 2 * 32 * 16 * 4 + 16 * 2 * 4  # [32,16] @ [16,4]; add on [16,2,4]
    by_operator, total = without_basis(report)
    assert total == layer1 + relu + layer2 == 15008
    assert by_operator["aten.mm"] == 13824


def test_vjp():
    net, x = mlp(), torch.randn(2, 8)
    report = counted(lambda: vjp(net, x)[1](torch.ones(2, 4)))
    # Forward, then dR [2,4] @ [4,16], threshold_backward on [2,16], dX [2,16] @ [16,8].
    assert report["operator_calls"] == {"aten.mm": 4, "aten.relu": 1, "aten.threshold_backward": 1}
    assert report["total"]["value"] == FORWARD + 2 * 2 * 4 * 16 + 2 * 16 + 2 * 2 * 16 * 8 == 1600


def test_functional_call_and_grad():
    net, x = mlp(), torch.randn(2, 8)
    params = dict(net.named_parameters())
    assert counted(lambda: functional_call(net, params, (x,)))["total"]["value"] == FORWARD

    def loss(p, inputs):
        return functional_call(net, p, (inputs,)).sum()

    # The training step's work, the parameter gradients included.
    assert counted(lambda: grad(loss)(params, x))["total"]["value"] == STEP


def test_per_sample_gradients_with_vmap_of_grad():
    net, x = mlp(), torch.randn(2, 8)
    params = dict(net.named_parameters())

    def loss(p, sample):
        return functional_call(net, p, (sample.unsqueeze(0),)).sum()

    report = counted(lambda: vmap(grad(loss), in_dims=(None, 0))(params, x))
    # The batch of 2 samples is folded into mm against the shared weights (mm1, mm2, dR), while the
    # per-sample weight gradients are bmm: dW2 [2,4,1] @ [2,1,16], dW1 [2,16,1] @ [2,1,8].
    assert report["by_operator"] == {
        "aten.mm": MM1 + MM2 + 2 * 2 * 4 * 16,  # 1024
        "aten.bmm": 2 * 2 * 4 * 1 * 16 + 2 * 2 * 16 * 1 * 8,  # 768
        "aten.relu": RELU,
        "aten.sum": SUM,
        "aten.threshold_backward": 2 * 16,
    }
    assert report["total"]["value"] == STEP == 1864


def test_hessian():
    net, x = mlp(), torch.randn(2, 8)
    report = counted(lambda: hessian(lambda t: net(t).sum())(x))
    # jacfwd(jacrev(f)) over the 16 basis tangents of x. Forward: each mm as in jacfwd (primal, zero-
    # tangent product, batched tangent product, tangent add); relu + its batched tangent; the sum and
    # its tangent sum over [16,2,4].
    forward = (MM1 + MM1 + 2 * 32 * 8 * 16 + 512) + (RELU + 512) + (MM2 + MM2 + 2 * 32 * 16 * 4 + 128) + (8 + 128)
    # Backward (one output, basis of size 1): dR = bmm [1,2,4] @ [1,4,16]; threshold_backward [1,2,16]
    # with its tangent (a threshold_backward on the materialized zero tangent, and an add on
    # [16,1,2,16]); dX [2,16] @ [16,8] as in jacfwd: primal, zero-tangent product, [32,16] @ [16,8],
    # add on [16,2,8].
    backward = 2 * 2 * 4 * 16 + (32 + 32 + 512) + (2 * MM1 + 2 * 32 * 16 * 8 + 256)
    assert without_basis(report, constructions=2)[1] == forward + backward == 25448


def test_is_grads_batched():
    net, x = mlp(), torch.randn(2, 8, requires_grad=True)

    def workload():
        out = net(x)
        torch.autograd.grad(out, x, torch.ones(3, 2, 4), is_grads_batched=True)

    report = counted(workload)
    # The 3 gradient rows are batched into the backward's mm: dR [6,4] @ [4,16], dX [6,16] @ [16,8].
    assert report["by_operator"]["aten.mm"] == MM1 + MM2 + 3 * (256 + 512)
    assert report["by_operator"]["aten.threshold_backward"] == 3 * 2 * 16
    assert report["total"]["value"] == FORWARD + 3 * (256 + 512) + 3 * 2 * 16 == 3200


def test_vmap_of_mm_counts_the_batched_kernel():
    a, b = torch.randn(1000, 4, 5), torch.randn(5, 3)
    report = counted(lambda: vmap(torch.mm, in_dims=(0, None))(a, b))
    assert report["total"]["value"] == 2 * 1000 * 4 * 5 * 3 == 120_000  # one mm on [4000,5] @ [5,3]
    assert report["operator_calls"] == {"aten.mm": 1}


def test_vmap_of_conv2d_over_images():
    images, weight = torch.randn(5, 3, 10, 10), torch.randn(6, 3, 3, 3)
    report = counted(lambda: vmap(F.conv2d, in_dims=(0, None))(images, weight))
    # One batched convolution: 5 images x 6 channels x 8x8 outputs, 3*3*3 MACs each.
    assert report["by_operator"] == {"aten.convolution": 2 * 5 * 6 * 8 * 8 * 3 * 3 * 3}  # 103_680
    assert report["total"]["value"] == counted(lambda: F.conv2d(images, weight))["total"]["value"]


# Rule 4: fake-tensor propagation is not work; meta tensors are.


def test_meta_device_model_is_counted():
    with torch.device("meta"):
        mlp_7b = nn.Sequential(nn.Linear(4096, 11008, bias=False), nn.SiLU(), nn.Linear(11008, 4096, bias=False))
        x = torch.empty(2, 16, 4096)
    report = counted(lambda: mlp_7b(x))
    # 32 tokens: up [32,4096] @ [4096,11008], SiLU on [32,11008], down [32,11008] @ [11008,4096].
    assert report["by_operator"] == {"aten.mm": 2 * (2 * 32 * 4096 * 11008), "aten.silu": 32 * 11008}


def test_fake_tensor_propagation_is_not_work():
    def workload():
        with FakeTensorMode():
            torch.relu(torch.empty(2, 8) @ torch.empty(8, 16))

    report = counted(workload)
    assert report["total"]["value"] == 0
    assert report["operator_calls"] == {}


def test_compiled_module_counts_its_kernels_not_its_tracing():
    net, x = mlp(), torch.randn(2, 8)
    compiled = torch.compile(net, backend="aot_eager")  # traces with fake tensors, runs ATen kernels
    report = counted(step_of(compiled, x))
    assert report["total"]["value"] == STEP  # first call: tracing included, counted once
    assert counted(step_of(compiled, x))["total"]["value"] == STEP


# Rule 5: sparse operands, priced by stored values.

DIAGONAL = torch.diag(torch.arange(1.0, 65.0))  # 64x64, 64 stored values
BLOCKS = 16 * 4 * 4  # blocked 4x4: the 16 diagonal blocks are stored, zeros inside included


@pytest.mark.parametrize(
    "layout, convert, stored",
    [
        ("sparse_coo", lambda d: d.to_sparse(), 64),
        ("sparse_csr", lambda d: d.to_sparse_csr(), 64),
        ("sparse_csc", lambda d: d.to_sparse_csc(), 64),
        ("sparse_bsr", lambda d: d.to_sparse_bsr((4, 4)), BLOCKS),
        ("sparse_bsc", lambda d: d.to_sparse_bsc((4, 4)), BLOCKS),
    ],
)
def test_sparse_matrix_products(layout, convert, stored):
    sparse, right, left = convert(DIAGONAL), torch.randn(64, 8), torch.randn(3, 64)
    assert sparse.values().numel() == stored
    # sparse[m,k] @ dense[k,n] = 2 * stored * n (BSC has no CPU kernel for this side).
    if layout != "sparse_bsc":
        assert counted(lambda: torch.mm(sparse, right))["total"]["value"] == 2 * stored * 8
        # addmm adds its input to the 64 x 8 outputs (the bias convention).
        addmm = counted(lambda: torch.addmm(torch.randn(64, 8), sparse, right))
        assert addmm["total"]["value"] == 2 * stored * 8 + 64 * 8
        assert counted(lambda: torch.mv(sparse, torch.randn(64)))["total"]["value"] == 2 * stored
    # dense[m,k] @ sparse[k,n] = 2 * m * stored (BSR has no CPU kernel for this side).
    if layout != "sparse_bsr":
        assert counted(lambda: torch.mm(left, sparse))["total"]["value"] == 2 * 3 * stored
    if layout in ("sparse_coo", "sparse_csr", "sparse_csc"):
        report = torchscan.measure_flops(lambda: torch.mm(sparse, sparse))  # sparse @ sparse
        assert report["total"]["status"] == "partial"
        assert report["total"]["known_value"] == 0
        [diagnostic] = report["diagnostics"]
        assert diagnostic["code"] == "formula_error"
        assert diagnostic["operator"] == "aten.mm"
        assert layout in diagnostic["message"]


def test_sparse_bmm_and_addmv():
    indices = torch.tensor([[0, 0, 0, 1, 1], [0, 2, 5, 1, 3], [1, 4, 0, 2, 2]])  # (batch, row, col)
    batched = torch.sparse_coo_tensor(indices, torch.ones(5), (2, 6, 5))
    # 5 stored values, each meets a row of 4 in the dense [2,5,4].
    assert counted(lambda: torch.bmm(batched, torch.randn(2, 5, 4)))["total"]["value"] == 2 * 5 * 4
    csr = DIAGONAL.to_sparse_csr()
    # addmv: 2 per stored value, and the bias added to the 64 outputs.
    assert counted(lambda: torch.addmv(torch.randn(64), csr, torch.randn(64)))["total"]["value"] == 2 * 64 + 64


@pytest.mark.parametrize("layout", ["sparse_coo", "sparse_csr"])
def test_other_operators_on_sparse_tensors_are_partial_and_name_the_layout(layout):
    sparse = DIAGONAL.to_sparse() if layout == "sparse_coo" else DIAGONAL.to_sparse_csr()
    report = torchscan.measure_flops(lambda: sparse * 2.0)
    assert report["total"]["status"] == "partial"
    assert report["total"]["value"] is None
    assert report["total"]["known_value"] == 0  # never the dense price 64*64
    [diagnostic] = report["diagnostics"]
    assert (diagnostic["code"], diagnostic["operator"]) == ("formula_error", "aten.mul")
    assert layout in diagnostic["message"]


# Rule 6: complex operands.


def test_complex_matrix_products_count_four_real_products_per_mac():
    a, b = torch.randn(4, 5, dtype=torch.cfloat), torch.randn(5, 3, dtype=torch.cfloat)
    # A complex multiply-accumulate is 4 real multiplies and 4 real adds: 4x the real count.
    assert counted(lambda: a @ b)["total"]["value"] == 4 * 2 * 4 * 5 * 3 == 480
    assert counted(lambda: torch.bmm(a[None], b[None]))["total"]["value"] == 480
    assert counted(lambda: torch.mv(a, b[:, 0].contiguous()))["total"]["value"] == 4 * 2 * 4 * 5
    assert counted(lambda: a.cdouble() @ b.cdouble())["total"]["value"] == 480


def test_complex_pointwise_counts_real_flops():
    a, b = torch.randn(4, 5, dtype=torch.cfloat), torch.randn(4, 5, dtype=torch.cfloat)
    # 20 complex elements. Per element: add 2, mul 6 (ac - bd, ad + bc), div 11, abs 4
    # (2 squares, an add, a root), exp 5 (e^a, cos b, sin b, 2 products); sum 2 per element.
    assert counted(lambda: a + b)["by_operator"] == {"aten.add": 40}
    assert counted(lambda: a * b)["by_operator"] == {"aten.mul": 120}
    assert counted(lambda: a / b)["by_operator"] == {"aten.div": 220}
    assert counted(lambda: a.abs())["by_operator"] == {"aten.abs": 80}
    assert counted(lambda: a.exp())["by_operator"] == {"aten.exp": 100}
    assert counted(lambda: a.sum())["by_operator"] == {"aten.sum": 40}
    c = a.clone()
    # In place, and by a real scalar (promoted: a complex multiply, 6 each).
    assert counted(lambda: c.mul_(2.0))["by_operator"] == {"aten.mul_": 120}


def test_complex_pointwise_without_a_stated_count_is_partial():
    a = torch.randn(4, 5, dtype=torch.cfloat)
    report = torchscan.measure_flops(lambda: torch.tanh(a))
    assert report["total"]["status"] == "partial"
    assert report["total"]["known_value"] == 0
    [diagnostic] = report["diagnostics"]
    assert (diagnostic["code"], diagnostic["operator"]) == ("formula_error", "aten.tanh")
    assert "complex operands" in diagnostic["message"]


def test_complex_conv2d_counts_the_real_convolutions_that_ran():
    x, w = torch.randn(1, 2, 5, 5, dtype=torch.cfloat), torch.randn(3, 2, 3, 3, dtype=torch.cfloat)
    report = counted(lambda: F.conv2d(x, w))
    # On the CPU conv2d decomposes a complex convolution into 3 real ones (Gauss's trick: a, b,
    # c = conv(xr + xi, wr + wi)), each 2 * 27 outputs * 2*3*3 MACs, and combines them as
    # a - b + 1j * (c - a - b): the real part sums 50 + 54 (add), 3 x 27 real subtracts, 27
    # multiplies by 1j (complex: 6 each) and the complex add of the parts (2 each).
    assert report["by_operator"] == {
        "aten.convolution": 3 * (2 * 3 * 3 * 3 * 2 * 3 * 3),
        "aten.add": 50 + 54 + 2 * 27,
        "aten.sub": 3 * 27,
        "aten.mul": 6 * 27,
    }


class _SpectralConv2d(nn.Module):
    """A Fourier neural operator's spectral convolution: rfft2, a complex product of the kept
    modes with complex weights, irfft2."""

    def __init__(self, channels, modes):
        super().__init__()
        self.modes = modes
        self.weight = nn.Parameter(torch.randn(channels, channels, modes, modes, dtype=torch.cfloat) * 0.1)

    def forward(self, x):
        m = self.modes
        x_ft = torch.fft.rfft2(x)
        out_ft = torch.zeros(*x.shape[:2], x.size(-2), x.size(-1) // 2 + 1, dtype=torch.cfloat)
        out_ft[:, :, :m, :m] = torch.einsum("bixy,ioxy->boxy", x_ft[:, :, :m, :m], self.weight)
        return torch.fft.irfft2(out_ft, s=(x.size(-2), x.size(-1)))


def test_fourier_neural_operator_is_complete_forward_and_training():
    torch.manual_seed(0)
    spectral, pointwise = _SpectralConv2d(4, 3), nn.Conv2d(4, 4, 1)
    x = torch.randn(2, 4, 8, 8)

    def forward():
        return F.gelu(spectral(x) + pointwise(x))

    with torch.no_grad():
        report = counted(forward)
    # rfft2 of [2, 4, 8, 8]: 512 elements x 5 x (log2 8 + log2 8) / 2 (real input) = 7,680;
    # irfft2 the same + its 1/n scaling, 1 per real output: 8,192. The kept modes' complex
    # product, a bmm over the 3 x 3 modes of [2, 4] @ [4, 4]: 4 x 2*9*2*4*4 = 2,304. The 1x1
    # convolution 2*512*4 = 4,096 and its bias (the bias convention) 1 per output element, 512;
    # the add and the GELU 512 each.
    assert report["by_operator"] == {
        "aten._fft_r2c": 7_680,
        "aten._fft_c2r": 8_192,
        "aten.bmm": 2_304,
        "aten.convolution": 4_096 + 512,
        "aten.add": 512,
        "aten.gelu": 512,
    }
    report = counted(lambda: forward().square().mean().backward())
    assert report["by_phase"]["backward"]["value"] > 0
    # irfft2's backward is an rfft2 whose inner one-sided columns (3 of the 5) are doubled in
    # place: a complex value times 2, a complex multiply, 6 each: 6 x 2*4*8*3 = 1,152.
    assert report["by_operator"]["aten.mul_"] == 6 * 2 * 4 * 8 * 3


# Rule 7: CPU peak memory follows the blocks allocated during this measurement.


def test_cpu_peak_of_the_same_training_step_twice():
    layer, x = nn.Linear(1000, 1000, bias=False), torch.randn(1, 1000)

    def step():
        layer.zero_grad(set_to_none=True)  # from the 2nd run on, frees a block of the run before
        layer(x).sum().backward()

    first = measure_peak_memory(step, device="cpu")
    second = measure_peak_memory(step, device="cpu")
    # At the peak: the weight gradient (1000x1000 float32), the contiguous copy of the expanded
    # [1000,1] output gradient that mm takes, the sum and its seed gradient (4 bytes each).
    expected = 1000 * 1000 * 4 + 1000 * 4 + 4 + 4
    assert first["peak_bytes"] == second["peak_bytes"] == expected == 4_004_008
    assert first["delta_bytes"] == second["delta_bytes"] == expected


def test_cpu_peak_ignores_frees_of_blocks_from_an_earlier_measurement():
    kept = []
    first = measure_peak_memory(lambda: kept.extend([torch.empty(1_000_000), torch.empty(250_000)]), device="cpu")
    assert first["peak_bytes"] == 4 * MB + MB  # two float32 blocks kept alive

    def second_workload():
        kept.clear()  # frees 5 MB allocated during the first measurement
        torch.empty(500_000)  # 2 MB

    assert measure_peak_memory(second_workload, device="cpu")["peak_bytes"] == 2 * MB == 2_000_000


def test_a_wrapper_call_that_raises_after_its_kernel_ran_is_not_counted():
    """Rule 1 at the wrapper's level: the mode runs the kernel, then the call raises (as selective
    checkpointing's stop does from the pack hook): the call did not deliver, its kernel's count is
    taken back; a later call counts as usual."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class RaiseAfterMm(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func is torch.ops.aten.mm.default:
                raise RuntimeError("stopped after the kernel")
            return out

    a, b = torch.randn(3, 4), torch.randn(4, 5)

    def work():
        with RaiseAfterMm():
            try:
                torch.mm(a, b)
            except RuntimeError:
                pass
            torch.add(a, a)

    report = torchscan.measure_flops(work)
    assert (report["total"]["status"], report["total"]["value"]) == ("complete", 3 * 4)  # the add only
    assert report["operator_calls"] == {"aten.add": 1}
