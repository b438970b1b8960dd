//! Detection operators (torchvision): non-maximum suppression and RoI Align.
//!
//! - `nms(dets [N, 4], scores [N], iou_threshold)`: its work depends on how many boxes survive,
//!   so the count is the worst case (every pair compared): `N ceil(log2 N)` comparisons to sort
//!   by score, 3 FLOPs per box for its area, and 13 per pair for their intersection over union
//!   and its comparison with the threshold (two maxima, two minima, two differences, two clamps,
//!   a product, the union's add and subtract, a division, a compare): `N(N - 1) / 2` pairs.
//! - `roi_align(input [N, C, H, W], rois [K, 5], spatial_scale, pooled_h, pooled_w,
//!   sampling_ratio, aligned)`: per output element (`K C pooled_h pooled_w`), `s^2` sample
//!   points each read with 4 bilinear taps (1 FLOP per tap, as interpolation) and accumulated (1),
//!   and one average: `5 s^2 + 1`. Its backward spreads each output gradient over the same taps:
//!   `4 s^2 + 1`. An adaptive sampling ratio (`s <= 0`: `ceil(h / pooled_h) x ceil(w / pooled_w)`
//!   samples per bin from each box's size, as Mask R-CNN's mask targets use) depends on the boxes:
//!   the shim reads them (on the CPU) and the count is exact, `5 g + 1` per output element of a
//!   box whose grid has `g` points; boxes it cannot read leave the call a formula error
//!   (partial), not a guess.

use super::{add, ceil_log2, mul, mul_all, require_tensor, FormulaError};
use crate::args::Args;

/// `nms(dets, scores, iou_threshold)`: the worst case.
pub fn nms(args: &Args) -> Result<u64, FormulaError> {
    let boxes = require_tensor(args, 0)?;
    let n = super::dim(&boxes, 0)?;
    let pairs = mul(n, n.saturating_sub(1))? / 2;
    add(add(mul(n, ceil_log2(n))?, mul(3, n)?)?, mul(13, pairs)?)
}

/// A RoI Align call's work at `per_sample` FLOPs per sample point and 1 per output element:
/// `rois` at `rois`, channels from `channels`. With a fixed sampling ratio `s`, every output
/// element has `s^2` samples; with an adaptive one (`s <= 0`: `ceil(h / pooled_h) x
/// ceil(w / pooled_w)` from each box's size) the shim reads the boxes and hands over the sum of
/// their grids (`Args::data`): `channels pooled_h pooled_w (per_sample G + K)` for `K` boxes
/// whose grids sum to `G`. Without it (boxes it cannot read: not on the CPU) the call is
/// data-dependent, not priced.
fn roi_work(
    args: &Args,
    rois: usize,
    channels: u64,
    pooled: usize,
    ratio: usize,
    per_sample: u64,
) -> Result<u64, FormulaError> {
    let boxes = super::dim(&require_tensor(args, rois)?, 0)?;
    let height = u64::try_from(args.int(pooled).ok_or(FormulaError::MissingArgument(pooled))?);
    let width = u64::try_from(args.int(pooled + 1).ok_or(FormulaError::MissingArgument(pooled + 1))?);
    let (height, width) =
        (height.map_err(|_| FormulaError::UnexpectedShape)?, width.map_err(|_| FormulaError::UnexpectedShape)?);
    let bins = mul_all(&[channels, height, width])?;
    let s = args.int(ratio).ok_or(FormulaError::MissingArgument(ratio))?;
    match u64::try_from(s).ok().filter(|&s| s > 0) {
        Some(s) => mul(mul(boxes, bins)?, add(mul(per_sample, mul(s, s)?)?, 1)?),
        None => {
            let grids = args.data().ok_or(FormulaError::DataDependent)?;
            let grids = u64::try_from(grids).map_err(|_| FormulaError::UnexpectedShape)?;
            mul(bins, add(mul(per_sample, grids)?, boxes)?)
        }
    }
}

