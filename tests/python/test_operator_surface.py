"""The rest of the operator surface (issue 15), on real PyTorch calls: the operators the coverage
page listed unclassified until every one had a class. Each count is worked out by hand from the
convention in docs/formulas.md; a composite kernel's count is that of the operators it runs; a
deliberately uncounted operator leaves the total partial and names itself."""

import math

import torch
import torch.nn.functional as F
import torchvision

import torchscan


def flops(workload):
    report = torchscan.measure_flops(workload)
    assert report["total"]["status"] == "complete", report["diagnostics"]
    return report


def only(workload, operator):
    """The count of `operator` in a complete report of `workload`."""
    return flops(workload)["by_operator"][operator]


def test_searching_selection_and_unique_variants():
    boundaries, values = torch.arange(7.0), torch.randn(5)
    # A binary search among 7: ceil(log2 8) = 3 comparisons per value.
    assert only(lambda: torch.searchsorted(boundaries, values), "aten.searchsorted") == 15
    assert only(lambda: torch.bucketize(values, boundaries), "aten.bucketize") == 15
    # mode along rows of 6: a sort (6 x 3) and a pass (6) per row, 4 rows.
    assert only(lambda: torch.randn(4, 6).mode(1), "aten.mode") == 4 * (18 + 6)
    x = torch.tensor([1, 1, 2, 3, 3, 3])
    assert only(lambda: torch.unique_consecutive(x), "aten.unique_consecutive") == 6
    # 8 rows of 3 sorted lexicographically: (8 x 3 + 8) row comparisons of 3 elements.
    rows = torch.randint(0, 3, (8, 3))
    assert only(lambda: torch.unique(rows, dim=0), "aten.unique_dim") == 96


def test_histograms():
    x = torch.randn(100)
    # 10 bins over the data's own range: 3 per value for the bin and 2 for the minimum and maximum.
    assert only(lambda: torch.histogram(x, bins=10), "aten.histogram") == 500
    assert only(lambda: torch.histogram(x, bins=10, range=(-1.0, 1.0)), "aten.histogram") == 300
    # 11 edges: ceil(log2 12) = 4 comparisons and the increment, per value.
    assert only(lambda: torch.histogram(x, bins=torch.linspace(-2, 2, 11)), "aten.histogram") == 500
    points = torch.randn(20, 2)
    report = flops(lambda: torch.histogramdd(points, bins=[3, 3]))
    # The range from the data (2 per coordinate), then 2 per coordinate and 1 per point.
    assert report["by_operator"]["aten._histogramdd_bin_edges"] == 80
    assert report["by_operator"]["aten._histogramdd_from_bin_cts"] == 100


def test_lapack_factorizations_and_solves():
    torch.manual_seed(0)
    a = torch.randn(6, 6)
    spd = a @ a.T + 6 * torch.eye(6)
    b = torch.randn(6, 3)
    tall = torch.randn(8, 4)
    assert only(lambda: torch.cholesky_inverse(torch.linalg.cholesky(spd)), "aten.cholesky_inverse") == 144
    assert only(lambda: torch.triangular_solve(b, torch.triu(a)), "aten.triangular_solve") == 108
    assert only(lambda: torch.geqrf(tall), "aten.geqrf") == 213  # 256 - 128/3
    tau = torch.randn(4)
    assert only(lambda: torch.linalg.householder_product(tall, tau), "aten.linalg_householder_product") == 213
    assert only(lambda: torch.ormqr(tall, tau, torch.randn(8, 5)), "aten.ormqr") == 480
    lu, pivots = torch.linalg.lu_factor(a)
    assert only(lambda: torch.linalg.lu_factor(a), "aten.linalg_lu_factor_ex") == 144
    assert only(lambda: torch.linalg.lu_solve(lu, pivots, b), "aten.linalg_lu_solve") == 216
    # linalg.lu is a composite kernel: the factorization (144) and an unpacking (a copy).
    report = flops(lambda: torch.linalg.lu(a))
    assert report["total"]["value"] == 144
    ld, ldl_pivots = torch.linalg.ldl_factor(spd)
    assert only(lambda: torch.linalg.ldl_factor(spd), "aten.linalg_ldl_factor_ex") == 72
    assert only(lambda: torch.linalg.ldl_solve(ld, ldl_pivots, b), "aten.linalg_ldl_solve") == 216
    assert only(lambda: torch.linalg.eigvals(a), "aten._linalg_eigvals") == 2160
    # matrix_exp runs its Taylor products and squarings as operators: those are counted.
    report = flops(lambda: torch.linalg.matrix_exp(a))
    assert "aten.linalg_matrix_exp" not in report["by_operator"]
    assert report["by_category"]["matmul"] > 0


