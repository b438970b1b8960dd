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

/// Taps read along one dimension by antialiased resampling from `input` to `output` elements:
/// PyTorch's (and PIL's) filter window per output element, `support` (the filter's: bilinear 1,
/// bicubic 2, lanczos 3) widened by the scale when downsampling, clipped at the borders.
fn antialias_taps(
    input: i64,
    output: i64,
    support: f64,
    align_corners: bool,
    scale: Option<f64>,
) -> Result<u64, FormulaError> {
    if input < 0 || output < 0 {
        return Err(FormulaError::UnexpectedShape);
    }
    let scale = if align_corners {
        if output > 1 {
            (input - 1) as f64 / (output - 1) as f64
        } else {
            0.0
        }
    } else {
        scale.filter(|&s| s > 0.0).map_or(input as f64 / output.max(1) as f64, |s| 1.0 / s)
    };
    let support = if scale >= 1.0 { support * scale } else { support };
    let mut taps = 0u64;
    for i in 0..output {
        let center = scale * (i as f64 + 0.5);
        let low = ((center - support + 0.5) as i64).max(0);
        let high = ((center + support + 0.5) as i64).min(input);
        taps = super::add(taps, u64::try_from(high - low).unwrap_or(0))?;
    }
    Ok(taps)
}

/// Antialiased resampling of `[N, C, H, W]` to `[N, C, H', W']`: separable, a pass along the
/// width (`N C H` rows) then one along the height (`N C W'` columns), 1 FLOP per tap.
fn antialias_work(
    input: &[i64],
    output: &[i64],
    support: f64,
    args: &Args,
    align: usize,
    scales: usize,
) -> Result<u64, FormulaError> {
    let (&[n, c, h, w], &[h2, w2]) = (input, output) else { return Err(FormulaError::UnexpectedShape) };
    let align_corners = args.bool(align).unwrap_or(false);
    let (scale_h, scale_w) = (args.scalar(scales), args.scalar(scales + 1));
    let planes = product(&[n, c])?;
    let across = mul(
        mul(planes, u64::try_from(h).map_err(|_| FormulaError::UnexpectedShape)?)?,
        antialias_taps(w, w2, support, align_corners, scale_w)?,
    )?;
    let down = mul(
        mul(planes, u64::try_from(w2).map_err(|_| FormulaError::UnexpectedShape)?)?,
        antialias_taps(h, h2, support, align_corners, scale_h)?,
    )?;
    super::add(across, down)
}

/// `_upsample_{bilinear,bicubic,lanczos}2d_aa(input, output_size, align_corners, scales_h,
/// scales_w)` (`SUPPORT` 1, 2, 3); a `.vec` call without an output size is a composite that
/// computes it (the session descends).
pub fn antialias<const SUPPORT: u64>(args: &Args) -> Result<u64, FormulaError> {
    let input = require_tensor(args, 0)?;
    let size = match args.get(1) {
        Some(Arg::IntList(size)) => size,
        _ => return Err(FormulaError::Descend),
    };
    antialias_work(input.dims, size, SUPPORT as f64, args, 2, 3)
}

/// `_upsample_*2d_aa_backward(grad_output, output_size, input_size, align_corners, scales_h,
/// scales_w)`: each output gradient spread back over the same taps.
pub fn antialias_backward<const SUPPORT: u64>(args: &Args) -> Result<u64, FormulaError> {
    let output = args.int_list(1).ok_or(FormulaError::MissingArgument(1))?;
    let input = args.int_list(2).ok_or(FormulaError::MissingArgument(2))?;
    antialias_work(input, output, SUPPORT as f64, args, 3, 4)
}

/// `cudnn_grid_sampler(input, grid)`: bilinear only (cuDNN's one mode), as `grid_sampler_2d`.
pub fn cudnn_grid_sampler(args: &Args) -> Result<u64, FormulaError> {
    let (input, grid) = (require_tensor(args, 0)?, require_tensor(args, 1)?);
    let points = product(grid.dims.get(..3).ok_or(FormulaError::UnexpectedShape)?)?;
    mul(mul(points, super::dim(&input, 1)?)?, 4)
}

/// `cudnn_grid_sampler_backward(input, grid, grad_output)`: twice the forward.
pub fn cudnn_grid_sampler_backward(args: &Args) -> Result<u64, FormulaError> {
    mul(cudnn_grid_sampler(args)?, 2)
}

/// Grid points `N H W` of `cudnn_affine_grid_generator(theta, N, C, H, W)`.
fn grid_points(args: &Args) -> Result<u64, FormulaError> {
    let int = |i: usize| {
        u64::try_from(args.int(i).ok_or(FormulaError::MissingArgument(i))?).map_err(|_| FormulaError::UnexpectedShape)
    };
    super::mul_all(&[int(1)?, int(3)?, int(4)?])
}

/// `cudnn_affine_grid_generator(theta [N, 2, 3], N, C, H, W)`: 8 FLOPs per grid point.
pub fn affine_grid(args: &Args) -> Result<u64, FormulaError> {
    mul(grid_points(args)?, 8)
}

/// `cudnn_affine_grid_generator_backward(grad, N, C, H, W)`: 12 FLOPs per grid point.
pub fn affine_grid_backward(args: &Args) -> Result<u64, FormulaError> {
    mul(grid_points(args)?, 12)
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

    #[test]
    fn antialiased_resampling_counts_each_window() {
        // [1, 2, 8, 8] to 4 x 4 bilinear: scale 2, support 2; windows from center 2i + 1:
        // [0, 3), [1, 5), [3, 7), [5, 8) = 3 + 4 + 4 + 3 = 14 taps per line. Width pass: 2 x 8
        // rows x 14; height pass: 2 x 4 columns x 14. 224 + 112 = 336.
        let call = |s: &mut Vec<i64>| {
            tensor(s, &[1, 2, 8, 8]);
            ints(s, &[4, 4]);
            boolean(s, false);
            none(s);
            none(s);
        };
        assert_eq!(with_args(call, antialias::<1>), Ok(336));
        let backward = |s: &mut Vec<i64>| {
            tensor(s, &[1, 2, 4, 4]);
            ints(s, &[4, 4]);
            ints(s, &[1, 2, 8, 8]);
            boolean(s, false);
            none(s);
            none(s);
        };
        assert_eq!(with_args(backward, antialias_backward::<1>), Ok(336));
        // Upsampling 4 to 8 (scale 0.5, support 1): windows around 0.25, 0.75, ... clipped:
        // [0, 0) is impossible, every window holds 1 or 2 taps: 1 + 2 + 2 + 2 + 2 + 2 + 2 + 1 = 14.
        assert_eq!(antialias_taps(4, 8, 1.0, false, None), Ok(14));
    }

    #[test]
    fn cudnn_grids() {
        // [2, 3, 5, 5] sampled at a [2, 4, 4, 2] grid: 32 points x 3 channels x 4 taps.
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[2, 3, 5, 5]);
                    tensor(s, &[2, 4, 4, 2]);
                },
                cudnn_grid_sampler
            ),
            Ok(384)
        );
        let grid = |s: &mut Vec<i64>| {
            tensor(s, &[2, 2, 3]);
            for v in [2, 3, 4, 5] {
                int(s, v);
            }
        };
        // 2 x 4 x 5 points: 40 x 8 and 40 x 12.
        assert_eq!(with_args(grid, affine_grid), Ok(320));
        assert_eq!(with_args(grid, affine_grid_backward), Ok(480));
    }
}
