"""Whole models of the families issue 15 names, built with random weights, report `complete`:
torchvision detection (Faster R-CNN, Mask R-CNN) and RAFT, Hugging Face Mixtral (mixture of
experts) and DETR from small configurations, and recurrent layers (LSTM, GRU, RNN; one and two
directions; padded and packed sequences) in training steps. The detection operators are also
checked alone against hand-computed counts."""

import pytest
import torch
import torchvision
from torch import nn

import torchscan
from helpers import fcm_counts_and_bias_terms

# Where FlopCounterMode is blind (no formula for the fused CPU attention kernels): torchscan
# counts them, tested by hand elsewhere (test_model_zoo.py, test_operator_families.py).
FCM_BLIND = {"aten._native_multi_head_attention", "aten._scaled_dot_product_flash_attention_for_cpu"}


def complete(workload):
    report = torchscan.measure_flops(workload)
    assert report["total"]["status"] == "complete", report["diagnostics"]
    assert report["diagnostics"] == []
    return report


def agrees_with_flop_counter_mode(report, workload):
    """Every operator FlopCounterMode prices (products, convolutions, attention) has the same
    count in the report, run on the same workload again (the models are deterministic in eval),
    plus the bias terms FlopCounterMode drops (the bias convention, read off the same calls)."""
    theirs, bias = fcm_counts_and_bias_terms(workload)
    assert theirs, "FlopCounterMode counted nothing: nothing was compared"
    for op, count in theirs.items():
        if op not in FCM_BLIND:
            ours = report["by_operator"].get(op)
            assert ours == count + bias[op], f"{op}: torchscan {ours} vs {count} + bias {bias[op]}"


def test_detection_operators_by_hand():
    boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0]] * 10) + torch.arange(10.0)[:, None]
    scores = torch.rand(10)
    # Worst case for 10 boxes: 10 x 4 to sort, 3 x 10 areas, 13 x 45 pairs = 655.
    report = complete(lambda: torchvision.ops.nms(boxes, scores, 0.5))
    assert report["by_operator"]["torchvision.nms"] == 655
    features = torch.rand(1, 4, 16, 16, requires_grad=True)
    rois = torch.tensor([[0, 0.0, 0.0, 8.0, 8.0], [0, 4.0, 4.0, 12.0, 12.0], [0, 1.0, 2.0, 9.0, 15.0]])
    report = complete(lambda: torchvision.ops.roi_align(features, rois, 2, 0.5, sampling_ratio=2).sum().backward())
    # 3 boxes x 4 channels x 2 x 2 bins: 48 outputs; forward 5 x 4 + 1, backward 4 x 4 + 1.
    assert report["by_operator"]["torchvision.roi_align"] == 48 * 21
    assert report["by_operator"]["torchvision._roi_align_backward"] == 48 * 17


def test_adaptive_roi_align_counts_each_box_sampling_grid():
    # sampling_ratio <= 0: each box samples ceil(h / 2) x ceil(w / 2) points per bin, from its
    # size, which the shim reads from the boxes. At spatial scale 0.5: box 1 is 4 x 4 (grid
    # 2 x 2 = 4 points), box 2 is 4 wide (x 0.5..4.5) and 6.5 high (y 1..7.5): grid 4 x 2 = 8.
    # 4 channels x 2 x 2 bins = 16 outputs per box: forward 16 (5 x 4 + 1) + 16 (5 x 8 + 1) =
    # 336 + 656 = 992; backward 16 (4 x 4 + 1) + 16 (4 x 8 + 1) = 272 + 528 = 800.
    features = torch.rand(1, 4, 16, 16, requires_grad=True)
    rois = torch.tensor([[0, 0.0, 0.0, 8.0, 8.0], [0, 1.0, 2.0, 9.0, 15.0]])
    report = complete(lambda: torchvision.ops.roi_align(features, rois, 2, 0.5, sampling_ratio=0).sum().backward())
    assert report["by_operator"]["torchvision.roi_align"] == 992
    assert report["by_operator"]["torchvision._roi_align_backward"] == 800
    # The same shapes with other boxes: the count follows them (no price remembered by shape).
    small = torch.tensor([[0, 0.0, 0.0, 2.0, 2.0], [0, 0.0, 0.0, 2.0, 2.0]])
    report = complete(lambda: torchvision.ops.roi_align(features, small, 2, 0.5, sampling_ratio=0))
    # Each box 1 x 1 (not aligned: at least 1): grid 1 x 1: 2 x 16 x (5 + 1) = 192.
    assert report["by_operator"]["torchvision.roi_align"] == 192


def test_maskrcnn_training_step_is_complete():
    # The mask targets are RoI Aligned with an adaptive sampling ratio (roi_heads.project_masks_on_boxes):
    # priced from the boxes, so the whole training step is complete.
    torch.manual_seed(0)
    model = _DETECTION.maskrcnn_resnet50_fpn(**_NO_WEIGHTS, min_size=128, max_size=128).train()
    images = [torch.rand(3, 128, 128) for _ in range(2)]
    masks = torch.zeros(1, 128, 128, dtype=torch.uint8)
    masks[0, 10:70, 10:60] = 1
    targets = [
        {"boxes": torch.tensor([[10.0, 10.0, 60.0, 70.0]]), "labels": torch.tensor([1]), "masks": masks}
        for _ in range(2)
    ]

    def step():
        sum(model(images, targets).values()).backward()

    report = complete(step)
    assert report["by_operator"]["torchvision.roi_align"] > 0
    assert report["by_operator"]["torchvision._roi_align_backward"] > 0
    assert report["by_phase"]["backward"]["value"] > 0


