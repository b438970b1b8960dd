//! Normalization. Convention (fvcore's `batchnorm_flop_jit` / `norm_flop_counter`, per input
//! element): training-mode normalization computes statistics and normalizes, 4 FLOPs per
//! element, 5 with an affine weight; evaluation mode only normalizes with stored statistics,
//! 1 FLOP per element, 2 with an affine weight. A backward pass costs twice the forward of the
//! same mode (the input gradient, plus the reductions for the statistics and affine gradients),
//! the usual backward = 2 x forward rule. Layer and group normalization always compute their
//! statistics: they cost what training-mode batch normalization does, in every mode.

use super::{add, mul, product, require_tensor, FormulaError};
use crate::args::Args;

fn per_element(training: bool, affine: bool) -> u64 {
    match (training, affine) {
        (true, true) => 5,
        (true, false) => 4,
        (false, true) => 2,
        (false, false) => 1,
    }
}

/// The first boolean argument at or after `from`: `training` in `native_batch_norm` and both
/// `_native_batch_norm_legit` overloads (which differ in whether running stats are passed).
fn first_bool(args: &Args, from: usize) -> Result<bool, FormulaError> {
    (from..args.len()).find_map(|i| args.bool(i)).ok_or(FormulaError::MissingArgument(from))
}

/// `native_batch_norm(input, weight, bias, running_mean, running_var, training, ...)` and
/// `_native_batch_norm_legit(input, weight, bias, [running_mean, running_var,] training, ...)`.
pub fn batch_norm(args: &Args) -> Result<u64, FormulaError> {
    let input = require_tensor(args, 0)?;
    let training = first_bool(args, 3)?;
    mul(input.numel().ok_or(FormulaError::Overflow)?, per_element(training, args.has_tensor(1)))
}

/// `_native_batch_norm_legit_no_training(input, weight, bias, running_mean, running_var, ...)`.
pub fn batch_norm_no_training(args: &Args) -> Result<u64, FormulaError> {
    let input = require_tensor(args, 0)?;
    mul(input.numel().ok_or(FormulaError::Overflow)?, per_element(false, args.has_tensor(1)))
}

/// `native_batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean,
/// save_invstd, train, eps, output_mask)`: twice the forward of the same mode.
pub fn batch_norm_backward(args: &Args) -> Result<u64, FormulaError> {
    let input = require_tensor(args, 1)?;
    let training = args.bool(7).ok_or(FormulaError::MissingArgument(7))?;
    let forward = mul(input.numel().ok_or(FormulaError::Overflow)?, per_element(training, args.has_tensor(2)))?;
    mul(forward, 2)
}

fn numel_times(input_index: usize, args: &Args, per: u64) -> Result<u64, FormulaError> {
    mul(require_tensor(args, input_index)?.numel().ok_or(FormulaError::Overflow)?, per)
}

/// `native_layer_norm(input, normalized_shape, weight, bias, eps)`.
pub fn layer_norm(args: &Args) -> Result<u64, FormulaError> {
    numel_times(0, args, per_element(true, args.has_tensor(2)))
}

/// `native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias,
/// output_mask)`: twice the forward.
pub fn layer_norm_backward(args: &Args) -> Result<u64, FormulaError> {
    numel_times(1, args, 2 * per_element(true, args.has_tensor(5)))
}

/// `native_group_norm(input, weight, bias, N, C, HxW, group, eps)`.
pub fn group_norm(args: &Args) -> Result<u64, FormulaError> {
    numel_times(0, args, per_element(true, args.has_tensor(1)))
}

/// `native_group_norm_backward(grad_out, input, mean, rstd, weight, N, C, HxW, group,
/// output_mask)`: twice the forward.
pub fn group_norm_backward(args: &Args) -> Result<u64, FormulaError> {
    numel_times(1, args, 2 * per_element(true, args.has_tensor(4)))
}

