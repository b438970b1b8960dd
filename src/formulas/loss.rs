//! Losses. Convention, per target element: `nll_loss` picks the target's log-probability and
//! accumulates it, 1 FLOP (2 with class weights: the multiply); its backward writes one scaled
//! gradient per target element, 1 FLOP (2 with class weights).
//!
//! Elementwise losses (`mse_loss`, `huber_loss`, `smooth_l1_loss`, `binary_cross_entropy`) count
//! the arithmetic of their definition per input element, plus 1 per element to accumulate when
//! the loss is reduced (`reduction` mean or sum; the mean's one division is not counted), plus 1
//! per element for a `weight` tensor; their backward kernels count per input element too.

use super::{add, mul, require_tensor, FormulaError};
use crate::args::{Arg, Args};

/// `reduction` (`torch.nn._reduction`): 0 none, 1 mean, 2 sum.
const REDUCTION_NONE: i64 = 0;

/// `per_element` FLOPs for each element of tensor `input`, + 1 when `reduction` (an argument
/// index) reduces, + 1 when argument `weight` is a tensor.
fn elementwise(
    args: &Args,
    input: usize,
    per_element: u64,
    reduction: Option<usize>,
    weight: Option<usize>,
) -> Result<u64, FormulaError> {
    let elements = require_tensor(args, input)?.numel().ok_or(FormulaError::Overflow)?;
    let reduces = reduction.is_some_and(|i| args.int(i).unwrap_or(1) != REDUCTION_NONE);
    let weighted = weight.is_some_and(|i| matches!(args.get(i), Some(Arg::Tensor(_))));
    mul(elements, add(per_element, u64::from(reduces) + u64::from(weighted))?)
}

/// `mse_loss(self, target, reduction)`: a difference and a square (2) per element.
pub fn mse_loss(args: &Args) -> Result<u64, FormulaError> {
    elementwise(args, 0, 2, Some(2), None)
}

/// `mse_loss_backward(grad_output, self, target, reduction)`: `2 (self - target) grad`, 3 per
/// element (the mean's `1 / n` folds into the scale).
pub fn mse_loss_backward(args: &Args) -> Result<u64, FormulaError> {
    elementwise(args, 1, 3, None, None)
}

/// `huber_loss(self, target, reduction, delta)`, `smooth_l1_loss(self, target, reduction, beta)`:
/// a difference, an absolute value, a comparison, and the costlier branch (the quadratic one:
/// a square and one scale) = 5 per element.
pub fn huber_loss(args: &Args) -> Result<u64, FormulaError> {
    elementwise(args, 0, 5, Some(2), None)
}

/// `huber_loss_backward(grad_output, self, target, reduction, delta)` (and smooth L1's): a
/// difference, a comparison, the branch's derivative (a scale or a sign), times the gradient =
/// 4 per element.
pub fn huber_loss_backward(args: &Args) -> Result<u64, FormulaError> {
    elementwise(args, 1, 4, None, None)
}

/// `binary_cross_entropy(self, target, weight, reduction)`: `-(y log x + (1 - y) log(1 - x))`:
/// two logs, two subtractions from 1, two multiplies, an add and a negation = 8 per element.
pub fn binary_cross_entropy(args: &Args) -> Result<u64, FormulaError> {
    elementwise(args, 0, 8, Some(3), Some(2))
}

/// `binary_cross_entropy_backward(grad_output, self, target, weight, reduction)`:
/// `grad (x - y) / max(x (1 - x), eps)`: a difference, `1 - x`, a multiply, the clamp, a
/// division and the gradient's multiply = 6 per element.
pub fn binary_cross_entropy_backward(args: &Args) -> Result<u64, FormulaError> {
    elementwise(args, 1, 6, None, Some(3))
}

fn per_target(args: &Args, target: usize, weight: usize) -> Result<u64, FormulaError> {
    let elements = require_tensor(args, target)?.numel().ok_or(FormulaError::Overflow)?;
    let weighted = matches!(args.get(weight), Some(Arg::Tensor(_)));
    mul(elements, if weighted { 2 } else { 1 })
}

/// `nll_loss_forward(self, target, weight, reduction, ignore_index)` (and `nll_loss2d_forward`).
pub fn nll_loss_forward(args: &Args) -> Result<u64, FormulaError> {
    per_target(args, 1, 2)
}

/// `nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight)`.
pub fn nll_loss_backward(args: &Args) -> Result<u64, FormulaError> {
    per_target(args, 2, 3)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::build::*;
    use crate::formulas::testing::with_args;

    #[test]
    fn per_target_element() {
        let fwd = |weighted: bool| {
            with_args(
                |s| {
                    tensor(s, &[8, 10]);
                    tensor(s, &[8]);
                    if weighted {
                        tensor(s, &[10])
                    } else {
                        none(s)
                    }
                    int(s, 1);
                    int(s, -100);
                },
                nll_loss_forward,
            )
        };
        assert_eq!(fwd(false), Ok(8));
        assert_eq!(fwd(true), Ok(16));
        let bwd = with_args(
            |s| {
                tensor(s, &[]);
                tensor(s, &[8, 10]);
                tensor(s, &[8]);
                none(s);
                int(s, 1);
                int(s, -100);
                tensor(s, &[]);
            },
            nll_loss_backward,
        );
        assert_eq!(bwd, Ok(8));
    }

    /// `(self, target, reduction)` of a [4, 6] loss, with `extra` arguments after.
    fn loss_args(s: &mut Vec<i64>, reduction: i64) {
        tensor(s, &[4, 6]);
        tensor(s, &[4, 6]);
        int(s, reduction);
    }

    #[test]
    fn elementwise_losses() {
        // mse on [4,6]: 24 x (2 + 1 reduced) = 72; reduction none: 48.
        assert_eq!(with_args(|s| loss_args(s, 1), mse_loss), Ok(72));
        assert_eq!(with_args(|s| loss_args(s, 0), mse_loss), Ok(48));
        // huber (delta 1.0): 24 x (5 + 1) = 144.
        let huber = with_args(
            |s| {
                loss_args(s, 2);
                double(s, 1.0);
            },
            huber_loss,
        );
        assert_eq!(huber, Ok(144));
        // backward kernels: (grad, self, target, reduction): mse 24 x 3, huber 24 x 4.
        let backward = |f: super::super::FlopFn| {
            with_args(
                |s| {
                    tensor(s, &[]);
                    loss_args(s, 1);
                    double(s, 1.0);
                },
                f,
            )
        };
        assert_eq!(backward(mse_loss_backward), Ok(72));
        assert_eq!(backward(huber_loss_backward), Ok(96));
    }

    #[test]
    fn binary_cross_entropy_with_and_without_weight() {
        // [4,6] probabilities, mean: 24 x (8 + 1) = 216; with a weight tensor 24 x 10 = 240.
        let fwd = |weighted: bool| {
            with_args(
                |s| {
                    tensor(s, &[4, 6]);
                    tensor(s, &[4, 6]);
                    if weighted {
                        tensor(s, &[4, 6])
                    } else {
                        none(s)
                    }
                    int(s, 1);
                },
                binary_cross_entropy,
            )
        };
        assert_eq!(fwd(false), Ok(216));
        assert_eq!(fwd(true), Ok(240));
        // backward (grad, self, target, weight, reduction): 24 x 6 = 144.
        let bwd = with_args(
            |s| {
                tensor(s, &[]);
                tensor(s, &[4, 6]);
                tensor(s, &[4, 6]);
                none(s);
                int(s, 1);
            },
            binary_cross_entropy_backward,
        );
        assert_eq!(bwd, Ok(144));
    }
}
