//! Elementwise operators. Convention: FLOPs per element of the (broadcast) output, the number
//! of arithmetic operations one output element needs (`relu`: 1 compare, `add`: 1 add, ...).
//! In-place and `out=` variants cost the same as the functional form. The output's element
//! count is the broadcast of every tensor argument's shape, so no output capture is needed.

use super::{add, mul, require_tensor, FormulaError};
use crate::args::{Arg, Args};

/// Elements of the broadcast of all tensor arguments (`torch.broadcast_shapes`).
///
/// A kernel that writes into an `out=` tensor it has not resized yet (ATen's `*_out` kernels
/// called from another kernel, `at::empty({0})` then `neg_out(output, input)`) shows that
/// placeholder among its arguments: a call that ran, whose shapes do not broadcast, and that has
/// an empty tensor, is priced without its empty tensors.
pub fn broadcast_numel(args: &Args) -> Result<u64, FormulaError> {
    // The common case first: every tensor of one shape (no broadcasting).
    let mut tensors = args.tensors();
    let first = tensors.next().ok_or(FormulaError::MissingTensor(0))?;
    if tensors.all(|t| t.dims == first.dims) && first.dims.iter().all(|&d| d >= 0) {
        return first.dims.iter().try_fold(1u64, |total, &d| mul(total, d as u64));
    }
    match broadcast_of(args, false) {
        Err(FormulaError::UnexpectedShape) if args.tensors().any(|t| t.numel() == Some(0)) => broadcast_of(args, true),
        other => other,
    }
}

fn broadcast_of(args: &Args, skip_empty: bool) -> Result<u64, FormulaError> {
    let shapes = || args.tensors().filter(move |t| !(skip_empty && t.numel() == Some(0)));
    let rank = shapes().map(|t| t.dims.len()).max().ok_or(FormulaError::UnexpectedShape)?;
    let mut total = 1u64;
    for from_end in 1..=rank {
        let mut size: i64 = 1;
        for t in shapes() {
            let Some(i) = t.dims.len().checked_sub(from_end) else { continue };
            let d = t.dims[i];
            if d < 0 {
                return Err(FormulaError::UnexpectedShape);
            }
            if d != 1 {
                if size != 1 && size != d {
                    return Err(FormulaError::UnexpectedShape);
                }
                size = d;
            }
        }
        total = mul(total, size as u64)?;
    }
    Ok(total)
}

/// One FLOP per output element.
pub fn one_per_element(args: &Args) -> Result<u64, FormulaError> {
    broadcast_numel(args)
}

/// `K` FLOPs per output element (`addcmul`: `self + value * t1 * t2` is 3).
pub fn per_element<const K: u64>(args: &Args) -> Result<u64, FormulaError> {
    mul(broadcast_numel(args)?, K)
}

/// `K` FLOPs per element of tensor argument `I`: for kernels whose other tensors do not
/// broadcast against it (`_prelu_kernel`'s per-channel weight, `glu`'s halves).
pub fn per_tensor_element<const I: usize, const K: u64>(args: &Args) -> Result<u64, FormulaError> {
    mul(require_tensor(args, I)?.numel().ok_or(FormulaError::Overflow)?, K)
}

/// `K` FLOPs per element of the first tensor list (`_foreach_*` kernels: one pointwise
/// operation per list entry; the other lists and scalars match the first list's shapes).
pub fn foreach<const K: u64>(args: &Args) -> Result<u64, FormulaError> {
    let tensors = args.list_tensors(0).ok_or(FormulaError::MissingArgument(0))?;
    let mut total = 0u64;
    for t in tensors {
        total = add(total, t.numel().ok_or(FormulaError::Overflow)?)?;
    }
    mul(total, K)
}

fn flag(args: &Args, index: usize) -> u64 {
    u64::from(args.bool(index).unwrap_or(false))
}

/// Elements of the first tensor list (the parameters of a fused optimizer step).
fn list_elements(args: &Args) -> Result<u64, FormulaError> {
    let mut tensors = args.list_tensors(0).ok_or(FormulaError::MissingArgument(0))?;
    tensors.try_fold(0u64, |total, t| add(total, t.numel().ok_or(FormulaError::Overflow)?))
}

/// `_fused_adam_` / `_fused_adamw_(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
/// state_steps, lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf)`:
/// per parameter element, the arithmetic of the same step with `foreach=True` (13: the two
/// moment updates 3 + 4, the bias-corrected denominator 3, the update 3), +1 with weight decay,
/// +1 with amsgrad (the running maximum), +1 to maximize (the negated gradient), +1 with a
/// gradient scale (unscaling).
pub fn fused_adam(args: &Args) -> Result<u64, FormulaError> {
    let decay = u64::from(args.scalar(9).unwrap_or(0.0) != 0.0);
    let per = 13 + decay + flag(args, 11) + flag(args, 12) + u64::from(args.has_tensor(13));
    mul(list_elements(args)?, per)
}