/// `_fused_rms_norm(input, normalized_shape, weight, eps)`: the arithmetic of its decomposition
/// (the CompositeImplicitAutograd kernel that computes it on CPU: `pow`, `mean`, `add_`, `rsqrt`,
/// `mul`, `mul`), whichever kernel runs: per element a square, the mean's add and the scaling (3),
/// 4 with a weight; per normalized row the epsilon's add and the reciprocal square root (2).
pub fn rms_norm(args: &Args) -> Result<u64, FormulaError> {
    let input = require_tensor(args, 0)?;
    let normalized = args.int_list(1).ok_or(FormulaError::MissingArgument(1))?.len();
    let batch = input.dims.len().checked_sub(normalized).ok_or(FormulaError::UnexpectedShape)?;
    let rows = product(&input.dims[..batch])?;
    let per_element = mul(input.numel().ok_or(FormulaError::Overflow)?, 3 + u64::from(args.has_tensor(2)))?;
    add(per_element, mul(rows, 2)?)
}

/// `_fused_rms_norm_backward(grad_out, input, normalized_shape, rstd, weight, output_mask)`
/// (CUDA): what the backward of its CPU decomposition counts (`x * rsqrt(mean(x^2) + eps) * w`
/// differentiated by autograd), for `N` elements in `R` normalized rows, by the outputs asked:
/// - the input's gradient, `(8 + weight) N + 3 R`: `grad * w` (with a weight), `g * rstd`, the
///   row sums of `g * x` (a multiply and an add per element), `rsqrt`'s derivative per row
///   (`rstd^3`, `* -0.5`, `* the sum`: 3), the mean's (a divide by the row size per element),
///   the square's (`x^1`, `* 2`, `* the gradient`: 3 per element), and the sum of the two paths
///   into `x` (1 per element);
/// - the weight's, `2 N`: `grad * xhat` and the sum over the rows.
///
/// `[4, 64]` with a weight, both asked: `9 x 256 + 12 + 512 = 2,828`, as on the CPU.
pub fn rms_norm_backward(args: &Args) -> Result<u64, FormulaError> {
    let input = require_tensor(args, 1)?;
    let normalized = args.int_list(2).ok_or(FormulaError::MissingArgument(2))?.len();
    let batch = input.dims.len().checked_sub(normalized).ok_or(FormulaError::UnexpectedShape)?;
    let rows = product(&input.dims[..batch])?;
    let n = input.numel().ok_or(FormulaError::Overflow)?;
    let weighted = args.has_tensor(4);
    // The schema's default asks for both (the dispatcher always hands it over).
    let (input_grad, weight_grad) = match args.bool_list(5) {
        Some(&[input, weight]) => (input != 0, weight != 0),
        None => (true, true),
        Some(_) => return Err(FormulaError::UnexpectedShape),
    };
    let mut flops = 0;
    if input_grad {
        flops = add(mul(n, 8 + u64::from(weighted))?, mul(rows, 3)?)?;
    }
    if weight_grad && weighted {
        flops = add(flops, mul(n, 2)?)?;
    }
    Ok(flops)
}

/// `_weight_norm_interface(v, g, dim)`: `v`'s norms (a square and an add per element) and
/// `w = v g / |v|` (a multiply per element; the per-row divisions are not counted): 3 per
/// element of `v`.
pub fn weight_norm(args: &Args) -> Result<u64, FormulaError> {
    numel_times(0, args, 3)
}

/// `_weight_norm_interface_backward(grad_w, saved_v, saved_g, saved_norms, dim)`: twice the
/// forward.
pub fn weight_norm_backward(args: &Args) -> Result<u64, FormulaError> {
    numel_times(1, args, 6)
}

/// `_batch_norm_with_update(input, weight, bias, running_mean, running_var, momentum, eps)`:
/// training mode always (it updates the running statistics).
pub fn batch_norm_with_update(args: &Args) -> Result<u64, FormulaError> {
    numel_times(0, args, per_element(true, args.has_tensor(1)))
}

/// `cudnn_batch_norm_backward` / `miopen_batch_norm_backward(input, grad_output, weight, ...)`:
/// these kernels back training-mode normalization only; twice the forward.
pub fn backend_batch_norm_backward(args: &Args) -> Result<u64, FormulaError> {
    mul(numel_times(0, args, per_element(true, args.has_tensor(2)))?, 2)
}

