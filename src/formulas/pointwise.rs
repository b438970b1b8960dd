//! Elementwise operators. Convention: FLOPs per element of the (broadcast) output, the number
//! of arithmetic operations one output element needs (`relu`: 1 compare, `add`: 1 add, ...).
//! In-place and `out=` variants cost the same as the functional form. The output's element
//! count is the broadcast of every tensor argument's shape, so no output capture is needed.

use super::{mul, FormulaError};
use crate::args::Args;

/// Elements of the broadcast of all tensor arguments (`torch.broadcast_shapes`).
pub fn broadcast_numel(args: &Args) -> Result<u64, FormulaError> {
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
}
