"""The model zoo: real architectures from torchvision, timm and transformers, built with random
weights (nothing is downloaded), small inputs, and the two workloads people measure: inference
(eval, no_grad) and one training step (forward, loss, backward, an SGD step and an AdamW step,
both with the `_foreach_*` kernels).

Used by `test_model_zoo.py` and by `benches/zoo_table.py` (the coverage table). Small custom
configurations stand in for the big variants where the operator set is the same (a 2-layer ViT
runs the same operators as ViT-B/16).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

Batch = tuple[tuple[Any, ...], dict[str, Any]]


@dataclass(frozen=True)
class Model:
    name: str
    package: str  # "torchvision", "timm" or "transformers": skipped when absent
    build: Callable[[], nn.Module]
    batch: Callable[[torch.dtype], Batch]
    loss: Callable[[Any, Batch], torch.Tensor]
    slow: bool = False


def available(package: str) -> bool:
    return importlib.util.find_spec(package) is not None


# ---- inputs and losses ----


def images(size: int, batch: int = 2) -> Callable[[torch.dtype], Batch]:
    return lambda dtype: ((torch.rand(batch, 3, size, size, dtype=dtype),), {})


def tokens(length: int = 8, batch: int = 2, vocab: int = 96, **extra: Callable[[], torch.Tensor]):
    def build(dtype: torch.dtype) -> Batch:
        ids = torch.randint(1, vocab, (batch, length))
        kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": torch.ones(batch, length, dtype=torch.long)}
        kwargs.update({key: make() for key, make in extra.items()})
        return (), kwargs

    return build


def logits_loss(output: Any, batch: Batch) -> torch.Tensor:
    logits = output if isinstance(output, torch.Tensor) else output["out"]
    return (
        logits.float().logsumexp(dim=1).mean()
        if logits.ndim > 2
        else nn.functional.cross_entropy(logits.float(), torch.zeros(logits.shape[0], dtype=torch.long))
    )


def hf_loss(output: Any, batch: Batch) -> torch.Tensor:
    return output.loss


# ---- builders ----


def tv(name: str, **kwargs: Any) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import torchvision

        return torchvision.models.get_model(name, weights=None, **kwargs)

    return build


def tv_vit() -> nn.Module:
    from torchvision.models.vision_transformer import VisionTransformer

    return VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64)


def tv_swin() -> nn.Module:
    from torchvision.models.swin_transformer import SwinTransformer

    return SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=[4, 4])


def tv_maxvit() -> nn.Module:
    from torchvision.models.maxvit import MaxVit

    return MaxVit(
        input_size=(64, 64),
        stem_channels=16,
        partition_size=4,
        block_channels=[16, 32],
        block_layers=[1, 1],
        head_dim=8,
        stochastic_depth_prob=0.1,
    )


def timm_model(name: str, **kwargs: Any) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import timm

        return timm.create_model(name, pretrained=False, **kwargs)

    return build


def hf(kind: str, attention: str) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import transformers as t

        common = {"vocab_size": 96, "attn_implementation": attention}
        if kind == "bert":
            config = t.BertConfig(
                hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, **common
            )
            return t.BertForSequenceClassification(config)
        if kind == "gpt2":
            config = t.GPT2Config(n_embd=32, n_layer=2, n_head=2, n_positions=64, **common)
            return t.GPT2LMHeadModel(config)
        if kind == "t5":
            config = t.T5Config(
                d_model=32,
                d_kv=16,
                d_ff=64,
                num_layers=2,
                num_decoder_layers=2,
                num_heads=2,
                decoder_start_token_id=0,
                **common,
            )
            return t.T5ForConditionalGeneration(config)
        config = t.LlamaConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
            **common,
        )
        return t.LlamaForCausalLM(config)

    return build


def _labels() -> torch.Tensor:
    return torch.randint(1, 96, (2, 8))


def _class_labels() -> torch.Tensor:
    return torch.tensor([0, 1])


MODELS: list[Model] = [
    # torchvision classification
    Model("resnet18", "torchvision", tv("resnet18"), images(64), logits_loss),
    Model("resnext50_32x4d", "torchvision", tv("resnext50_32x4d"), images(64), logits_loss, slow=True),
    Model("wide_resnet50_2", "torchvision", tv("wide_resnet50_2"), images(64), logits_loss, slow=True),
    Model("vgg11", "torchvision", tv("vgg11"), images(32), logits_loss, slow=True),
    Model("vgg11_bn", "torchvision", tv("vgg11_bn"), images(32), logits_loss, slow=True),
    Model("densenet121", "torchvision", tv("densenet121"), images(64), logits_loss, slow=True),
    Model("mobilenet_v2", "torchvision", tv("mobilenet_v2"), images(64), logits_loss),
    Model("mobilenet_v3_small", "torchvision", tv("mobilenet_v3_small"), images(64), logits_loss),
    Model("mobilenet_v3_large", "torchvision", tv("mobilenet_v3_large"), images(64), logits_loss),
    Model("efficientnet_b0", "torchvision", tv("efficientnet_b0"), images(64), logits_loss),
    Model("regnet_y_400mf", "torchvision", tv("regnet_y_400mf"), images(64), logits_loss),
    Model("shufflenet_v2_x0_5", "torchvision", tv("shufflenet_v2_x0_5"), images(64), logits_loss),
    Model("squeezenet1_0", "torchvision", tv("squeezenet1_0"), images(64), logits_loss),
    Model("convnext_tiny", "torchvision", tv("convnext_tiny"), images(64), logits_loss, slow=True),
    Model("vit", "torchvision", tv_vit, images(32), logits_loss),
    Model("swin", "torchvision", tv_swin, images(32), logits_loss),
    Model("maxvit", "torchvision", tv_maxvit, images(64), logits_loss),
    # torchvision segmentation heads
    Model(
        "fcn_resnet50",
        "torchvision",
        tv("fcn_resnet50", weights_backbone=None, num_classes=4),
        images(64),
        logits_loss,
        slow=True,
    ),
    Model(
        "deeplabv3_mobilenet_v3_large",
        "torchvision",
        tv("deeplabv3_mobilenet_v3_large", weights_backbone=None, num_classes=4),
        images(64),
        logits_loss,
    ),
    # timm
    Model("timm_resnet18", "timm", timm_model("resnet18"), images(64), logits_loss),
    Model("timm_efficientnet_b0", "timm", timm_model("efficientnet_b0"), images(64), logits_loss),
    Model("timm_vit_tiny", "timm", timm_model("vit_tiny_patch16_224", img_size=32, depth=2), images(32), logits_loss),
    Model("timm_convnext_atto", "timm", timm_model("convnext_atto"), images(64), logits_loss),
    # transformers, eager and SDPA attention
    *[
        Model(f"{kind}_{attention}", "transformers", hf(kind, attention), batch, hf_loss)
        for kind, batch in (
            ("bert", tokens(labels=_class_labels)),
            ("gpt2", tokens(labels=_labels)),
            ("t5", tokens(labels=_labels)),
            ("llama", tokens(labels=_labels)),
        )
        for attention in ("eager", "sdpa")
    ],
]

BY_NAME = {model.name: model for model in MODELS}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def prepare(model: Model, dtype: torch.dtype) -> tuple[nn.Module, Batch]:
    torch.manual_seed(0)
    module = model.build().to(dtype)
    return module, model.batch(dtype)


def inference(module: nn.Module, batch: Batch) -> Callable[[], None]:
    args, kwargs = batch

    def run() -> None:
        module.eval()
        with torch.no_grad():
            module(*args, **kwargs)

    return run


def training_step(module: nn.Module, batch: Batch, model: Model) -> Callable[[], None]:
    """Forward, loss, backward, then one SGD (momentum) and one AdamW step, both `foreach`."""
    args, kwargs = batch
    params = [p for p in module.parameters() if p.requires_grad]
    sgd = torch.optim.SGD(params, lr=0.01, momentum=0.9, foreach=True)
    adamw = torch.optim.AdamW(params, lr=0.001, foreach=True)

    def run() -> None:
        module.train()
        sgd.zero_grad(set_to_none=True)
        loss = model.loss(module(*args, **kwargs), batch)
        loss.backward()
        sgd.step()
        adamw.step()

    return run


WORKLOADS = {"inference": inference, "training": training_step}


def workload(model: Model, kind: str, dtype: torch.dtype) -> Callable[[], None]:
    module, batch = prepare(model, dtype)
    if kind == "inference":
        return inference(module, batch)
    return training_step(module, batch, model)