// SyncBatchNorm's kernels split the same per-element counts across ranks: the training forward's
// 4 (5 affine) is the statistics' 2 and the normalization's 2 (+1 affine); the backward's 8 (10
// affine) is the reductions' 4 and the elementwise gradient's 4 (+2 affine). Combining the
// ranks' statistics costs 4 per gathered statistic.

/// `batch_norm_stats(input, eps)` and `batch_norm_update_stats(input, running_mean,
/// running_var, momentum)`: the statistics, 2 per input element.
pub fn sync_stats(args: &Args) -> Result<u64, FormulaError> {
    numel_times(0, args, 2)
}

/// `batch_norm_gather_stats(input, mean [ranks, C], invstd, ...)` and `..._with_counts`.
pub fn sync_gather(args: &Args) -> Result<u64, FormulaError> {
    numel_times(1, args, 4)
}

/// `batch_norm_elemt(input, weight, bias, mean, invstd, eps)`: 2 per element, 3 affine.
pub fn sync_elemt(args: &Args) -> Result<u64, FormulaError> {
    numel_times(0, args, 2 + u64::from(args.has_tensor(1)))
}

/// `batch_norm_backward_reduce(grad_out, input, mean, invstd, weight, ...)`: 4 per element.
pub fn sync_backward_reduce(args: &Args) -> Result<u64, FormulaError> {
    numel_times(1, args, 4)
}