def test_products_distances_and_accumulation():
    assert only(lambda: torch.addr(torch.randn(3, 4), torch.randn(3), torch.randn(4)), "aten.addr") == 24
    # 5 points of 6 features: 10 pairs x 6 x 3.
    assert only(lambda: F.pdist(torch.randn(5, 6)), "aten._pdist_forward") == 180
    x = torch.randn(5, 6, requires_grad=True)
    report = flops(lambda: F.pdist(x).sum().backward())
    assert report["by_operator"]["aten._pdist_backward"] == 240
    target = torch.zeros(9)
    assert only(lambda: target.put_(torch.tensor([0, 1, 1]), torch.ones(3), accumulate=True), "aten.put_") == 3
    assert only(lambda: target.put_(torch.tensor([0, 1]), torch.ones(2)), "aten.put_") == 0
    source = torch.randn(3, 4)
    reduce = lambda: torch.ones(5, 4).index_reduce_(0, torch.tensor([0, 1, 1]), source, "prod")  # noqa: E731
    assert only(reduce, "aten.index_reduce_") == 12
    segments = lambda: torch.segment_reduce(torch.randn(6), "sum", lengths=torch.tensor([2, 4]))  # noqa: E731
    assert only(segments, "aten.segment_reduce") == 6


def test_elementwise_and_composite_kernels():
    ints = torch.arange(1, 7).reshape(2, 3)
    for operator, call in [
        ("aten.gcd", lambda: torch.gcd(ints, ints + 1)),
        ("aten.lcm", lambda: torch.lcm(ints, ints + 1)),
        ("aten.__lshift__", lambda: ints << 1),
        ("aten.__rshift__", lambda: ints >> 1),
        ("aten.polar", lambda: torch.polar(torch.ones(2, 3), torch.zeros(2, 3))),
    ]:
        assert only(call, operator) == 6, operator
    # mvlgamma and renorm run their arithmetic as operators (composite kernels): counted there.
    report = flops(lambda: torch.mvlgamma(torch.rand(4) + 3, 2))
    assert "aten.mvlgamma" not in report["by_operator"] and report["total"]["value"] > 0
    report = flops(lambda: torch.randn(4, 5).renorm(2, 0, 1.0))
    assert "aten.renorm" not in report["by_operator"] and report["by_operator"]["aten.linalg_vector_norm"] == 2 * 20


def test_padding_gradients_and_antialiased_resampling():
    x = torch.randn(1, 2, 4, requires_grad=True)
    report = flops(lambda: F.pad(x, (2, 1), mode="reflect").sum().backward())
    # 14 output gradients folded into 8 inputs: 6 adds.
    assert report["by_operator"]["aten.reflection_pad1d_backward"] == 6
    report = flops(lambda: F.pad(x, (2, 1), mode="replicate").sum().backward())
    assert report["by_operator"]["aten.replication_pad1d_backward"] == 6
    image = torch.randn(1, 2, 8, 8)
    # 8 -> 4 bilinear with antialiasing: 14 taps per line (windows of 3, 4, 4, 3), a width pass
    # over 2 x 8 rows and a height pass over 2 x 4 columns: 224 + 112.
    resize = lambda: F.interpolate(image, size=(4, 4), mode="bilinear", antialias=True)  # noqa: E731
    assert only(resize, "aten._upsample_bilinear2d_aa") == 336
    # A scale factor instead of a size: the same call once its size is computed.
    by_scale = lambda: F.interpolate(image, scale_factor=0.5, mode="bilinear", antialias=True)  # noqa: E731
    assert flops(by_scale)["total"]["value"] == 336


