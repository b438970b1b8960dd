//! Convolutions, forward and backward, every dimensionality, groups, transposed, stride,
//! padding, dilation. Convention (PyTorch's flop counter): 2 FLOPs per multiply-accumulate.
//!
//! The bias convention (as `matmul.rs`'s): a bias costs what the separate `add` would, 1 FLOP
//! per output element, and its gradient what the separate `sum` would, 1 per element of
//! `grad_output`. PyTorch's counter drops both: it differs from these rows by exactly them.
//!
//! One convolution's work is `2 * N * C_out * (C_in / groups) * prod(kernel) * prod(S)` where `S`
//! are the spatial sizes of the *non-upsampled* side: the output for a convolution, the input
//! for a transposed one (each input element meets each kernel element once).

use super::{add, mul, mul_all, product, require_tensor, FormulaError};
use crate::args::Args;

/// `convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
/// groups)`; `_convolution` shares the leading arguments. A bias adds 1 per output element.
pub fn convolution(args: &Args) -> Result<u64, FormulaError> {
    let input = require_tensor(args, 0)?;
    let weight = require_tensor(args, 1)?;
    let stride = args.int_list(3).ok_or(FormulaError::MissingArgument(3))?;
    let padding = args.int_list(4).ok_or(FormulaError::MissingArgument(4))?;
    let dilation = args.int_list(5).ok_or(FormulaError::MissingArgument(5))?;
    let transposed = args.bool(6).ok_or(FormulaError::MissingArgument(6))?;
    let work = convolution_of(input.dims, weight.dims, stride, padding, dilation, transposed)?;
    if !args.has_tensor(2) {
        return Ok(work);
    }
    let outputs = if transposed {
        let output_padding = args.int_list(7).ok_or(FormulaError::MissingArgument(7))?;
        let groups = args.int(8).ok_or(FormulaError::MissingArgument(8))?;
        transposed_outputs(input.dims, weight.dims, stride, padding, dilation, output_padding, groups)?
    } else {
        outputs(input.dims, weight.dims, stride, padding, dilation)?
    };
    add(work, outputs)
}

/// Elements of a convolution's output: `N x C_out x` the output's spatial sizes (the bias
/// add's count).
pub(super) fn outputs(
    input: &[i64],
    weight: &[i64],
    stride: &[i64],
    padding: &[i64],
    dilation: &[i64],
) -> Result<u64, FormulaError> {
    let spatial = conv_output_spatial(input, weight, stride, padding, dilation)?;
    mul_all(&[dim_of(input, 0)?, dim_of(weight, 0)?, spatial])
}

/// Elements of a transposed convolution's output: `N x C_out x` the spatial sizes
/// `(in - 1) s - 2 p + d (k - 1) + output_padding + 1`, with `C_out = weight[1] x groups`.
pub(super) fn transposed_outputs(
    input: &[i64],
    weight: &[i64],
    stride: &[i64],
    padding: &[i64],
    dilation: &[i64],
    output_padding: &[i64],
    groups: i64,
) -> Result<u64, FormulaError> {
    let dims = input.len().checked_sub(2).ok_or(FormulaError::UnexpectedShape)?;
    if weight.len() != dims + 2 {
        return Err(FormulaError::UnexpectedShape);
    }
    let pick = |list: &[i64], i: usize, default: i64| -> Result<i128, FormulaError> {
        match list.len() {
            0 => Ok(i128::from(default)),
            1 => Ok(i128::from(list[0])),
            n if n == dims => Ok(i128::from(list[i])),
            _ => Err(FormulaError::UnexpectedShape),
        }
    };
    let channels = mul(dim_of(weight, 1)?, u64::try_from(groups).map_err(|_| FormulaError::UnexpectedShape)?)?;
    let mut total = mul(dim_of(input, 0)?, channels)?;
    for i in 0..dims {
        let (s, p, d, o) =
            (pick(stride, i, 1)?, pick(padding, i, 0)?, pick(dilation, i, 1)?, pick(output_padding, i, 0)?);
        let size = (i128::from(input[2 + i]) - 1) * s - 2 * p + d * (i128::from(weight[2 + i]) - 1) + o + 1;
        total = mul(total, u64::try_from(size.max(0)).map_err(|_| FormulaError::Overflow)?)?;
    }
    Ok(total)
}

