//! Pooling. Convention: one FLOP per window element visited (max: a compare, average: an add,
//! the final division of an average folded into that count); backward of max pooling routes one
//! gradient per output element (1 FLOP each), backward of average pooling spreads each output
//! gradient over its window (one FLOP per window element). Adaptive pooling counts its exact,
//! possibly overlapping, windows.

use super::{mul, product, require_tensor, FormulaError};
use crate::args::Args;

/// `floor_or_ceil((in + 2p - d(k-1) - 1) / s) + 1`, PyTorch's `pooling_output_shape`.
fn pooled_size(input: i64, kernel: i64, stride: i64, pad: i64, dilation: i64, ceil: bool) -> Result<u64, FormulaError> {
    if stride <= 0 || kernel <= 0 || dilation <= 0 || input < 0 {
        return Err(FormulaError::UnexpectedShape);
    }
    let (input, kernel, stride, pad, dilation) =
        (input as i128, kernel as i128, stride as i128, pad as i128, dilation as i128);
    let span = input + 2 * pad - dilation * (kernel - 1) - 1 + if ceil { stride - 1 } else { 0 };
    let mut out = span.div_euclid(stride) + 1;
    if ceil && (out - 1) * stride >= input + pad {
        out -= 1;
    }
    u64::try_from(out.max(0)).map_err(|_| FormulaError::Overflow)
}

/// A parameter list for `N` spatial dimensions: one value for all, or one per dimension; an
/// empty `stride` means "the kernel size".
fn param<const N: usize>(list: &[i64], i: usize, default: Option<&[i64]>) -> Result<i64, FormulaError> {
    match (list.len(), default) {
        (0, Some(d)) => param::<N>(d, i, None),
        (1, _) => Ok(list[0]),
        (n, _) if n == N => Ok(list[i]),
        _ => Err(FormulaError::UnexpectedShape),
    }
}

/// Leading (batch, channel) elements and the spatial sizes of an `N`-d pooling input.
fn split<const N: usize>(dims: &[i64]) -> Result<(u64, &[i64]), FormulaError> {
    let lead = dims.len().checked_sub(N).ok_or(FormulaError::UnexpectedShape)?;
    Ok((product(&dims[..lead])?, &dims[lead..]))
}

/// Output elements of a windowed pooling `(self, kernel, stride, padding, [dilation,] ceil_mode)`.
fn windowed_output<const N: usize>(
    args: &Args,
    dilation_at: Option<usize>,
    ceil_at: usize,
) -> Result<(u64, u64), FormulaError> {
    let input = require_tensor(args, 0)?;
    let kernel = args.int_list(1).ok_or(FormulaError::MissingArgument(1))?;
    let stride = args.int_list(2).ok_or(FormulaError::MissingArgument(2))?;
    let padding = args.int_list(3).ok_or(FormulaError::MissingArgument(3))?;
    let dilation = match dilation_at {
        Some(i) => args.int_list(i).ok_or(FormulaError::MissingArgument(i))?,
        None => &[1],
    };
    let ceil = args.bool(ceil_at).ok_or(FormulaError::MissingArgument(ceil_at))?;
    let (lead, spatial) = split::<N>(input.dims)?;
    let mut outputs = lead;
    let mut window = 1u64;
    for (i, &size) in spatial.iter().enumerate() {
        let k = param::<N>(kernel, i, None)?;
        let out = pooled_size(
            size,
            k,
            param::<N>(stride, i, Some(kernel))?,
            param::<N>(padding, i, None)?,
            param::<N>(dilation, i, None)?,
            ceil,
        )?;
        outputs = mul(outputs, out)?;
        window = mul(window, k as u64)?;
    }
    Ok((outputs, window))
}

/// `max_poolNd[_with_indices](self, kernel_size, stride, padding, dilation, ceil_mode)`:
/// output elements x window size.
pub fn max_pool<const N: usize>(args: &Args) -> Result<u64, FormulaError> {
    let (outputs, window) = windowed_output::<N>(args, Some(4), 5)?;
    mul(outputs, window)
}

