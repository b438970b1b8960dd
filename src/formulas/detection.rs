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
//!   `4 s^2 + 1`. An adaptive sampling ratio (`s <= 0`: from each box's size) depends on the
//!   data, which the formula does not see: such a call is a formula error (partial), not a guess.

use super::{add, ceil_log2, mul, mul_all, require_tensor, FormulaError};
use crate::args::Args;

/// `nms(dets, scores, iou_threshold)`: the worst case.
pub fn nms(args: &Args) -> Result<u64, FormulaError> {
    let boxes = require_tensor(args, 0)?;
    let n = super::dim(&boxes, 0)?;
    let pairs = mul(n, n.saturating_sub(1))? / 2;
    add(add(mul(n, ceil_log2(n))?, mul(3, n)?)?, mul(13, pairs)?)
}

/// `(outputs, s^2)` of a RoI Align call: `rois` at `rois`, channels from `channels`.
fn roi_samples(
    args: &Args,
    rois: usize,
    channels: u64,
    pooled: usize,
    ratio: usize,
) -> Result<(u64, u64), FormulaError> {
    let boxes = super::dim(&require_tensor(args, rois)?, 0)?;
    let height = u64::try_from(args.int(pooled).ok_or(FormulaError::MissingArgument(pooled))?);
    let width = u64::try_from(args.int(pooled + 1).ok_or(FormulaError::MissingArgument(pooled + 1))?);
    let (height, width) =
        (height.map_err(|_| FormulaError::UnexpectedShape)?, width.map_err(|_| FormulaError::UnexpectedShape)?);
    let s = args.int(ratio).ok_or(FormulaError::MissingArgument(ratio))?;
    let s = u64::try_from(s).ok().filter(|&s| s > 0).ok_or(FormulaError::DataDependent)?;
    Ok((mul_all(&[boxes, channels, height, width])?, mul(s, s)?))
}

/// `roi_align(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned)`.
pub fn roi_align(args: &Args) -> Result<u64, FormulaError> {
    let channels = super::dim(&require_tensor(args, 0)?, 1)?;
    let (outputs, samples) = roi_samples(args, 1, channels, 3, 5)?;
    mul(outputs, add(mul(5, samples)?, 1)?)
}

/// `_roi_align_backward(grad, rois, spatial_scale, pooled_height, pooled_width, batch_size,
/// channels, height, width, sampling_ratio, aligned)`.
pub fn roi_align_backward(args: &Args) -> Result<u64, FormulaError> {
    let channels = u64::try_from(args.int(6).ok_or(FormulaError::MissingArgument(6))?)
        .map_err(|_| FormulaError::UnexpectedShape)?;
    let (outputs, samples) = roi_samples(args, 1, channels, 3, 9)?;
    mul(outputs, add(mul(4, samples)?, 1)?)
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
}