def test_direct_backend_convolutions_and_the_dispatched_one_agree():
    x, w = torch.randn(1, 2, 7, 7), torch.randn(4, 2, 3, 3)
    # Output 3 x 3 (stride 2, padding 1, dilation 2): 2 x 4 x 2 x 9 x 9.
    dilated = lambda: torch.ops.aten.slow_conv_dilated2d(x, w, [3, 3], None, [2, 2], [1, 1], [2, 2])  # noqa: E731
    assert only(dilated, "aten.slow_conv_dilated2d") == 1296
    direct = lambda: torch.ops.aten._slow_conv2d_forward(x, w, [3, 3], None, [2, 2], [1, 1])  # noqa: E731
    assert only(direct, "aten._slow_conv2d_forward") == 2 * 4 * 2 * 9 * 16
    # The same convolution through F.conv2d is claimed by aten.convolution, whatever it runs.
    report = flops(lambda: F.conv2d(x, w, stride=2, padding=1, dilation=2))
    assert report["total"]["value"] == 1296 and list(report["by_operator"]) == ["aten.convolution"]
    t, tw = torch.randn(1, 4, 3, 3), torch.randn(4, 2, 3, 3)
    transposed = lambda: torch.ops.aten.slow_conv_transpose2d(t, tw, [3, 3], None, [2, 2], [0, 0], [0, 0], [1, 1])  # noqa: E731
    assert only(transposed, "aten.slow_conv_transpose2d") == 1296
    # With a bias, each kernel adds it to its output: 4 x 3 x 3 = 36 elements, as F.conv2d's
    # aten.convolution counts it (the bias convention); transposed [1, 2, 7, 7]: 98.
    b, tb = torch.randn(4), torch.randn(2)
    biased = lambda: torch.ops.aten.slow_conv_dilated2d(x, w, [3, 3], b, [2, 2], [1, 1], [2, 2])  # noqa: E731
    assert only(biased, "aten.slow_conv_dilated2d") == 1296 + 36
    report = flops(lambda: F.conv2d(x, w, b, stride=2, padding=1, dilation=2))
    assert report["total"]["value"] == 1296 + 36
    transposed = lambda: torch.ops.aten.slow_conv_transpose2d(t, tw, [3, 3], tb, [2, 2], [0, 0], [0, 0], [1, 1])  # noqa: E731
    assert tuple(transposed().shape) == (1, 2, 7, 7)
    assert only(transposed, "aten.slow_conv_transpose2d") == 1296 + 98
    report = flops(lambda: F.conv_transpose2d(t, tw, tb, stride=2))
    assert report["total"]["value"] == 1296 + 98


