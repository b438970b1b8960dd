"""Module -> plain descriptor for the native module formulas (src/modules/).

Python only reads attributes and shapes here; every number is computed in the Rust core.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.conv import _ConvNd, _ConvTransposeNd
from torch.nn.modules.dropout import _DropoutNd
from torch.nn.modules.instancenorm import _InstanceNorm
from torch.nn.modules.padding import _CircularPadNd, _ConstantPadNd, _ReflectionPadNd, _ReplicationPadNd
from torch.nn.modules.pooling import _AdaptiveAvgPoolNd, _AdaptiveMaxPoolNd, _AvgPoolNd, _MaxPoolNd, _MaxUnpoolNd

__all__ = ["describe", "family", "first_tensor"]

_ACTIVATIONS: tuple[tuple[type[nn.Module], str], ...] = (
    (nn.ReLU, "relu"),
    (nn.ELU, "elu"),
    (nn.LeakyReLU, "leaky_relu"),
    (nn.ReLU6, "relu6"),
    (nn.Tanh, "tanh"),
    (nn.Sigmoid, "sigmoid"),
    (nn.SiLU, "silu"),
    (nn.Hardswish, "hardswish"),
    (nn.Hardsigmoid, "hardsigmoid"),
    (nn.Softplus, "softplus"),
    (nn.Mish, "mish"),
)

# Hugging Face's activation modules (`transformers.activations`), by class name: each is a
# module-level class whose forward is the function named.
_HF_ACTIVATIONS: dict[str, str] = {
    "GELUActivation": "gelu",
    "NewGELUActivation": "gelu_tanh",
    "FastGELUActivation": "gelu_tanh",
    "AccurateGELUActivation": "gelu_tanh",
    "PytorchGELUTanh": "gelu_tanh",
    "GELUTanh": "gelu_tanh",
    "QuickGELUActivation": "quick_gelu",
    "ClippedGELUActivation": "clipped_gelu",
    "SiLUActivation": "silu",
    "MishActivation": "mish",
}

# Hugging Face rotary embeddings whose forward is Llama's (cos and sin of positions times the
# inverse frequencies, scaled), with the default RoPE (other types may recompute frequencies).
_HF_ROTARY = frozenset(
    {
        "LlamaRotaryEmbedding",
        "MistralRotaryEmbedding",
        "MixtralRotaryEmbedding",
        "Qwen2RotaryEmbedding",
        "Qwen2MoeRotaryEmbedding",
        "Qwen3RotaryEmbedding",
        "Qwen3MoeRotaryEmbedding",
        "Phi3RotaryEmbedding",
    }
)

# Hugging Face RMS norms whose forward is `weight * x / sqrt(mean(x^2) + eps)` (Gemma's, which
# scales by `1 + weight`, is not one of them).
_HF_RMS_NORMS = frozenset(
    {
        "LlamaRMSNorm",
        "MistralRMSNorm",
        "MixtralRMSNorm",
        "Qwen2RMSNorm",
        "Qwen2MoeRMSNorm",
        "Qwen3RMSNorm",
        "Qwen3MoeRMSNorm",
        "Phi3RMSNorm",
        "T5LayerNorm",
    }
)


def _hugging_face(module: nn.Module) -> dict[str, Any] | None:
    """Descriptors of the Hugging Face modules with a known forward (by class and module name)."""
    cls = type(module)
    if not cls.__module__.startswith("transformers."):
        return None
    name = cls.__name__
    if name in _HF_ACTIVATIONS and cls.__module__ == "transformers.activations":
        return {"family": "activation", "kind": _HF_ACTIVATIONS[name], "inplace": False}
    weight = module._parameters.get("weight")
    if name in _HF_RMS_NORMS and weight is not None and weight.ndim == 1:
        return {"family": "rms_norm", "normalized": weight.numel(), "weight": weight.numel()}
    inv_freq = module._buffers.get("inv_freq")
    if name in _HF_ROTARY and getattr(module, "rope_type", None) == "default" and inv_freq is not None:
        return {"family": "rotary_embedding", "dim": 2 * inv_freq.numel()}
    # GPT-2's Conv1D: `x @ weight + bias` with weight [in, out], a Linear with its weight transposed.
    if name == "Conv1D" and weight is not None and weight.ndim == 2:
        bias = module._parameters.get("bias")
        return {
            "family": "linear",
            "in_features": weight.shape[0],
            "out_features": weight.shape[1],
            "bias": bias is not None,
            "num_params": _num_params(module),
        }
    return None


def first_tensor(value: Any, _seen: set[int] | None = None) -> torch.Tensor | None:
    """The first tensor, depth first through tuples, lists and mapping values (each container
    once: a container that holds itself is not walked again)."""
    if isinstance(value, torch.Tensor):
        return value
    items = value.values() if isinstance(value, Mapping) else value if isinstance(value, (tuple, list)) else ()
    if not items:
        return None
    seen = set() if _seen is None else _seen
    if id(value) in seen:
        return None
    seen.add(id(value))
    for item in items:
        found = first_tensor(item, seen)
        if found is not None:
            return found
    return None


def _shape(tensor: torch.Tensor | None) -> list[int] | None:
    return None if tensor is None else list(tensor.shape)


def _ints(value: Any) -> list[int]:
    return list(value) if isinstance(value, (tuple, list)) else [int(value)]


def _numel(tensor: torch.Tensor | None) -> int | None:
    return None if tensor is None else tensor.numel()


def _rank(module: nn.Module) -> int:
    name = type(module).__name__
    return 3 if name.endswith("3d") else 2 if name.endswith("2d") else 1


def _num_params(module: nn.Module) -> int:
    """Every parameter the module registers, recursively (a leaf's own dict is the fast path)."""
    if not module._modules:
        return sum(p.numel() for p in module._parameters.values() if p is not None)
    return sum(p.numel() for p in module.parameters())


def _group_norm(module: nn.Module, groups: int) -> dict[str, Any]:
    params = module._parameters
    return {
        "family": "group_norm",
        "groups": groups,
        "weight": _numel(params.get("weight")),
        "bias": _numel(params.get("bias")),
    }


# Channel-wise dropouts: the spatial rank their noise is constant over.
_DROPOUT_SPATIAL: dict[type, int] = {nn.Dropout1d: 1, nn.Dropout2d: 2, nn.Dropout3d: 3}

# Input values weighted per output element by `nn.Upsample`'s interpolating modes.
_INTERPOLATION_TAPS = {"linear": 2, "bilinear": 4, "bicubic": 16, "trilinear": 8}


def family(module: nn.Module) -> dict[str, Any]:
    if isinstance(module, nn.Identity):
        return {"family": "identity"}
    if isinstance(module, nn.Flatten):
        return {"family": "flatten"}
    if isinstance(module, nn.Linear):
        return {
            "family": "linear",
            "in_features": module.in_features,
            "out_features": module.out_features,
            "bias": module.bias is not None,
            "num_params": _num_params(module),
        }
    for cls, kind in _ACTIVATIONS:
        if isinstance(module, cls):
            return {"family": "activation", "kind": kind, "inplace": bool(getattr(module, "inplace", False))}
    if isinstance(module, nn.GELU):
        return {"family": "activation", "kind": "gelu_tanh" if module.approximate == "tanh" else "gelu"}
    if isinstance(module, nn.PReLU):
        return {"family": "activation", "kind": "prelu", "weights": _numel(module._parameters.get("weight")) or 0}
    if isinstance(module, _ConvTransposeNd):
        return {
            "family": "conv_transpose",
            "in_channels": module.in_channels,
            "out_channels": module.out_channels,
            "groups": module.groups,
            "kernel_size": _ints(module.kernel_size),
            "stride": _ints(module.stride),
            "bias": module.bias is not None,
            "num_params": _num_params(module),
        }
    if isinstance(module, _ConvNd):
        padding = module.padding if isinstance(module.padding, str) else _ints(module.padding)
        return {
            "family": "conv",
            "in_channels": module.in_channels,
            "groups": module.groups,
            "kernel_size": _ints(module.kernel_size),
            "stride": _ints(module.stride),
            "padding": padding,
            "dilation": _ints(module.dilation),
            "bias": module.bias is not None,
            "num_params": _num_params(module),
        }
    if isinstance(module, _BatchNorm):
        # The registries directly: `module.weight` goes through nn.Module.__getattr__, and
        # crawl_module describes every normalization layer of the model.
        params, buffers = module._parameters, module._buffers
        return {
            "family": "batch_norm",
            "num_features": module.num_features,
            "affine": module.affine,
            "weight": _numel(params.get("weight")),
            "bias": _numel(params.get("bias")),
            "running_mean": _numel(buffers.get("running_mean")),
            "running_var": _numel(buffers.get("running_var")),
            "track_running_stats": module.track_running_stats,
            "training": module.training,
            "momentum": module.momentum is not None,
        }
    if isinstance(module, (_MaxPoolNd, _AvgPoolNd)):
        kernel = _ints(module.kernel_size)
        stride = _ints(module.stride) if module.stride is not None else kernel
        descriptor = {
            "family": "max_pool" if isinstance(module, _MaxPoolNd) else "avg_pool",
            "rank": _rank(module),
            "kernel_size": kernel,
            "stride": stride,
            "padding": _ints(module.padding),
        }
        if isinstance(module, _MaxPoolNd):
            descriptor["dilation"] = _ints(module.dilation)
            descriptor["return_indices"] = module.return_indices
        return descriptor
    if isinstance(module, (_AdaptiveMaxPoolNd, _AdaptiveAvgPoolNd)):
        maximum = isinstance(module, _AdaptiveMaxPoolNd)
        return {
            "family": "adaptive_max_pool" if maximum else "adaptive_avg_pool",
            "rank": _rank(module),
            "return_indices": bool(getattr(module, "return_indices", False)),
        }
    if isinstance(module, _DropoutNd):
        # Element-wise, or channel-wise: constant over the spatial dimensions (Dropout1d/2d/3d),
        # or per [N, C] (FeatureAlphaDropout).
        return {
            "family": "dropout",
            "p": float(module.p),
            "training": module.training,
            "inplace": module.inplace,
            "spatial": _DROPOUT_SPATIAL.get(type(module), 0),
            "leading": 2 if isinstance(module, nn.FeatureAlphaDropout) else 0,
            "alpha": isinstance(module, (nn.AlphaDropout, nn.FeatureAlphaDropout)),
        }
    if isinstance(module, nn.RNNBase) and module.mode in ("LSTM", "GRU", "RNN_TANH", "RNN_RELU"):
        return {
            "family": "recurrent",
            "mode": module.mode.lower(),
            "input_size": module.input_size,
            "hidden_size": module.hidden_size,
            "num_layers": module.num_layers,
            "bidirectional": module.bidirectional,
            "bias": module.bias,
            "proj_size": module.proj_size,
            "num_params": _num_params(module),
        }
    if isinstance(module, nn.GroupNorm):
        return _group_norm(module, module.num_groups)
    if isinstance(module, _InstanceNorm) and not module.track_running_stats:
        # The input's statistics, one group per channel (with running statistics, an instance norm
        # also updates or reads them: no formula).
        return _group_norm(module, module.num_features)
    if isinstance(module, (_ConstantPadNd, _ReflectionPadNd, _ReplicationPadNd, _CircularPadNd)):
        pads = set(_ints(module.padding))
        return {"family": "movement", "padding": pads.pop() if len(pads) == 1 else None}
    if isinstance(module, (nn.PixelShuffle, nn.PixelUnshuffle, nn.ChannelShuffle)):
        return {"family": "movement", "padding": None}
    if isinstance(module, nn.Unflatten):
        return {"family": "movement", "padding": 0}
    if isinstance(module, nn.Upsample) and module.mode in ("nearest", "nearest-exact"):
        return {"family": "movement", "padding": None}
    if isinstance(module, nn.Upsample) and module.mode in _INTERPOLATION_TAPS:
        return {"family": "interpolate", "taps": _INTERPOLATION_TAPS[module.mode]}
    if isinstance(module, _MaxUnpoolNd):
        # Values placed at their indices in a zero-filled output: no arithmetic.
        return {"family": "movement", "padding": None}
    if type(module) in (nn.Softmax, nn.LogSoftmax, nn.Softmin):
        return {"family": "softmax", "negate": type(module) is nn.Softmin}
    if type(module) is nn.Embedding:
        return {"family": "embedding", "max_norm": module.max_norm is not None}
    if type(module) is nn.RMSNorm:
        weight = module._parameters.get("weight")
        return {"family": "rms_norm", "normalized": math.prod(module.normalized_shape), "weight": _numel(weight)}
    if isinstance(module, nn.LayerNorm):
        return {
            "family": "layer_norm",
            "normalized_shape": list(module.normalized_shape),
            "weight": _numel(module.weight),
            "bias": _numel(module.bias),
            "exact_type": type(module) is nn.LayerNorm,
        }
    return _hugging_face(module) or {"family": "unsupported", "type": type(module).__name__}


def _attention_params(module: nn.MultiheadAttention) -> dict[str, Any]:
    """The module's own attributes (also what a transformer layer's attention is priced with)."""
    return {
        "embed_dim": module.embed_dim,
        "num_heads": module.num_heads,
        "head_dim": module.head_dim,
        "batch_first": module.batch_first,
        "in_proj_bias": module.in_proj_bias is not None,
        "out_proj_in_features": module.out_proj.in_features,
        "out_proj_bias": module.out_proj.bias is not None,
        "bias_kv": module.bias_k is not None or module.bias_v is not None,
        "add_zero_attn": module.add_zero_attn,
        "dropout": float(module.dropout),
        "training": module.training,
    }


def _attention(module: nn.MultiheadAttention, inputs: tuple[Any, ...], out: Any) -> dict[str, Any]:
    """MultiheadAttention's call, in forward-signature order: query, key, value,
    key_padding_mask, need_weights, attn_mask, average_attn_weights, is_causal."""
    padded = tuple(inputs) + (None,) * max(0, 8 - len(inputs))
    query, key, value, key_padding_mask, need_weights, attn_mask, average = padded[:7]
    weights = out[1] if isinstance(out, (tuple, list)) and len(out) > 1 else None
    return {
        "family": "multihead_attention",
        **_attention_params(module),
        "query": _shape(first_tensor(query)) or [],
        "key": _shape(first_tensor(key)) or [],
        "value": _shape(first_tensor(value)) or [],
        "key_padding_mask": _numel(key_padding_mask) if isinstance(key_padding_mask, torch.Tensor) else None,
        "attn_mask": _numel(attn_mask) if isinstance(attn_mask, torch.Tensor) else None,
        "need_weights": True if need_weights is None else bool(need_weights),
        "average_attn_weights": True if average is None else bool(average),
        "averaged_weights_returned": isinstance(weights, torch.Tensor) and weights.ndim == 3,
    }


def _layer_norm(norm: nn.Module | None) -> dict[str, Any] | None:
    if norm is None:
        return None
    if type(norm) is not nn.LayerNorm:
        raise _NotNative
    return {
        "normalized_shape": list(norm.normalized_shape),
        "weight": _numel(norm.weight),
        "bias": _numel(norm.bias),
        "exact_type": True,
    }


class _NotNative(Exception):
    """A transformer built from other parts than PyTorch's own (priced as unsupported)."""


def _linear(linear: nn.Linear) -> dict[str, Any]:
    return {
        "in_features": linear.in_features,
        "out_features": linear.out_features,
        "bias": linear.bias is not None,
        "num_params": _num_params(linear),
    }


def _transformer_layer(layer: nn.Module, decoder: bool) -> dict[str, Any]:
    expected = nn.TransformerDecoderLayer if decoder else nn.TransformerEncoderLayer
    if type(layer) is not expected:
        raise _NotNative
    activation = layer.activation
    names = {F.relu: "relu", F.gelu: "gelu"}
    blocks = 3 if decoder else 2
    return {
        "self_attn": _attention_params(layer.self_attn),
        "multihead_attn": _attention_params(cast(nn.MultiheadAttention, layer.multihead_attn)) if decoder else None,
        "linear1": _linear(layer.linear1),
        "linear2": _linear(layer.linear2),
        "activation": names.get(activation, "other"),
        "norms": [_layer_norm(getattr(layer, f"norm{i + 1}")) for i in range(blocks)],
        "dropout": {"p": float(layer.dropout.p), "training": layer.dropout.training},
        "residual_dropouts": [
            {"p": float(d.p), "training": d.training}
            for d in (getattr(layer, f"dropout{i + 1}") for i in range(blocks))
        ],
    }


def _transformer(module: nn.Transformer, inputs: tuple[Any, ...]) -> dict[str, Any]:
    """A root nn.Transformer's call: src, tgt, then the six masks (slots 2-7)."""
    padded = tuple(inputs) + (None,) * max(0, 8 - len(inputs))
    src, tgt = first_tensor(padded[0]), first_tensor(padded[1])
    try:
        return {
            "family": "transformer",
            "encoder_layers": [_transformer_layer(layer, False) for layer in module.encoder.layers],
            "encoder_norm": _layer_norm(module.encoder.norm),
            "decoder_layers": [_transformer_layer(layer, True) for layer in module.decoder.layers],
            "decoder_norm": _layer_norm(module.decoder.norm),
            "src": _shape(src) or [],
            "tgt": _shape(tgt) or [],
            "masks": [isinstance(mask, torch.Tensor) for mask in padded[2:8]],
        }
    except (_NotNative, AttributeError):
        return {"family": "unsupported", "type": type(module).__name__}


def describe(module: nn.Module, inputs: tuple[Any, ...], out: Any, *, attention: bool) -> dict[str, Any]:
    """The descriptor of one call. ``inputs``: the forward arguments in signature order; ``out``:
    the whole output. ``attention=False`` describes MultiheadAttention as unsupported (its MACs,
    DMAs and receptive field need the whole call, which the single-tensor functions lack)."""
    if isinstance(module, (nn.MultiheadAttention, nn.Transformer)):
        if not attention:
            return {"family": "unsupported", "type": type(module).__name__}
        if isinstance(module, nn.Transformer):
            return _transformer(module, inputs)
        return _attention(module, inputs, out)
    descriptor = family(module)
    descriptor["input"] = _shape(first_tensor(inputs))
    descriptor["output"] = _shape(first_tensor(out))
    return descriptor
