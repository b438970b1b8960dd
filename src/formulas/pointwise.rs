//! Elementwise operators. Convention: FLOPs per element of the (broadcast) output, the number
//! of arithmetic operations one output element needs (`relu`: 1 compare, `add`: 1 add, ...).
//! In-place and `out=` variants cost the same as the functional form. The output's element
//! count is the broadcast of every tensor argument's shape, so no output capture is needed.

use super::{add, mul, require_tensor, FormulaError};
use crate::args::{Arg, Args};

/// Elements of the broadcast of all tensor arguments (`torch.broadcast_shapes`).
pub fn broadcast_numel(args: &Args) -> Result<u64, FormulaError> {
    // The common case first: every tensor of one shape (no broadcasting).
    let mut tensors = args.tensors();
    let first = tensors.next().ok_or(FormulaError::MissingTensor(0))?;
    if tensors.all(|t| t.dims == first.dims) && first.dims.iter().all(|&d| d >= 0) {
        return first.dims.iter().try_fold(1u64, |total, &d| mul(total, d as u64));
    }
    let rank = args.tensors().map(|t| t.dims.len()).max().ok_or(FormulaError::MissingTensor(0))?;
    let mut total = 1u64;
    for from_end in 1..=rank {
        let mut size: i64 = 1;
        for t in args.tensors() {
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
}