def test_detection_kernels():
    torch.manual_seed(0)
    features = torch.randn(1, 8, 8, 8)
    boxes = [torch.tensor([[0.0, 0.0, 4.0, 4.0], [1.0, 1.0, 6.0, 6.0], [2.0, 0.0, 7.0, 5.0]])]
    # 8 channels in 2 x 2 bins: 2 per output bin; 3 boxes x 2 x 4 outputs x (5 x 2^2 + 1).
    align = lambda: torchvision.ops.ps_roi_align(features, boxes, 2, sampling_ratio=2)  # noqa: E731
    assert only(align, "torchvision.ps_roi_align") == 24 * 21
    # Deformable 3 x 3 convolution, 2 -> 3 channels on [1, 2, 6, 6]: the product 1,728 and the
    # sampling 2 x 9 x 16 x 4 = 1,152 (+288 for the mask's multiply), and the bias added to the 3 x
    # 16 = 48 outputs (torchvision passes zeros for bias=None, and the kernel adds them).
    x, w = torch.randn(1, 2, 6, 6), torch.randn(3, 2, 3, 3)
    offset, mask = torch.randn(1, 18, 4, 4), torch.rand(1, 9, 4, 4)
    assert only(lambda: torchvision.ops.deform_conv2d(x, offset, w), "torchvision.deform_conv2d") == 2880 + 48
    deform = lambda: torchvision.ops.deform_conv2d(x, offset, w, mask=mask)  # noqa: E731
    assert only(deform, "torchvision.deform_conv2d") == 3168 + 48
    # RoI max pooling's bins follow each box's size (the data): deliberately uncounted, named.
    report = torchscan.measure_flops(lambda: torchvision.ops.roi_pool(features, boxes, 2))
    assert report["total"]["status"] == "partial"
    assert any("torchvision.roi_pool" in str(d.get("operator")) for d in report["diagnostics"])


def test_a_deliberately_uncounted_operator_is_named_with_how_to_price_it():
    features, rois = torch.randn(1, 8, 8, 8), torch.tensor([[0, 0.0, 0.0, 4.0, 4.0]])
    report = torchscan.measure_flops(lambda: torchvision.ops.roi_pool(features, rois, 2))
    assert report["total"]["status"] == "partial"
    diagnostics = [d for d in report["diagnostics"] if d.get("operator") == "torchvision.roi_pool"]
    assert diagnostics and diagnostics[0]["code"] == "deliberately_uncounted"
    assert "depends on the values" in diagnostics[0]["message"]
    # The message says how to price it where its cost is known, and that works.
    assert "custom_mapping={torch.ops.torchvision.roi_pool: formula}" in diagnostics[0]["message"]
    mapping = {torch.ops.torchvision.roi_pool: lambda *a, **k: 426}
    priced = torchscan.measure_flops(lambda: torchvision.ops.roi_pool(features, rois, 2), custom_mapping=mapping)
    assert priced["total"] == {**priced["total"], "status": "complete", "value": 426}


def test_qr_is_priced_by_its_mode():
    # A 6 x 4 (m = 6, n = k = 4). Householder QR: 2 m n^2 - 2/3 n^3 = 192 - 42.67 = 149.33; Q formed
    # from the 4 reflectors, 4 m q k - 2 (m + q) k^2 + 4/3 k^3: reduced (q = 4) 384 - 320 + 85.33 =
    # 149.33, complete (q = 6) 576 - 384 + 85.33 = 277.33; "r" forms no Q.
    a = torch.randn(6, 4)
    assert only(lambda: torch.linalg.qr(a), "aten.linalg_qr") == 299  # 298.67
    assert only(lambda: torch.linalg.qr(a, mode="reduced"), "aten.linalg_qr") == 299
    assert only(lambda: torch.linalg.qr(a, mode="complete"), "aten.linalg_qr") == 427  # 426.67
    assert only(lambda: torch.linalg.qr(a, mode="r"), "aten.linalg_qr") == 149  # 149.33
    # A 4 x 6 (m < n): QR 2 x 6 x 16 - 42.67, Q 4 x 4 either way (4/3 x 64): 234.67.
    assert only(lambda: torch.linalg.qr(torch.randn(4, 6), mode="complete"), "aten.linalg_qr") == 235
    # A batch of 3 matrices: 3 x 298.67 = 896; complex: 4 x 299 = 1196.
    assert only(lambda: torch.linalg.qr(torch.randn(3, 6, 4)), "aten.linalg_qr") == 896
    assert only(lambda: torch.linalg.qr(torch.randn(6, 4, dtype=torch.complex64)), "aten.linalg_qr") == 1196
    # The count is the call's, with nothing else in the report.
    with torchscan.count_flops() as counter:
        torch.linalg.qr(a, mode="complete")
    report = counter.report()
    assert report["total"]["status"] == "complete"
    assert report["by_operator"] == {"aten.linalg_qr": 427}
    assert report["by_category"] == {"linalg": 427}


