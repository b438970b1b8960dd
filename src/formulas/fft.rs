//! Discrete Fourier transforms (`torch.fft`, `torch.stft`). Convention (the radix-2
//! Cooley-Tukey count, FFTW's benchmark convention): a complex transform of length `n` costs
//! `5 n log2 n` real FLOPs; a transform of real input (`r2c`) or to real output (`c2r`) costs
//! half the complex count over the same real shape. A multidimensional transform counts every
//! transformed dimension: `elements x 5 x sum(log2 n_d)` (halved for r2c and c2r). A normalized
//! transform adds its scaling: 2 FLOPs per complex output element, 1 per real one. Counts are
//! rounded to the nearest integer. Complex tensors are this family's own: the count is already
//! in real FLOPs.

use super::{require_tensor, FormulaError};
use crate::args::Args;

/// The index in `shape` of dimension `d` (negative counts from the end).
fn axis(shape: &[i64], d: i64) -> Result<usize, FormulaError> {
    let index = if d < 0 { d + shape.len() as i64 } else { d };
    usize::try_from(index).ok().filter(|&i| i < shape.len()).ok_or(FormulaError::UnexpectedShape)
}

/// The size of the last transformed dimension of `shape`, and its index.
fn last_transformed(shape: &[i64], dims: &[i64]) -> Result<(usize, i64), FormulaError> {
    let index = axis(shape, *dims.last().ok_or(FormulaError::UnexpectedShape)?)?;
    Ok((index, shape[index]))
}

/// `sum(log2 n_d)` over the transformed dimensions `dims` of `shape`, with the dimension at
/// `resized` taking the size `size` (an output shape read off the input's, without a copy).
fn log_lengths(shape: &[i64], dims: &[i64], resized: Option<(usize, i64)>) -> Result<f64, FormulaError> {
    let mut total = 0.0;
    for &d in dims {
        let index = axis(shape, d)?;
        let n = match resized {
            Some((i, size)) if i == index => size,
            _ => shape[index],
        };
        if n < 0 {
            return Err(FormulaError::UnexpectedShape);
        }
        if n > 1 {
            total += (n as f64).log2();
        }
    }
    Ok(total)
}

/// Elements of `shape` with the dimension at `index` resized to `size`.
fn resized_numel(shape: &[i64], index: usize, size: i64) -> Result<u64, FormulaError> {
    let rest = super::product(&shape[..index])?;
    let after = super::product(&shape[index + 1..])?;
    let size = u64::try_from(size).map_err(|_| FormulaError::UnexpectedShape)?;
    super::mul_all(&[rest, size, after])
}

fn numel(shape: &[i64]) -> Result<u64, FormulaError> {
    super::product(shape)
}

/// `elements x 5 x sum(log2 n) x share + scaling`, rounded; an overflow past 2^64 is an error.
fn transform(elements: u64, logs: f64, share: f64, scaling: u64) -> Result<u64, FormulaError> {
    let flops = (elements as f64 * 5.0 * logs * share).round() + scaling as f64;
    if !(0.0..1.8e19).contains(&flops) {
        return Err(FormulaError::Overflow);
    }
    Ok(flops as u64)
}

/// `_fft_c2c(self, dim, normalization, forward)`.
pub fn c2c(args: &Args) -> Result<u64, FormulaError> {
    let input = require_tensor(args, 0)?;
    let dims = args.int_list(1).ok_or(FormulaError::MissingArgument(1))?;
    let elements = numel(input.dims)?;
    let scaling = if args.int(2).unwrap_or(0) != 0 { elements.saturating_mul(2) } else { 0 };
    transform(elements, log_lengths(input.dims, dims, None)?, 1.0, scaling)
}