_DETECTION = torchvision.models.detection
_NO_WEIGHTS = {"weights": None, "weights_backbone": None, "num_classes": 3}


@pytest.mark.parametrize(
    ("build", "pooled"),
    [
        (lambda: _DETECTION.fasterrcnn_mobilenet_v3_large_320_fpn(**_NO_WEIGHTS), True),
        (lambda: _DETECTION.maskrcnn_resnet50_fpn(**_NO_WEIGHTS), True),
        (lambda: _DETECTION.keypointrcnn_resnet50_fpn(**{**_NO_WEIGHTS, "num_classes": 2}), True),
        (lambda: _DETECTION.retinanet_resnet50_fpn(**_NO_WEIGHTS), False),
        (lambda: _DETECTION.fcos_resnet50_fpn(**_NO_WEIGHTS), False),
    ],
    ids=["fasterrcnn_mobilenet", "maskrcnn", "keypointrcnn", "retinanet", "fcos"],
)
def test_detection_models_are_complete_and_agree_with_flop_counter_mode(build, pooled):
    torch.manual_seed(0)
    model = build().eval()
    images = [torch.rand(3, 128, 160)]
    with torch.no_grad():
        report = complete(lambda: model(images))
        agrees_with_flop_counter_mode(report, lambda: model(images))
    # Two-stage detectors always run the region proposals' NMS and RoI Align; the one-stage ones
    # (random weights) may keep no box above their score threshold, and pool nothing.
    assert ("torchvision.roi_align" in report["by_operator"]) == pooled
    assert report["by_operator"].get("torchvision.nms", 0) > 0 or not pooled
    assert report["by_operator"]["aten.convolution"] > 0


def test_optical_flow_is_complete():
    torch.manual_seed(0)
    raft = torchvision.models.optical_flow.raft_small(weights=None).eval()
    frame = torch.rand(1, 3, 128, 128)
    with torch.no_grad():
        report = complete(lambda: raft(frame, frame, num_flow_updates=2))
        agrees_with_flop_counter_mode(report, lambda: raft(frame, frame, num_flow_updates=2))
    assert report["by_operator"]["aten.grid_sampler_2d"] > 0


def test_mixture_of_experts_and_detr_are_complete():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    mixtral = transformers.MixtralModel(
        transformers.MixtralConfig(
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            intermediate_size=64,
            vocab_size=100,
            num_local_experts=4,
            num_experts_per_tok=2,
            max_position_embeddings=64,
        )
    ).eval()
    tokens = torch.randint(0, 100, (1, 12))
    with torch.no_grad():
        report = complete(lambda: mixtral(tokens))
        agrees_with_flop_counter_mode(report, lambda: mixtral(tokens))
    qwen = transformers.Qwen2MoeModel(
        transformers.Qwen2MoeConfig(
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            intermediate_size=64,
            moe_intermediate_size=16,
            shared_expert_intermediate_size=32,
            vocab_size=100,
            num_experts=4,
            num_experts_per_tok=2,
            max_position_embeddings=64,
        )
    ).eval()
    with torch.no_grad():
        report = complete(lambda: qwen(tokens))
        agrees_with_flop_counter_mode(report, lambda: qwen(tokens))
    backbone = transformers.ResNetConfig(
        embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], out_features=["stage4"]
    )
    detr = transformers.DetrForObjectDetection(
        transformers.DetrConfig(
            use_timm_backbone=False,
            use_pretrained_backbone=False,
            backbone=None,
            backbone_config=backbone,
            d_model=32,
            encoder_layers=1,
            decoder_layers=1,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            num_queries=10,
        )
    ).eval()
    pixels = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        report = complete(lambda: detr(pixel_values=pixels))
        agrees_with_flop_counter_mode(report, lambda: detr(pixel_values=pixels))


@pytest.mark.parametrize("cell", [nn.LSTM, nn.GRU, nn.RNN])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("packed", [False, True])
def test_recurrent_training_steps_are_complete(cell, bidirectional, packed):
    torch.manual_seed(0)
    layer = cell(8, 16, num_layers=2, bidirectional=bidirectional)
    x = torch.randn(5, 3, 8)
    if packed:
        x = nn.utils.rnn.pack_padded_sequence(x, [5, 3, 2])

    def step():
        out = layer(x)[0]
        (out.data if packed else out).sum().backward()

    report = complete(step)
    assert report["by_phase"]["backward"]["value"] > 0
    if cell is not nn.LSTM:
        # GRU and RNN run as products FlopCounterMode prices; the CPU LSTM is one oneDNN kernel
        # per layer that it has no formula for (it counts 0: test_operator_families.py).
        agrees_with_flop_counter_mode(report, step)