/// One convolution's work from its input's and weight's sizes and its parameters (also the
/// quantized convolutions', whose weight comes packed).
pub fn convolution_of(
    input: &[i64],
    weight: &[i64],
    stride: &[i64],
    padding: &[i64],
    dilation: &[i64],
    transposed: bool,
) -> Result<u64, FormulaError> {
    let spatial = if transposed {
        product(input.get(2..).ok_or(FormulaError::UnexpectedShape)?)?
    } else {
        conv_output_spatial(input, weight, stride, padding, dilation)?
    };
    conv_work(input, weight, transposed, spatial)
}

/// `convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
/// transposed, output_padding, groups, output_mask)`: the input gradient and the weight gradient
/// each cost one forward convolution; the bias gradient, the sum of `grad_output` over the batch
/// and the spatial positions, 1 per element of `grad_output` (what the separate `sum` costs;
/// PyTorch's counter leaves it out).
///
/// PyTorch's counter multiplies the weight-gradient term by `groups` (it treats the grouped
/// weight gradient as one dense convolution over all channels); the work done is the forward's.
pub fn convolution_backward(args: &Args) -> Result<u64, FormulaError> {
    let grad_output = require_tensor(args, 0)?;
    let input = require_tensor(args, 1)?;
    let weight = require_tensor(args, 2)?;
    let transposed = args.bool(7).ok_or(FormulaError::MissingArgument(7))?;
    let mask = args.bool_list(10).ok_or(FormulaError::MissingArgument(10))?;
    // The non-upsampled side: grad_output (= output) for a convolution, the input if transposed.
    let side = if transposed { input.dims } else { grad_output.dims };
    let spatial = product(side.get(2..).ok_or(FormulaError::UnexpectedShape)?)?;
    let one = conv_work(input.dims, weight.dims, transposed, spatial)?;
    let wanted = |i: usize| mask.get(i).copied().unwrap_or(0) != 0;
    let mut total = 0;
    if wanted(0) {
        total = add(total, one)?;
    }
    if wanted(1) {
        total = add(total, one)?;
    }
    if wanted(2) {
        total = add(total, grad_output.numel().ok_or(FormulaError::Overflow)?)?;
    }
    Ok(total)
}

/// `2 * N * C_out * C_in/groups * prod(kernel) * spatial`, read from the weight's layout:
/// `[C_out, C_in/g, k...]`, or `[C_in, C_out/g, k...]` when transposed; both give the same product.
pub(super) fn conv_work(input: &[i64], weight: &[i64], _transposed: bool, spatial: u64) -> Result<u64, FormulaError> {
    if weight.len() < 3 || input.len() != weight.len() {
        return Err(FormulaError::UnexpectedShape);
    }
    let batch = u64::try_from(input[0]).map_err(|_| FormulaError::UnexpectedShape)?;
    let channels = mul(dim_of(weight, 0)?, dim_of(weight, 1)?)?;
    let kernel = product(&weight[2..])?;
    mul_all(&[2, batch, channels, kernel, spatial])
}

fn dim_of(dims: &[i64], i: usize) -> Result<u64, FormulaError> {
    dims.get(i).and_then(|&d| u64::try_from(d).ok()).ok_or(FormulaError::UnexpectedShape)
}