/// `batch_norm_backward_elemt(grad_out, input, mean, invstd, weight, sum_dy, sum_dy_xmu, count)`:
/// 4 per element, 6 affine.
pub fn sync_backward_elemt(args: &Args) -> Result<u64, FormulaError> {
    numel_times(1, args, 4 + 2 * u64::from(args.has_tensor(4)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::build::*;
    use crate::formulas::testing::with_args;

    fn native(s: &mut Vec<i64>, x: &[i64], affine: bool, training: bool) {
        tensor(s, x);
        if affine {
            tensor(s, &[x[1]]);
            tensor(s, &[x[1]]);
        } else {
            none(s);
            none(s);
        }
        tensor(s, &[x[1]]);
        tensor(s, &[x[1]]);
        boolean(s, training);
        double(s, 0.1);
        double(s, 1e-5);
    }

    #[test]
    fn batch_norm_modes() {
        // x[2,4,3,3] = 72 elements.
        assert_eq!(with_args(|s| native(s, &[2, 4, 3, 3], true, true), batch_norm), Ok(360));
        assert_eq!(with_args(|s| native(s, &[2, 4, 3, 3], false, true), batch_norm), Ok(288));
        assert_eq!(with_args(|s| native(s, &[2, 4, 3, 3], true, false), batch_norm), Ok(144));
        assert_eq!(with_args(|s| native(s, &[2, 4, 3, 3], false, false), batch_norm), Ok(72));
    }

    #[test]
    fn functional_overload_prices_as_batch_norm() {
        // _native_batch_norm_legit_functional(input, weight, bias, running_mean, running_var,
        // training, momentum, eps): x[2,4,3,3] in training with an affine: 5 per element = 360.
        let Some(crate::formulas::Rule::Formula(i)) =
            crate::formulas::lookup("aten::_native_batch_norm_legit_functional")
        else {
            panic!("no formula for the functional batch norm");
        };
        let mut stream = Vec::new();
        native(&mut stream, &[2, 4, 3, 3], true, true);
        let mut offsets = Vec::new();
        assert!(crate::args::index_stream(&stream, &mut offsets));
        assert_eq!(crate::formulas::FORMULAS[i].price(&crate::args::Args::new(&stream, &offsets)), Ok(360));
    }

    #[test]
    fn legit_overload_without_running_stats() {
        // _native_batch_norm_legit.no_stats(input, weight, bias, training, momentum, eps).
        let f = with_args(
            |s| {
                tensor(s, &[2, 4, 3, 3]);
                tensor(s, &[4]);
                tensor(s, &[4]);
                boolean(s, true);
                double(s, 0.1);
                double(s, 1e-5);
            },
            batch_norm,
        );
        assert_eq!(f, Ok(360));
    }

    #[test]
    fn no_training_and_backward() {
        let f = with_args(
            |s| {
                tensor(s, &[1, 8, 2, 2]);
                tensor(s, &[8]);
                tensor(s, &[8]);
                tensor(s, &[8]);
                tensor(s, &[8]);
            },
            batch_norm_no_training,
        );
        assert_eq!(f, Ok(64));
        let f = with_args(
            |s| {
                tensor(s, &[2, 4, 3, 3]);
                tensor(s, &[2, 4, 3, 3]);
                tensor(s, &[4]);
                tensor(s, &[4]);
                tensor(s, &[4]);
                tensor(s, &[4]);
                tensor(s, &[4]);
                boolean(s, true);
                double(s, 1e-5);
                bools(s, &[true, true, true]);
            },
            batch_norm_backward,
        );
        // 72 elements * 5 * 2 = 720.
        assert_eq!(f, Ok(720));
    }

    #[test]
    fn layer_norm_always_computes_statistics() {
        // x[2,3,4] = 24 elements over the last dim: 5 per element with weight and bias.
        let forward = |affine: bool| {
            with_args(
                |s| {
                    tensor(s, &[2, 3, 4]);
                    ints(s, &[4]);
                    if affine {
                        tensor(s, &[4]);
                        tensor(s, &[4]);
                    } else {
                        none(s);
                        none(s);
                    }
                    double(s, 1e-5);
                },
                layer_norm,
            )
        };
        assert_eq!(forward(true), Ok(120));
        assert_eq!(forward(false), Ok(96));
        let backward = with_args(
            |s| {
                tensor(s, &[2, 3, 4]);
                tensor(s, &[2, 3, 4]);
                ints(s, &[4]);
                tensor(s, &[2, 3, 1]);
                tensor(s, &[2, 3, 1]);
                tensor(s, &[4]);
                tensor(s, &[4]);
                bools(s, &[true, true, true]);
            },
            layer_norm_backward,
        );
        assert_eq!(backward, Ok(240));
    }

    #[test]
    fn group_norm_forward_and_backward() {
        // x[2,6,5] in 3 groups, affine: 60 elements x 5; backward without weight: 60 x 8.
        let forward = with_args(
            |s| {
                tensor(s, &[2, 6, 5]);
                tensor(s, &[6]);
                tensor(s, &[6]);
                int(s, 2);
                int(s, 6);
                int(s, 5);
                int(s, 3);
                double(s, 1e-5);
            },
            group_norm,
        );
        assert_eq!(forward, Ok(300));
        let backward = with_args(
            |s| {
                tensor(s, &[2, 6, 5]);
                tensor(s, &[2, 6, 5]);
                tensor(s, &[2, 3]);
                tensor(s, &[2, 3]);
                none(s);
                int(s, 2);
                int(s, 6);
                int(s, 5);
                int(s, 3);
                bools(s, &[true, false, false]);
            },
            group_norm_backward,
        );
        assert_eq!(backward, Ok(480));
    }

    #[test]
    fn rms_and_weight_norm() {
        use crate::args::build::*;
        use crate::formulas::testing::with_args;
        // RMSNorm(6) on [4, 6] with a weight: 24 x 4 + 4 rows x 2 = 104; without: 72 + 8 = 80
        // (what its CPU decomposition counts: pow 24, mean 24, add_ 4, rsqrt 4, mul 24, mul 24).
        let rms = |weighted: bool| {
            with_args(
                |s| {
                    tensor(s, &[4, 6]);
                    ints(s, &[6]);
                    if weighted {
                        tensor(s, &[6])
                    } else {
                        none(s)
                    }
                },
                rms_norm,
            )
        };
        assert_eq!((rms(true), rms(false)), (Ok(104), Ok(80)));
        // Backward, as the CPU decomposition's (N = 24 elements, R = 4 rows): the input's
        // gradient (8 + 1) x 24 + 3 x 4 = 228 with a weight, 8 x 24 + 12 = 204 without; the
        // weight's 2 x 24 = 48. [4, 64] with a weight, both: 9 x 256 + 3 x 4 + 2 x 256 = 2,828,
        // what autograd's backward of the decomposition counts on the CPU.
        let backward = |shape: &'static [i64], weighted: bool, mask: Option<[bool; 2]>| {
            with_args(
                move |s| {
                    tensor(s, shape);
                    tensor(s, shape);
                    ints(s, &shape[1..]);
                    tensor(s, &[shape[0], 1]);
                    if weighted {
                        tensor(s, &shape[1..])
                    } else {
                        none(s)
                    }
                    if let Some(mask) = mask {
                        bools(s, &mask);
                    }
                },
                rms_norm_backward,
            )
        };
        assert_eq!(backward(&[4, 6], true, Some([true, true])), Ok(228 + 48));
        assert_eq!(backward(&[4, 6], true, None), Ok(276), "the schema's default asks for both");
        assert_eq!(backward(&[4, 6], true, Some([true, false])), Ok(228));
        assert_eq!(backward(&[4, 6], true, Some([false, true])), Ok(48));
        assert_eq!(backward(&[4, 6], false, Some([true, true])), Ok(204), "no weight, no weight gradient");
        assert_eq!(backward(&[4, 64], true, Some([true, true])), Ok(2828));
        assert_eq!(backward(&[4, 64], false, Some([true, false])), Ok(2060));
        // weight_norm on v [4, 5]: 20 x 3 = 60; backward 120.
        assert_eq!(with_args(|s| tensor(s, &[4, 5]), weight_norm), Ok(60));
        let wn_backward = with_args(
            |s| {
                tensor(s, &[4, 5]);
                tensor(s, &[4, 5]);
            },
            weight_norm_backward,
        );
        assert_eq!(wn_backward, Ok(120));
    }

    #[test]
    fn backend_and_sync_batch_norm_kernels() {
        // [2, 3, 4] input, affine: training forward 5 x 24 = 120, backward 240.
        let input = |s: &mut Vec<i64>| tensor(s, &[2, 3, 4]);
        let with_update = with_args(
            |s| {
                input(s);
                tensor(s, &[3]);
                tensor(s, &[3]);
                tensor(s, &[3]);
                tensor(s, &[3]);
                double(s, 0.1);
                double(s, 1e-5);
            },
            batch_norm_with_update,
        );
        assert_eq!(with_update, Ok(120));
        let backward = with_args(
            |s| {
                input(s);
                input(s);
                tensor(s, &[3]);
            },
            backend_batch_norm_backward,
        );
        assert_eq!(backward, Ok(240));
        // SyncBatchNorm: stats 48 + elemt 72 = the forward's 120; reduce 96 + elemt 144 = 240.
        assert_eq!(
            with_args(
                |s| {
                    input(s);
                    double(s, 1e-5);
                },
                sync_stats
            ),
            Ok(48)
        );
        let elemt = with_args(
            |s| {
                input(s);
                tensor(s, &[3]);
                tensor(s, &[3]);
                tensor(s, &[3]);
                tensor(s, &[3]);
            },
            sync_elemt,
        );
        assert_eq!(elemt, Ok(72));
        let grads = |s: &mut Vec<i64>| {
            input(s);
            input(s);
            tensor(s, &[3]);
            tensor(s, &[3]);
            tensor(s, &[3]);
        };
        assert_eq!(with_args(grads, sync_backward_reduce), Ok(96));
        assert_eq!(with_args(grads, sync_backward_elemt), Ok(144));
        // Two ranks' statistics of 3 channels: 4 x 6.
        assert_eq!(
            with_args(
                |s| {
                    input(s);
                    tensor(s, &[2, 3]);
                },
                sync_gather
            ),
            Ok(24)
        );
    }
}