/// `fractional_max_poolNd(self, kernel_size, output_size, random_samples)`: output elements x
/// window size, as the other max pools.
pub fn fractional_max_pool<const N: usize>(args: &Args) -> Result<u64, FormulaError> {
    let input = require_tensor(args, 0)?;
    let leading = input.dims.len().checked_sub(N).ok_or(FormulaError::UnexpectedShape)?;
    let kernel = args.int_list(1).ok_or(FormulaError::MissingArgument(1))?;
    let output = args.int_list(2).ok_or(FormulaError::MissingArgument(2))?;
    if kernel.len() != N || output.len() != N {
        return Err(FormulaError::UnexpectedShape);
    }
    mul(mul(product(&input.dims[..leading])?, product(output)?)?, product(kernel)?)
}

/// `avg_poolNd(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor)`.
pub fn avg_pool<const N: usize>(args: &Args) -> Result<u64, FormulaError> {
    let (outputs, window) = windowed_output::<N>(args, None, 4)?;
    mul(outputs, window)
}

/// `max_poolNd_with_indices_backward(grad_output, ...)`: one FLOP per output gradient.
pub fn max_pool_backward(args: &Args) -> Result<u64, FormulaError> {
    require_tensor(args, 0)?.numel().ok_or(FormulaError::Overflow)
}

/// `avg_poolNd_backward(grad_output, self, kernel_size, ...)`: grad elements x window size.
pub fn avg_pool_backward<const N: usize>(args: &Args) -> Result<u64, FormulaError> {
    let grad = require_tensor(args, 0)?;
    let kernel = args.int_list(2).ok_or(FormulaError::MissingArgument(2))?;
    let mut window = 1u64;
    for i in 0..N {
        window = mul(window, u64::try_from(param::<N>(kernel, i, None)?).map_err(|_| FormulaError::UnexpectedShape)?)?;
    }
    mul(grad.numel().ok_or(FormulaError::Overflow)?, window)
}

/// Sum over one dimension of the adaptive windows' lengths: window `i` of `out` covers
/// `[floor(i*in/out), ceil((i+1)*in/out))`.
fn adaptive_visits(input: i64, output: i64) -> Result<u64, FormulaError> {
    if input < 0 || output < 0 {
        return Err(FormulaError::UnexpectedShape);
    }
    let (n, m) = (input as i128, output as i128);
    let mut total: i128 = 0;
    for i in 0..m {
        let start = (i * n) / m;
        let end = ((i + 1) * n + m - 1) / m;
        total += end - start;
    }
    u64::try_from(total).map_err(|_| FormulaError::Overflow)
}

fn adaptive_work<const N: usize>(input: &[i64], output_spatial: &[i64]) -> Result<u64, FormulaError> {
    let (lead, spatial) = split::<N>(input)?;
    let mut total = lead;
    for (i, &size) in spatial.iter().enumerate() {
        let out = param::<N>(output_spatial, i, None)?;
        total = mul(total, adaptive_visits(size, out)?)?;
    }
    Ok(total)
}

/// `_adaptive_avg_poolNd(self, output_size)` / `adaptive_max_poolNd(self, output_size)`.
pub fn adaptive_pool<const N: usize>(args: &Args) -> Result<u64, FormulaError> {
    let input = require_tensor(args, 0)?;
    let output = args.int_list(1).ok_or(FormulaError::MissingArgument(1))?;
    adaptive_work::<N>(input.dims, output)
}