/// Product of the output's spatial sizes: `floor((in + 2p - d(k-1) - 1) / s) + 1` per dimension;
/// one-element parameter lists apply to every dimension, as in `torch.nn.functional`.
pub(super) fn conv_output_spatial(
    input: &[i64],
    weight: &[i64],
    stride: &[i64],
    padding: &[i64],
    dilation: &[i64],
) -> Result<u64, FormulaError> {
    let dims = input.len().checked_sub(2).ok_or(FormulaError::UnexpectedShape)?;
    if weight.len() != dims + 2 {
        return Err(FormulaError::UnexpectedShape);
    }
    let pick = |list: &[i64], i: usize| -> Result<i64, FormulaError> {
        match list.len() {
            1 => Ok(list[0]),
            n if n == dims => Ok(list[i]),
            _ => Err(FormulaError::UnexpectedShape),
        }
    };
    let mut total = 1u64;
    for i in 0..dims {
        let (s, p, d) = (pick(stride, i)?, pick(padding, i)?, pick(dilation, i)?);
        if s <= 0 {
            return Err(FormulaError::UnexpectedShape);
        }
        let span = input[2 + i] as i128 + 2 * p as i128 - d as i128 * (weight[2 + i] as i128 - 1) - 1;
        let out = if span < 0 { 0 } else { span / s as i128 + 1 };
        total = mul(total, u64::try_from(out).map_err(|_| FormulaError::Overflow)?)?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::build::*;
    use crate::formulas::testing::with_args;

    /// Arguments of `aten::convolution`.
    #[allow(clippy::too_many_arguments)]
    fn conv_args(
        s: &mut Vec<i64>,
        x: &[i64],
        w: &[i64],
        stride: &[i64],
        pad: &[i64],
        dil: &[i64],
        transposed: bool,
        groups: i64,
    ) {
        tensor(s, x);
        tensor(s, w);
        none(s);
        ints(s, stride);
        ints(s, pad);
        ints(s, dil);
        boolean(s, transposed);
        ints(s, &[0, 0]);
        int(s, groups);
    }

    #[test]
    fn conv2d_forward() {
        // resnet stem: x[1,3,224,224], w[64,3,7,7], stride 2, pad 3 -> out 112x112.
        // 2 * 1 * 64 * 3 * 49 * 112*112 = 236_027_904.
        let f = with_args(
            |s| conv_args(s, &[1, 3, 224, 224], &[64, 3, 7, 7], &[2, 2], &[3, 3], &[1, 1], false, 1),
            convolution,
        );
        assert_eq!(f, Ok(236_027_904));
    }

    #[test]
    fn grouped_dilated_conv() {
        // x[2,8,10,10], w[8,2,3,3] (groups 4), dilation 2, pad 0, stride 1: out 6x6.
        // 2 * 2 * 8 * 2 * 9 * 36 = 20_736.
        let f = with_args(|s| conv_args(s, &[2, 8, 10, 10], &[8, 2, 3, 3], &[1], &[0], &[2], false, 4), convolution);
        assert_eq!(f, Ok(20_736));
    }

    #[test]
    fn conv1d_and_conv3d() {
        // 1d: x[1,4,9], w[6,4,3], stride 2 -> out 4: 2*1*6*4*3*4 = 576.
        let f = with_args(|s| conv_args(s, &[1, 4, 9], &[6, 4, 3], &[2], &[0], &[1], false, 1), convolution);
        assert_eq!(f, Ok(576));
        // 3d: x[1,2,4,4,4], w[3,2,2,2,2], pad 1 -> out 5x5x5: 2*1*3*2*8*125 = 12_000.
        let f =
            with_args(|s| conv_args(s, &[1, 2, 4, 4, 4], &[3, 2, 2, 2, 2], &[1], &[1], &[1], false, 1), convolution);
        assert_eq!(f, Ok(12_000));
    }

    #[test]
    fn transposed_conv_counts_over_the_input() {
        // x[1,4,5,5], w[4,3,3,3] (C_in 4, C_out 3, groups 1), stride 2: each of 25 input pixels
        // meets 3*3 kernel taps for 4*3 channel pairs: 2 * 1 * 4*3 * 9 * 25 = 5_400.
        let f =
            with_args(|s| conv_args(s, &[1, 4, 5, 5], &[4, 3, 3, 3], &[2, 2], &[0, 0], &[1, 1], true, 1), convolution);
        assert_eq!(f, Ok(5_400));
    }

    #[test]
    fn backward_is_one_forward_per_requested_gradient() {
        // grad_out[2,8,6,6], x[2,8,10,10], w[8,2,3,3], groups 4: forward = 20_736 (above).
        let go = |mask: &[bool]| {
            with_args(
                |s| {
                    tensor(s, &[2, 8, 6, 6]);
                    tensor(s, &[2, 8, 10, 10]);
                    tensor(s, &[8, 2, 3, 3]);
                    ints(s, &[8]);
                    ints(s, &[1]);
                    ints(s, &[0]);
                    ints(s, &[2]);
                    boolean(s, false);
                    ints(s, &[0]);
                    int(s, 4);
                    bools(s, mask);
                },
                convolution_backward,
            )
        };
        // The bias gradient: the sum of grad_output's 2 x 8 x 6 x 6 = 576 elements.
        assert_eq!(go(&[true, true, true]), Ok(41_472 + 576));
        assert_eq!(go(&[true, true, false]), Ok(41_472));
        assert_eq!(go(&[false, true, false]), Ok(20_736));
        assert_eq!(go(&[true, false, false]), Ok(20_736));
        assert_eq!(go(&[false, false, true]), Ok(576));
    }

    #[test]
    fn a_bias_adds_one_per_output_element() {
        let with_bias = |x: &[i64], w: &[i64], stride: &[i64], transposed: bool, output_padding: &[i64], groups| {
            with_args(
                |s| {
                    tensor(s, x);
                    tensor(s, w);
                    tensor(s, &[w[usize::from(transposed)] * if transposed { groups } else { 1 }]);
                    ints(s, stride);
                    ints(s, &[0]);
                    ints(s, &[1]);
                    boolean(s, transposed);
                    ints(s, output_padding);
                    int(s, groups);
                },
                convolution,
            )
        };
        // x[2,8,10,10], w[8,2,3,3] (groups 4), dilation 1: out [2, 8, 8, 8], 1,024 elements;
        // the products 2 x 2 x 8 x 2 x 9 x 64 = 36,864.
        assert_eq!(with_bias(&[2, 8, 10, 10], &[8, 2, 3, 3], &[1], false, &[0], 4), Ok(36_864 + 1_024));
        // Transposed x[1,4,5,5], w[4,3,3,3] (C_out 3), stride 2: out side (5-1) x 2 + 2 + 1 = 11
        // (12 with output padding 1): + 3 x 121 = 363 (+ 3 x 144 = 432) to the 5,400 above.
        assert_eq!(with_bias(&[1, 4, 5, 5], &[4, 3, 3, 3], &[2, 2], true, &[0, 0], 1), Ok(5_400 + 363));
        assert_eq!(with_bias(&[1, 4, 5, 5], &[4, 3, 3, 3], &[2, 2], true, &[1, 1], 1), Ok(5_400 + 432));
        // Grouped transposed: w[4,3,3,3] with groups 2 is C_in 4, C_out 6; each input channel
        // still meets 3 output channels (the same products), the bias 6 x 121.
        assert_eq!(with_bias(&[1, 4, 5, 5], &[4, 3, 3, 3], &[2, 2], true, &[0, 0], 2), Ok(5_400 + 6 * 121));
    }

    #[test]
    fn malformed_parameters_are_errors() {
        let f =
            with_args(|s| conv_args(s, &[1, 3, 8, 8], &[4, 3, 3, 3], &[0, 0], &[0, 0], &[1, 1], false, 1), convolution);
        assert_eq!(f, Err(FormulaError::UnexpectedShape));
        let f = with_args(|s| conv_args(s, &[1, 3, 8, 8], &[4, 3, 3], &[1], &[0], &[1], false, 1), convolution);
        assert_eq!(f, Err(FormulaError::UnexpectedShape));
    }
}