/// `_fft_r2c(self, dim, normalization, onesided)`: real input, complex output (the last
/// transformed dimension halved when one-sided).
pub fn r2c(args: &Args) -> Result<u64, FormulaError> {
    let input = require_tensor(args, 0)?;
    let dims = args.int_list(1).ok_or(FormulaError::MissingArgument(1))?;
    let elements = numel(input.dims)?;
    let scaling = if args.int(2).unwrap_or(0) == 0 {
        0
    } else if args.bool(3).unwrap_or(true) {
        let (index, size) = last_transformed(input.dims, dims)?;
        resized_numel(input.dims, index, size / 2 + 1)?.saturating_mul(2)
    } else {
        elements.saturating_mul(2)
    };
    transform(elements, log_lengths(input.dims, dims, None)?, 0.5, scaling)
}

/// `_fft_c2r(self, dim, normalization, last_dim_size)`: complex (one-sided) input, real output
/// whose last transformed dimension has `last_dim_size` elements.
pub fn c2r(args: &Args) -> Result<u64, FormulaError> {
    let input = require_tensor(args, 0)?;
    let dims = args.int_list(1).ok_or(FormulaError::MissingArgument(1))?;
    let last_size = args.int(3).ok_or(FormulaError::MissingArgument(3))?;
    let (index, _) = last_transformed(input.dims, dims)?;
    let elements = resized_numel(input.dims, index, last_size)?;
    let scaling = if args.int(2).unwrap_or(0) != 0 { elements } else { 0 };
    transform(elements, log_lengths(input.dims, dims, Some((index, last_size)))?, 0.5, scaling)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::build::*;
    use crate::formulas::testing::with_args;

    #[test]
    fn complex_transforms() {
        // fft over the 16 of [4, 16] complex: 64 x 5 x 4 = 1280; normalized (ortho) + 128.
        let c2c_of = |norm: i64| {
            with_args(
                |s| {
                    complex_tensor(s, &[4, 16]);
                    ints(s, &[1]);
                    int(s, norm);
                    boolean(s, true);
                },
                c2c,
            )
        };
        assert_eq!(c2c_of(0), Ok(1280));
        assert_eq!(c2c_of(1), Ok(1408));
        // fft2 over [8, 16]: 128 x 5 x (3 + 4) = 4480.
        let fft2 = with_args(
            |s| {
                complex_tensor(s, &[8, 16]);
                ints(s, &[0, 1]);
                int(s, 0);
                boolean(s, true);
            },
            c2c,
        );
        assert_eq!(fft2, Ok(4480));
    }

    #[test]
    fn real_transforms_count_half() {
        // rfft of real [4, 16]: 64 x 5 x 4 / 2 = 640; normalized: + 2 x (4 x 9) = 72.
        let r2c_of = |norm: i64| {
            with_args(
                |s| {
                    tensor(s, &[4, 16]);
                    ints(s, &[1]);
                    int(s, norm);
                    boolean(s, true);
                },
                r2c,
            )
        };
        assert_eq!(r2c_of(0), Ok(640));
        assert_eq!(r2c_of(2), Ok(712));
        // irfft of complex [4, 9] to 16 real: 64 x 5 x 4 / 2 = 640; normalized + 64.
        let c2r_of = |norm: i64| {
            with_args(
                |s| {
                    complex_tensor(s, &[4, 9]);
                    ints(s, &[1]);
                    int(s, norm);
                    int(s, 16);
                },
                c2r,
            )
        };
        assert_eq!(c2r_of(0), Ok(640));
        assert_eq!(c2r_of(2), Ok(704));
        // A length that is not a power of two: 3 x 5 x log2(12) / 2, rounded: 3 x 5 x 3.585 / 2 = 26.89 -> 27... x 12.
        let odd = with_args(
            |s| {
                tensor(s, &[3, 12]);
                ints(s, &[-1]);
                int(s, 0);
                boolean(s, true);
            },
            r2c,
        );
        assert_eq!(odd, Ok((36.0f64 * 5.0 * 12f64.log2() / 2.0).round() as u64));
        assert_eq!(odd, Ok(323));
    }
}