/// `roi_align(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned)`.
pub fn roi_align(args: &Args) -> Result<u64, FormulaError> {
    let channels = super::dim(&require_tensor(args, 0)?, 1)?;
    roi_work(args, 1, channels, 3, 5, 5)
}

/// `_roi_align_backward(grad, rois, spatial_scale, pooled_height, pooled_width, batch_size,
/// channels, height, width, sampling_ratio, aligned)`.
pub fn roi_align_backward(args: &Args) -> Result<u64, FormulaError> {
    let channels = u64::try_from(args.int(6).ok_or(FormulaError::MissingArgument(6))?)
        .map_err(|_| FormulaError::UnexpectedShape)?;
    roi_work(args, 1, channels, 3, 9, 4)
}

/// `ps_roi_align(input [N, C, H, W], rois, spatial_scale, pooled_h, pooled_w, sampling_ratio)`:
/// `roi_align`'s count, each output bin reading one of `C / (pooled_h pooled_w)` channel groups.
pub fn ps_roi_align(args: &Args) -> Result<u64, FormulaError> {
    let channels = super::dim(&require_tensor(args, 0)?, 1)?;
    let bins = mul(
        u64::try_from(args.int(3).ok_or(FormulaError::MissingArgument(3))?)
            .map_err(|_| FormulaError::UnexpectedShape)?,
        u64::try_from(args.int(4).ok_or(FormulaError::MissingArgument(4))?)
            .map_err(|_| FormulaError::UnexpectedShape)?,
    )?;
    let groups = channels.checked_div(bins).ok_or(FormulaError::UnexpectedShape)?;
    roi_work(args, 1, groups, 3, 5, 5)
}

/// `_ps_roi_align_backward(grad, rois, channel_mapping, spatial_scale, pooled_h, pooled_w,
/// sampling_ratio, ...)`: `4 s^2 + 1` per output gradient, as `roi_align`'s backward.
pub fn ps_roi_align_backward(args: &Args) -> Result<u64, FormulaError> {
    let grads = require_tensor(args, 0)?.numel().ok_or(FormulaError::Overflow)?;
    let s = args.int(6).ok_or(FormulaError::MissingArgument(6))?;
    let s = u64::try_from(s).ok().filter(|&s| s > 0).ok_or(FormulaError::DataDependent)?;
    mul(grads, add(mul(4, mul(s, s)?)?, 1)?)
}

/// `_roi_pool_backward(grad, rois, argmax, ...)`: each output gradient added into the element
/// its bin's maximum came from, 1 per output gradient.
pub fn roi_pool_backward(args: &Args) -> Result<u64, FormulaError> {
    require_tensor(args, 0)?.numel().ok_or(FormulaError::Overflow)
}

/// `qroi_align(input, rois, input_scale, input_zero_point, rois_scale, rois_zero_point,
/// spatial_scale, pooled_h, pooled_w, sampling_ratio, aligned)`: `roi_align`'s count.
pub fn qroi_align(args: &Args) -> Result<u64, FormulaError> {
    let channels = super::dim(&require_tensor(args, 0)?, 1)?;
    roi_work(args, 1, channels, 7, 9, 5)
}