/// `_adaptive_avg_poolNd_backward(grad_output, self)`: the forward's window visits.
pub fn adaptive_avg_pool_backward<const N: usize>(args: &Args) -> Result<u64, FormulaError> {
    let grad = require_tensor(args, 0)?;
    let input = require_tensor(args, 1)?;
    let (_, grad_spatial) = split::<N>(grad.dims)?;
    adaptive_work::<N>(input.dims, grad_spatial)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::build::*;
    use crate::formulas::testing::with_args;

    #[test]
    fn resnet_max_pool() {
        // x[1,64,112,112], k3 s2 p1: out 56x56; 64*56*56 outputs * 9 = 1_806_336.
        let f = with_args(
            |s| {
                tensor(s, &[1, 64, 112, 112]);
                ints(s, &[3, 3]);
                ints(s, &[2, 2]);
                ints(s, &[1, 1]);
                ints(s, &[1, 1]);
                boolean(s, false);
            },
            max_pool::<2>,
        );
        assert_eq!(f, Ok(1_806_336));
    }

    #[test]
    fn ceil_mode_and_default_stride() {
        // x[1,1,5,5], k2, stride [] (= 2), ceil: out 3x3 = 9 outputs * 4 = 36; floor: 2x2 -> 16.
        let go = |ceil| {
            with_args(
                |s| {
                    tensor(s, &[1, 1, 5, 5]);
                    ints(s, &[2]);
                    ints(s, &[]);
                    ints(s, &[0]);
                    ints(s, &[1]);
                    boolean(s, ceil);
                },
                max_pool::<2>,
            )
        };
        assert_eq!(go(true), Ok(36));
        assert_eq!(go(false), Ok(16));
    }

    #[test]
    fn avg_pool_and_backwards() {
        // avg_pool2d x[2,3,4,4], k2 s2: out 2x2: 2*3*4 outputs * 4 = 96.
        let f = with_args(
            |s| {
                tensor(s, &[2, 3, 4, 4]);
                ints(s, &[2, 2]);
                ints(s, &[2, 2]);
                ints(s, &[0, 0]);
                boolean(s, false);
                boolean(s, true);
                none(s);
            },
            avg_pool::<2>,
        );
        assert_eq!(f, Ok(96));
        let f = with_args(
            |s| {
                tensor(s, &[2, 3, 2, 2]);
                tensor(s, &[2, 3, 4, 4]);
                ints(s, &[2, 2]);
            },
            avg_pool_backward::<2>,
        );
        assert_eq!(f, Ok(96));
        let f = with_args(
            |s| {
                tensor(s, &[1, 64, 56, 56]);
                tensor(s, &[1, 64, 112, 112]);
            },
            max_pool_backward,
        );
        assert_eq!(f, Ok(200_704));
    }

    #[test]
    fn adaptive_windows_are_exact() {
        // 5 -> 3 windows: [0,2) [1,4) [3,5): 2+3+2 = 7 per row; 2d: 7*7 = 49 per channel, x2 channels.
        let f = with_args(
            |s| {
                tensor(s, &[1, 2, 5, 5]);
                ints(s, &[3, 3]);
            },
            adaptive_pool::<2>,
        );
        assert_eq!(f, Ok(98));
        // Divisible case visits every input element once.
        let f = with_args(
            |s| {
                tensor(s, &[1, 512, 7, 7]);
                ints(s, &[1, 1]);
            },
            adaptive_pool::<2>,
        );
        assert_eq!(f, Ok(25_088));
        let f = with_args(
            |s| {
                tensor(s, &[1, 2, 3, 3]);
                tensor(s, &[1, 2, 5, 5]);
            },
            adaptive_avg_pool_backward::<2>,
        );
        assert_eq!(f, Ok(98));
    }

    #[test]
    fn fractional_max_pool_counts_its_windows() {
        // [1, 2, 8, 8] -> 3x3 outputs with 2x2 windows: 2 x 9 x 4 = 72.
        let f = with_args(
            |s| {
                tensor(s, &[1, 2, 8, 8]);
                ints(s, &[2, 2]);
                ints(s, &[3, 3]);
                tensor(s, &[1, 2, 2]);
            },
            fractional_max_pool::<2>,
        );
        assert_eq!(f, Ok(72));
    }
}