def test_least_squares_is_priced_by_its_driver():
    torch.manual_seed(0)
    tall, b = torch.randn(6, 4), torch.randn(6, 3)
    # A 6 x 4, B 6 x 3 (M = 6, N = 4, k = 3). QR-based: QR 149.33, Q^T B 4 M N k - 2 N^2 k = 288 -
    # 96, the triangular solve N^2 k = 48: 389.33. gelsy (full rank) counts the same for m >= n, and
    # it is the CPU's default driver.
    for driver in (None, "gels", "gelsy"):
        assert only(lambda d=driver: torch.linalg.lstsq(tall, b, driver=d), "aten.linalg_lstsq") == 389
    # SVD-based (an estimate): 4 M N^2 + 8 N^3 + 4 M N k = 384 + 512 + 288.
    for driver in ("gelsd", "gelss"):
        assert only(lambda d=driver: torch.linalg.lstsq(tall, b, driver=d), "aten.linalg_lstsq") == 1184
    # Underdetermined A 4 x 6, B 4 x 3: gels 389.33 (LQ); gelsy adds the trapezoid's reduction,
    # 2 m^2 (n - m) = 64: 453.33, and it is what the CPU runs without a driver.
    wide, b4 = torch.randn(4, 6), torch.randn(4, 3)
    assert only(lambda: torch.linalg.lstsq(wide, b4, driver="gels"), "aten.linalg_lstsq") == 389
    assert only(lambda: torch.linalg.lstsq(wide, b4, driver="gelsy"), "aten.linalg_lstsq") == 453
    assert only(lambda: torch.linalg.lstsq(wide, b4), "aten.linalg_lstsq") == 453
    # B a vector (k = 1): 149.33 + 96 - 16 = 229.33; batches broadcast ([2, 1] with [1, 3]: 6 x 389.33).
    assert only(lambda: torch.linalg.lstsq(tall, torch.randn(6)), "aten.linalg_lstsq") == 229
    batched = lambda: torch.linalg.lstsq(torch.randn(2, 1, 6, 4), torch.randn(1, 3, 6, 3))  # noqa: E731
    assert only(batched, "aten.linalg_lstsq") == 2336
    with torchscan.count_flops() as counter:
        torch.linalg.lstsq(tall, b, driver="gelsd")
    report = counter.report()
    assert report["total"]["status"] == "complete"
    assert report["by_operator"] == {"aten.linalg_lstsq": 1184}


def test_masked_softmax_and_qkv_transform():
    scores, mask = torch.randn(2, 4), torch.zeros(2, 4, dtype=torch.bool)
    assert only(lambda: torch._masked_softmax(scores, mask, 1, 0), "aten._masked_softmax") == 40
    qkv, bias = torch.randn(2, 5, 12), torch.randn(12)
    assert only(lambda: torch._transform_bias_rescale_qkv(qkv, bias, 2), "aten._transform_bias_rescale_qkv") == 160
    assert math.isclose(120 + 120 / 3, 160)


def test_window_functions_are_creation_or_the_operators_they_run():
    # kaiser_window computes through a stub (no operator dispatched for its arithmetic): a
    # creation, like linspace and logspace, named with its one call; its own arange and empty
    # are its implementation.
    report = flops(lambda: torch.kaiser_window(8))
    assert report["total"]["value"] == 0
    assert report["ignored_operators"] == {"aten.kaiser_window": {"calls": 1, "reason": "creation"}}
    # hann_window is composite: the operators it runs are counted. Periodic, length 8: computed on
    # 9 points, then narrowed: arange(9) * 2pi/8 (mul_, 9), cos_ (9), * -0.5 (mul_, 9), + 0.5 (add_, 9).
    hann = flops(lambda: torch.hann_window(8))
    assert hann["by_operator"] == {"aten.mul_": 18, "aten.cos_": 9, "aten.add_": 9}