/// The deformable convolution's work: the convolution's (2 FLOPs per multiply-accumulate), the
/// sampling of each column value at a learned offset, 4 bilinear taps and, with a modulation
/// mask, a multiply: `N C_in k_h k_w H_out W_out (4 + mask)`; and the output's elements, which
/// the bias is added to (torchvision always passes one, zeros for `bias=None`).
fn deform_work(args: &Args, first: usize) -> Result<(u64, u64, u64), FormulaError> {
    let (input, weight) = (require_tensor(args, first)?, require_tensor(args, first + 1)?);
    let int = |i: usize| args.int(i).ok_or(FormulaError::MissingArgument(i));
    let p = first + 5;
    let (stride, padding, dilation) = ([int(p)?, int(p + 1)?], [int(p + 2)?, int(p + 3)?], [int(p + 4)?, int(p + 5)?]);
    let spatial = super::conv::conv_output_spatial(input.dims, weight.dims, &stride, &padding, &dilation)?;
    let conv = super::conv::conv_work(input.dims, weight.dims, false, spatial)?;
    // `use_mask` (the mask argument is a placeholder tensor without it).
    let masked = u64::from(args.bool(first + 13).unwrap_or(false));
    let columns =
        mul_all(&[super::dim(&input, 0)?, super::dim(&input, 1)?, super::product(&weight.dims[2..])?, spatial])?;
    let outputs = mul_all(&[super::dim(&input, 0)?, super::dim(&weight, 0)?, spatial])?;
    Ok((conv, mul(columns, add(4, masked)?)?, outputs))
}

/// `deform_conv2d(input, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w,
/// dilation_h, dilation_w, groups, offset_groups, use_mask)`: the convolution, the sampling and
/// the bias's add (1 per output element, the bias convention).
pub fn deform_conv2d(args: &Args) -> Result<u64, FormulaError> {
    let (conv, sampling, outputs) = deform_work(args, 0)?;
    add(add(conv, sampling)?, outputs)
}