/// `_fused_sgd_(self, grads, momentum_buffer_list, weight_decay, momentum, lr, dampening,
/// nesterov, maximize, is_first_step, grad_scale, found_inf)`: per parameter element, the
/// arithmetic of the same step with `foreach=True`: the update 1, the momentum buffer 2 (none on
/// the first step, which copies the gradient), +1 with weight decay, +1 for Nesterov, +1 to
/// maximize, +1 with a gradient scale.
pub fn fused_sgd(args: &Args) -> Result<u64, FormulaError> {
    let momentum = args.scalar(4).unwrap_or(0.0) != 0.0;
    let buffer = if momentum && !args.bool(9).unwrap_or(false) { 2 } else { 0 };
    let decay = u64::from(args.scalar(3).unwrap_or(0.0) != 0.0);
    let nesterov = if momentum { flag(args, 7) } else { 0 };
    let per = 1 + buffer + decay + nesterov + flag(args, 8) + u64::from(args.has_tensor(10));
    mul(list_elements(args)?, per)
}

/// `_fused_adagrad_(self, grads, state_sums, state_steps, lr, lr_decay, weight_decay, eps,
/// maximize, grad_scale, found_inf)`: per parameter element, the arithmetic of the same step with
/// `foreach=True` (9: the squared-gradient sum 3, its root 1, eps 1, the step size 1, the update
/// 3), +1 with weight decay, +1 to maximize, +1 with a gradient scale.
pub fn fused_adagrad(args: &Args) -> Result<u64, FormulaError> {
    let decay = u64::from(args.scalar(6).unwrap_or(0.0) != 0.0);
    let per = 9 + decay + flag(args, 8) + u64::from(args.has_tensor(9));
    mul(list_elements(args)?, per)
}

