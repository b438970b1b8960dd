//! Interpolation (`F.interpolate`). Convention (fvcore's `upsample_bilinear2d`: 4 FLOPs per
//! output element): one FLOP per interpolation tap per output element, so linear 2, bilinear 4,
//! bicubic 16, trilinear 8. A backward pass spreads each output gradient over the same taps: the
//! same count per output-gradient element. Nearest-neighbour forward only copies (ignored); its
//! backward sums the output gradients that share an input element: 1 FLOP per output-gradient
//! element.

use super::{mul, product, require_tensor, FormulaError};
use crate::args::{Arg, Args};

/// `upsample_*(input, output_size, align_corners, scales...)` and the `.vec` overloads
/// `(input, output_size?, align_corners, scale_factors?)`. `N` spatial dimensions, `TAPS` input
/// elements read per output element. A `.vec` call without an output size (scale factors only)
/// is a composite that computes the size and calls the sized overload: the session descends.
pub fn forward<const N: usize, const TAPS: u64>(args: &Args) -> Result<u64, FormulaError> {
    let input = require_tensor(args, 0)?;
    let leading = input.dims.len().checked_sub(N).ok_or(FormulaError::UnexpectedShape)?;
    let size = match args.get(1) {
        Some(Arg::IntList(size)) if size.len() == N => size,
        Some(Arg::IntList(_)) => return Err(FormulaError::UnexpectedShape),
        _ => return Err(FormulaError::Descend),
    };
    mul(mul(product(&input.dims[..leading])?, product(size)?)?, TAPS)
}

/// `upsample_*_backward(grad_output, output_size, input_size, ...)`: `TAPS` per element of
/// `grad_output`.
pub fn backward<const TAPS: u64>(args: &Args) -> Result<u64, FormulaError> {
    mul(require_tensor(args, 0)?.numel().ok_or(FormulaError::Overflow)?, TAPS)
}

/// Taps of `grid_sampler_Nd`'s `interpolation_mode` (0 bilinear / trilinear, 1 nearest, 2
/// bicubic) in `N` spatial dimensions.
fn grid_taps(mode: Option<i64>, spatial: usize) -> Result<u64, FormulaError> {
    match (mode, spatial) {
        (Some(0), n) => Ok(1 << n),
        (Some(1), _) => Ok(1),
        (Some(2), 2) => Ok(16),
        _ => Err(FormulaError::UnexpectedShape),
    }
}

/// Output elements of a grid sample: `N x C` of `input` times the grid's sample points
/// (`grid` is `[N, H_out, W_out(, D_out), dims]`), and the taps of each.
fn grid_samples(args: &Args, input: usize, grid: usize, mode: usize) -> Result<u64, FormulaError> {
    let (input, grid) = (require_tensor(args, input)?, require_tensor(args, grid)?);
    let spatial = grid.dims.len().checked_sub(2).filter(|&n| n >= 1).ok_or(FormulaError::UnexpectedShape)?;
    if input.dims.len() != spatial + 2 {
        return Err(FormulaError::UnexpectedShape);
    }
    let points = product(&grid.dims[..spatial + 1])?;
    let channels = u64::try_from(input.dims[1]).map_err(|_| FormulaError::UnexpectedShape)?;
    mul(mul(points, channels)?, grid_taps(args.int(mode), spatial)?)
}

/// `grid_sampler_2d(input, grid, interpolation_mode, padding_mode, align_corners)` (and 3d):
/// one FLOP per tap per output element, as interpolation.
pub fn grid_sampler(args: &Args) -> Result<u64, FormulaError> {
    grid_samples(args, 0, 1, 2)
}

/// `grid_sampler_2d_backward(grad_output, input, grid, interpolation_mode, ...)`: the input's
/// and the grid's gradients over the same taps, twice the forward.
pub fn grid_sampler_backward(args: &Args) -> Result<u64, FormulaError> {
    mul(grid_samples(args, 1, 2, 3)?, 2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::build::*;
    use crate::formulas::testing::with_args;

    #[test]
    fn bilinear_forward_counts_four_taps_per_output_element() {
        // [2,3,4,4] -> [8,8]: 2*3*64 outputs x 4 = 1536.
        let f = with_args(
            |s| {
                tensor(s, &[2, 3, 4, 4]);
                ints(s, &[8, 8]);
                boolean(s, false);
                none(s);
                none(s);
            },
            forward::<2, 4>,
        );
        assert_eq!(f, Ok(1536));
        // Linear 1-D: [1,2,5] -> [10]: 20 outputs x 2 taps.
        let linear = with_args(
            |s| {
                tensor(s, &[1, 2, 5]);
                ints(s, &[10]);
                boolean(s, true);
            },
            forward::<1, 2>,
        );
        assert_eq!(linear, Ok(40));
    }

    #[test]
    fn scale_factor_calls_descend_and_bad_sizes_are_errors() {
        let vec = with_args(
            |s| {
                tensor(s, &[1, 1, 4, 4]);
                none(s);
                boolean(s, false);
                none(s);
            },
            forward::<2, 4>,
        );
        assert_eq!(vec, Err(FormulaError::Descend));
        let wrong = with_args(
            |s| {
                tensor(s, &[1, 1, 4, 4]);
                ints(s, &[8]);
            },
            forward::<2, 4>,
        );
        assert_eq!(wrong, Err(FormulaError::UnexpectedShape));
    }

    #[test]
    fn backward_counts_output_gradient_elements() {
        let f = with_args(
            |s| {
                tensor(s, &[2, 3, 8, 8]);
                ints(s, &[8, 8]);
                ints(s, &[2, 3, 4, 4]);
                boolean(s, false);
            },
            backward::<4>,
        );
        assert_eq!(f, Ok(1536));
    }

    #[test]
    fn grid_samples_count_taps_per_output_element() {
        // input [1, 3, 8, 8], grid [1, 4, 4, 2]: 3 x 16 outputs; bilinear 4 taps = 192.
        let sample = |mode: i64| {
            with_args(
                |s| {
                    tensor(s, &[1, 3, 8, 8]);
                    tensor(s, &[1, 4, 4, 2]);
                    int(s, mode);
                },
                grid_sampler,
            )
        };
        assert_eq!((sample(0), sample(1), sample(2)), (Ok(192), Ok(48), Ok(768)));
        assert_eq!(sample(7), Err(FormulaError::UnexpectedShape));
        let backward = with_args(
            |s| {
                tensor(s, &[1, 3, 4, 4]);
                tensor(s, &[1, 3, 8, 8]);
                tensor(s, &[1, 4, 4, 2]);
                int(s, 0);
            },
            grid_sampler_backward,
        );
        assert_eq!(backward, Ok(384));
    }
}
