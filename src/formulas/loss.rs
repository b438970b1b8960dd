//! Losses. Convention, per target element: `nll_loss` picks the target's log-probability and
//! accumulates it, 1 FLOP (2 with class weights: the multiply); its backward writes one scaled
//! gradient per target element, 1 FLOP (2 with class weights).
//!
//! Elementwise losses (`mse_loss`, `huber_loss`, `smooth_l1_loss`, `binary_cross_entropy`) count
//! the arithmetic of their definition per input element, plus 1 per element to accumulate when
//! the loss is reduced (`reduction` mean or sum; the mean's one division is not counted), plus 1
//! per element for a `weight` tensor; their backward kernels count per input element too.

use super::{add, mul, require_tensor, FormulaError};
use crate::args::Args;

/// `(N, C)` of a `[N, C]` (or `[C]`) score tensor at `index`.
fn scores(args: &Args, index: usize) -> Result<(u64, u64), FormulaError> {
    let t = require_tensor(args, index)?;
    let classes = *t.dims.last().ok_or(FormulaError::UnexpectedShape)?;
    let classes = u64::try_from(classes).map_err(|_| FormulaError::UnexpectedShape)?;
    let elements = t.numel().ok_or(FormulaError::Overflow)?;
    Ok((elements.checked_div(classes).unwrap_or(0), classes))
}

/// `multi_margin_loss(self [N, C], target, p, margin, weight, reduction)`: per score, the margin
/// against the target's score (2), its clamp (1) and accumulation (1) = 4, +1 to square it
/// (`p = 2`), +1 for a class weight.
pub fn multi_margin_loss(args: &Args) -> Result<u64, FormulaError> {
    let (rows, classes) = scores(args, 0)?;
    let squared = u64::from(args.scalar(2) == Some(2.0));
    let weighted = u64::from(args.has_tensor(4));
    mul(mul(rows, classes)?, 4 + squared + weighted)
}

/// `multi_margin_loss_backward(grad_output, self, target, p, margin, weight, reduction)`: per
/// score, the margin's test (1) and the gradient's scale (1), +1 for `p = 2`, +1 for a weight.
pub fn multi_margin_loss_backward(args: &Args) -> Result<u64, FormulaError> {
    let (rows, classes) = scores(args, 1)?;
    let squared = u64::from(args.scalar(3) == Some(2.0));
    let weighted = u64::from(args.has_tensor(5));
    mul(mul(rows, classes)?, 2 + squared + weighted)
}

/// Worst-case label pairs of a multilabel margin loss on `C` classes: `|targets| x (C -
/// |targets|)` is at most `floor(C^2 / 4)` (the target labels are data).
fn label_pairs(classes: u64) -> Result<u64, FormulaError> {
    Ok(mul(classes, classes)? / 4)
}

/// `multilabel_margin_loss_forward(self [N, C], target, reduction)`: per sample, marking the
/// targets (1 per class) and per (target, non-target) pair a margin (2), a clamp and an
/// accumulation (2): `C + 4 floor(C^2 / 4)`, the worst case.
pub fn multilabel_margin_loss(args: &Args) -> Result<u64, FormulaError> {
    let (rows, classes) = scores(args, 0)?;
    mul(rows, add(classes, mul(4, label_pairs(classes)?)?)?)
}

/// `multilabel_margin_loss_backward(grad_output, self, target, reduction, is_target)`: per
/// sample, the scale per class and per pair the test and the two gradients' updates:
/// `C + 2 floor(C^2 / 4)`, the worst case.
pub fn multilabel_margin_loss_backward(args: &Args) -> Result<u64, FormulaError> {
    let (rows, classes) = scores(args, 1)?;
    mul(rows, add(classes, mul(2, label_pairs(classes)?)?)?)
}