/// `max`/`min`: the `other` overload is elementwise (1 per broadcast element), the others
/// reduce `self` (1 per input element, the reduction convention).
pub fn elementwise_or_reduction(args: &Args) -> Result<u64, FormulaError> {
    match args.get(1) {
        Some(Arg::Tensor(_)) => broadcast_numel(args),
        _ => require_tensor(args, 0)?.numel().ok_or(FormulaError::Overflow),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::build::*;
    use crate::formulas::testing::with_args;

    #[test]
    fn broadcasting() {
        // [4,1,3] + [5,1]: broadcast [4,5,3] = 60 elements.
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[4, 1, 3]);
                    tensor(s, &[5, 1]);
                    int(s, 1);
                },
                one_per_element
            ),
            Ok(60)
        );
        // scalar other: [2,3] + 1.0 -> 6.
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[2, 3]);
                    double(s, 1.0);
                },
                one_per_element
            ),
            Ok(6)
        );
        // 0-d tensors broadcast to the other shape.
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[]);
                    tensor(s, &[7]);
                },
                one_per_element
            ),
            Ok(7)
        );
        // empty tensors cost nothing.
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[0, 3]);
                    tensor(s, &[1, 3]);
                },
                one_per_element
            ),
            Ok(0)
        );
        // tensor lists take part.
        assert_eq!(
            with_args(
                |s| {
                    tensors(s, &[&[2, 1], &[1, 9]]);
                },
                one_per_element
            ),
            Ok(18)
        );
    }

    #[test]
    fn unresized_out_placeholders_are_left_out() {
        // neg_out(out=[0], self=[4,6]) called inside soft_margin_loss: 24 elements negated.
        let f = |out: &[i64]| {
            with_args(
                |s| {
                    tensor(s, &[4, 6]);
                    tensor(s, out);
                },
                one_per_element,
            )
        };
        assert_eq!(f(&[0]), Ok(24));
        // A broadcastable empty tensor is a real operand: nothing to compute.
        assert_eq!(f(&[0, 4, 6]), Ok(0));
        assert_eq!(f(&[0, 6]), Ok(24), "an [0, 6] operand could not have run against [4, 6]: a placeholder");
        // Shapes that do not broadcast, with no empty placeholder, stay an error.
        assert_eq!(f(&[5]), Err(FormulaError::UnexpectedShape));
    }

    #[test]
    fn per_element_of_one_tensor() {
        // _prelu_kernel_backward(grad [2,3,4,4], self [2,3,4,4], weight [3]): 2 x 96.
        let f = with_args(
            |s| {
                tensor(s, &[2, 3, 4, 4]);
                tensor(s, &[2, 3, 4, 4]);
                tensor(s, &[3]);
            },
            per_tensor_element::<1, 2>,
        );
        assert_eq!(f, Ok(192));
        assert_eq!(with_args(|s| tensor(s, &[2]), per_tensor_element::<1, 1>), Err(FormulaError::MissingTensor(1)));
    }

    #[test]
    fn several_flops_per_element() {
        // addcmul on [2,3] tensors: 3 per element = 18.
        let f = with_args(
            |s| {
                tensor(s, &[2, 3]);
                tensor(s, &[2, 3]);
                tensor(s, &[2, 3]);
                double(s, 0.5);
            },
            per_element::<3>,
        );
        assert_eq!(f, Ok(18));
    }

    #[test]
    fn incompatible_or_missing_shapes_are_errors() {
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[2, 3]);
                    tensor(s, &[4, 3]);
                },
                one_per_element
            ),
            Err(FormulaError::UnexpectedShape)
        );
        assert_eq!(
            with_args(
                |s| {
                    int(s, 3);
                },
                one_per_element
            ),
            Err(FormulaError::MissingTensor(0))
        );
    }

    #[test]
    fn foreach_counts_every_list_entry() {
        // AdamW's _foreach_addcdiv_(params, exp_avgs, denoms, step_sizes) on [3,4] and [5]: 3 x 17.
        let f = with_args(
            |s| {
                tensors(s, &[&[3, 4], &[5]]);
                tensors(s, &[&[3, 4], &[5]]);
                tensors(s, &[&[3, 4], &[5]]);
                double(s, 0.1);
            },
            foreach::<3>,
        );
        assert_eq!(f, Ok(51));
        // _foreach_sqrt(exp_avg_sqs) on [2,2], [0] and []: 4 + 0 + 1.
        assert_eq!(with_args(|s| tensors(s, &[&[2, 2], &[0], &[]]), foreach::<1>), Ok(5));
        assert_eq!(with_args(|s| tensor(s, &[2]), foreach::<1>), Err(FormulaError::MissingArgument(0)));
    }

    #[test]
    fn max_min_are_elementwise_with_other_and_reductions_otherwise() {
        // max.other([4,1], [3]) -> [4,3] = 12; max.dim([4,3], 1, false) reads 12 elements.
        let pair = with_args(
            |s| {
                tensor(s, &[4, 1]);
                tensor(s, &[3]);
            },
            elementwise_or_reduction,
        );
        assert_eq!(pair, Ok(12));
        let reduce = with_args(
            |s| {
                tensor(s, &[4, 3]);
                int(s, 1);
                boolean(s, false);
            },
            elementwise_or_reduction,
        );
        assert_eq!(reduce, Ok(12));
        let bad = with_args(
            |s| {
                tensor(s, &[4, 2]);
                tensor(s, &[3]);
            },
            elementwise_or_reduction,
        );
        assert_eq!(bad, Err(FormulaError::UnexpectedShape));
    }

    /// The lists of a fused optimizer step over parameters [10, 10] and [10]: 110 elements.
    fn optimizer_lists(s: &mut Vec<i64>, lists: usize) {
        for _ in 0..lists {
            tensors(s, &[&[10, 10], &[10]]);
        }
    }

    #[test]
    fn fused_adam_counts_what_the_foreach_step_does() {
        let adam = |decay: f64, amsgrad: bool, maximize: bool| {
            with_args(
                |s| {
                    optimizer_lists(s, 6);
                    for v in [1e-3, 0.9, 0.999, decay, 1e-8] {
                        double(s, v);
                    }
                    boolean(s, amsgrad);
                    boolean(s, maximize);
                    none(s);
                    none(s);
                },
                fused_adam,
            )
        };
        assert_eq!(adam(0.0, false, false), Ok(110 * 13));
        assert_eq!(adam(0.01, false, false), Ok(110 * 14));
        assert_eq!(adam(0.01, true, true), Ok(110 * 16));
    }

    #[test]
    fn fused_sgd_counts_what_the_foreach_step_does() {
        let sgd = |decay: f64, momentum: f64, nesterov: bool, first: bool| {
            with_args(
                |s| {
                    optimizer_lists(s, 3);
                    for v in [decay, momentum, 0.1, 0.0] {
                        double(s, v);
                    }
                    boolean(s, nesterov);
                    boolean(s, false);
                    boolean(s, first);
                    none(s);
                },
                fused_sgd,
            )
        };
        assert_eq!(sgd(0.0, 0.0, false, false), Ok(110));
        assert_eq!(sgd(0.0, 0.9, false, false), Ok(330));
        assert_eq!(sgd(0.0, 0.9, false, true), Ok(110), "the first step copies the gradient into the buffer");
        assert_eq!(sgd(1e-4, 0.9, true, false), Ok(550));
    }

    #[test]
    fn fused_adagrad_counts_what_the_foreach_step_does() {
        let adagrad = |decay: f64, maximize: bool| {
            with_args(
                |s| {
                    optimizer_lists(s, 4);
                    for v in [0.01, 0.0, decay, 1e-10] {
                        double(s, v);
                    }
                    boolean(s, maximize);
                    none(s);
                },
                fused_adagrad,
            )
        };
        assert_eq!(adagrad(0.0, false), Ok(110 * 9));
        assert_eq!(adagrad(0.1, true), Ok(110 * 11));
    }
}