/// `_deform_conv2d_backward(grad, input, weight, offset, mask, bias, ...)`: twice the forward's
/// convolution and sampling (the input and weight gradients of the product; the offset and mask
/// gradients of the sampling), and the bias gradient, the sum of `grad` (1 per element).
pub fn deform_conv2d_backward(args: &Args) -> Result<u64, FormulaError> {
    let (conv, sampling, outputs) = deform_work(args, 1)?;
    add(mul(add(conv, sampling)?, 2)?, outputs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::build::*;
    use crate::formulas::testing::with_args;

    #[test]
    fn nms_counts_the_worst_case() {
        // 10 boxes: 10 x 4 + 30 + 13 x 45 = 655.
        let f = with_args(
            |s| {
                tensor(s, &[10, 4]);
                tensor(s, &[10]);
                double(s, 0.5);
            },
            nms,
        );
        assert_eq!(f, Ok(655));
        assert_eq!(with_args(|s| tensor(s, &[0, 4]), nms), Ok(0));
    }

    #[test]
    fn roi_align_samples() {
        // 3 boxes over 4 channels, 2x2 bins, sampling ratio 2: 48 outputs x (20 + 1) = 1008.
        let forward = |ratio: i64| {
            with_args(
                |s| {
                    tensor(s, &[1, 4, 16, 16]);
                    tensor(s, &[3, 5]);
                    double(s, 0.25);
                    int(s, 2);
                    int(s, 2);
                    int(s, ratio);
                    boolean(s, false);
                },
                roi_align,
            )
        };
        assert_eq!(forward(2), Ok(1008));
        assert_eq!(forward(0), Err(FormulaError::DataDependent));
        // backward: 48 x (16 + 1) = 816.
        let backward = with_args(
            |s| {
                tensor(s, &[3, 4, 2, 2]);
                tensor(s, &[3, 5]);
                double(s, 0.25);
                int(s, 2);
                int(s, 2);
                int(s, 1);
                int(s, 4);
                int(s, 16);
                int(s, 16);
                int(s, 2);
                boolean(s, false);
            },
            roi_align_backward,
        );
        assert_eq!(backward, Ok(816));
    }

    #[test]
    fn adaptive_roi_align_counts_each_box_grid() {
        // 2 boxes over 4 channels, 2x2 bins, adaptive sampling: the shim read grids of 3 x 2 = 6
        // and 1 x 1 = 1 points per bin, G = 7. 16 bins x (5 x 7 + 2 boxes) = 592; per box that is
        // 16 x (5 x 6 + 1) + 16 x (5 x 1 + 1) = 496 + 96 = 592.
        let forward = |grids: Option<i64>| {
            with_args(
                |s| {
                    tensor(s, &[1, 4, 16, 16]);
                    tensor(s, &[2, 5]);
                    double(s, 1.0);
                    int(s, 2);
                    int(s, 2);
                    int(s, -1);
                    boolean(s, false);
                    if let Some(g) = grids {
                        data(s, g);
                    }
                },
                roi_align,
            )
        };
        assert_eq!(forward(Some(7)), Ok(592));
        assert_eq!(forward(None), Err(FormulaError::DataDependent));
        // backward: 16 x (4 x 7 + 2) = 480.
        let backward = with_args(
            |s| {
                tensor(s, &[2, 4, 2, 2]);
                tensor(s, &[2, 5]);
                double(s, 1.0);
                int(s, 2);
                int(s, 2);
                int(s, 1);
                int(s, 4);
                int(s, 16);
                int(s, 16);
                int(s, -1);
                boolean(s, false);
                data(s, 7);
            },
            roi_align_backward,
        );
        assert_eq!(backward, Ok(480));
    }

    #[test]
    fn position_sensitive_pooling_and_deformable_convolution() {
        // 8 channels in 2 x 2 bins: 2 groups; 3 boxes, sampling 2: 3 x 2 x 4 outputs x 21.
        let f = with_args(
            |s| {
                tensor(s, &[1, 8, 8, 8]);
                tensor(s, &[3, 5]);
                double(s, 1.0);
                int(s, 2);
                int(s, 2);
                int(s, 2);
            },
            ps_roi_align,
        );
        assert_eq!(f, Ok(24 * 21));
        let f = with_args(
            |s| {
                tensor(s, &[3, 2, 2, 2]);
                tensor(s, &[3, 5]);
                tensor(s, &[3, 2, 2, 2]);
                double(s, 1.0);
                int(s, 2);
                int(s, 2);
                int(s, 2);
            },
            ps_roi_align_backward,
        );
        assert_eq!(f, Ok(24 * 17));
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[3, 2, 2, 2]);
                },
                roi_pool_backward
            ),
            Ok(24)
        );
        // Deformable 3 x 3, 2 -> 3 channels on [1, 2, 6, 6]: output 4 x 4. Convolution 2 x 3 x 2
        // x 9 x 16 = 1,728; sampling 2 x 9 x 16 columns x 4 taps = 1,152 (+288 with a mask);
        // the bias added to the 3 x 16 = 48 outputs.
        let deform = |mask: &'static [i64], use_mask: bool| {
            with_args(
                move |s| {
                    tensor(s, &[1, 2, 6, 6]);
                    tensor(s, &[3, 2, 3, 3]);
                    tensor(s, &[1, 18, 4, 4]);
                    tensor(s, mask);
                    tensor(s, &[3]);
                    for v in [1, 1, 0, 0, 1, 1, 1, 1] {
                        int(s, v);
                    }
                    boolean(s, use_mask);
                },
                deform_conv2d,
            )
        };
        assert_eq!(deform(&[1, 1], false), Ok(1728 + 1152 + 48));
        assert_eq!(deform(&[1, 9, 4, 4], true), Ok(1728 + 1152 + 288 + 48));
        // Backward: twice the convolution and sampling, and the bias gradient's sum of the 48.
        let backward = with_args(
            |s| {
                tensor(s, &[1, 3, 4, 4]);
                tensor(s, &[1, 2, 6, 6]);
                tensor(s, &[3, 2, 3, 3]);
                tensor(s, &[1, 18, 4, 4]);
                tensor(s, &[1, 1]);
                tensor(s, &[3]);
                for v in [1, 1, 0, 0, 1, 1, 1, 1] {
                    int(s, v);
                }
                boolean(s, false);
            },
            deform_conv2d_backward,
        );
        assert_eq!(backward, Ok(2 * (1728 + 1152) + 48));
    }
}