/// Cells of CTC's alignment lattices: `sum_b input_length_b x (2 target_length_b + 1)`, from
/// the length lists at `inputs` and `targets` (the `.Tensor` overloads hide them: data-dependent).
fn ctc_cells(args: &Args, inputs: usize, targets: usize) -> Result<u64, FormulaError> {
    let (inputs, targets) = match (args.int_list(inputs), args.int_list(targets)) {
        (Some(i), Some(t)) if i.len() == t.len() => (i, t),
        (Some(_), Some(_)) => return Err(FormulaError::UnexpectedShape),
        _ => return Err(FormulaError::DataDependent),
    };
    let mut cells = 0u64;
    for (&steps, &labels) in inputs.iter().zip(targets) {
        let steps = u64::try_from(steps).map_err(|_| FormulaError::UnexpectedShape)?;
        let states = u64::try_from(labels).map_err(|_| FormulaError::UnexpectedShape)?;
        cells = add(cells, mul(steps, add(mul(2, states)?, 1)?)?)?;
    }
    Ok(cells)
}

/// `_ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity)`: the
/// forward lattice, 13 FLOPs per cell (the log-sum-exp of up to three predecessors: 2 maxima, 3
/// differences, 3 exponentials, 2 adds, a logarithm and the maximum's add; the emission's add).
pub fn ctc_loss(args: &Args) -> Result<u64, FormulaError> {
    mul(ctc_cells(args, 2, 3)?, 13)
}

/// `_ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths, ...)`: the
/// backward lattice and the alignment posteriors (twice the forward's cells), and 3 per
/// log-probability for its gradient (an exponential, a difference, the gradient's scale).
pub fn ctc_loss_backward(args: &Args) -> Result<u64, FormulaError> {
    let probabilities = require_tensor(args, 1)?.numel().ok_or(FormulaError::Overflow)?;
    add(mul(ctc_cells(args, 3, 4)?, 26)?, mul(probabilities, 3)?)
}

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
    let weighted = weight.is_some_and(|i| args.has_tensor(i));
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
    let weighted = args.has_tensor(weight);
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

    #[test]
    fn ctc_lattices() {
        // Two sequences: 7 steps for 3 labels (7 x 7 = 49 cells) and 5 steps for 2 (5 x 5 = 25).
        let forward = with_args(
            |s| {
                tensor(s, &[7, 2, 5]);
                tensor(s, &[2, 3]);
                ints(s, &[7, 5]);
                ints(s, &[3, 2]);
                int(s, 0);
            },
            ctc_loss,
        );
        assert_eq!(forward, Ok(74 * 13));
        let backward = with_args(
            |s| {
                tensor(s, &[2]);
                tensor(s, &[7, 2, 5]);
                tensor(s, &[2, 3]);
                ints(s, &[7, 5]);
                ints(s, &[3, 2]);
            },
            ctc_loss_backward,
        );
        assert_eq!(backward, Ok(74 * 26 + 70 * 3));
        // The Tensor overload's lengths are data the formula does not see.
        let hidden = with_args(
            |s| {
                tensor(s, &[7, 2, 5]);
                tensor(s, &[2, 3]);
                tensor(s, &[2]);
                tensor(s, &[2]);
            },
            ctc_loss,
        );
        assert_eq!(hidden, Err(FormulaError::DataDependent));
    }

    #[test]
    fn margin_losses() {
        // multi_margin_loss on [4, 6] (p = 1, no weight): 24 x 4 = 96; p = 2 with a weight: 24 x 6.
        let multi = |p: i64, weighted: bool| {
            with_args(
                |s| {
                    tensor(s, &[4, 6]);
                    tensor(s, &[4]);
                    int(s, p);
                    int(s, 1);
                    if weighted {
                        tensor(s, &[6])
                    } else {
                        none(s)
                    }
                    int(s, 1);
                },
                multi_margin_loss,
            )
        };
        assert_eq!(multi(1, false), Ok(96));
        assert_eq!(multi(2, true), Ok(144));
        // multilabel on [4, 6]: per sample 6 + 4 x 9 = 42: 168; backward 6 + 2 x 9 = 24: 96.
        let multilabel = with_args(
            |s| {
                tensor(s, &[4, 6]);
                tensor(s, &[4, 6]);
                int(s, 1);
            },
            multilabel_margin_loss,
        );
        assert_eq!(multilabel, Ok(168));
        let backward = with_args(
            |s| {
                tensor(s, &[]);
                tensor(s, &[4, 6]);
                tensor(s, &[4, 6]);
                int(s, 1);
            },
            multilabel_margin_loss_backward,
        );
        assert_eq!(backward, Ok(96));
    }
}
