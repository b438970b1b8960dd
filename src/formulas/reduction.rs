//! Reductions. Convention: one FLOP per input element (each element enters one add; `mean`'s
//! final division per output stands in for the one add fewer than elements per output, so
//! `mean` is exactly one FLOP per input element and `sum` within one FLOP per output of it).
//! The same holds for `amax`, `prod`, `cumsum`, `var`, `norm`, ...: one FLOP per element read,
//! whatever the per-element arithmetic.
//!
//! Accumulating writes (`index_put_` with `accumulate=True`, the embedding gradient) are
//! reductions too: one FLOP per element added into the destination.

use super::{mul, product, require_tensor, FormulaError};
use crate::args::Args;

/// `sum` / `mean` / ... over `self` (argument 0): `numel(self)`.
pub fn one_per_input_element(args: &Args) -> Result<u64, FormulaError> {
    require_tensor(args, 0)?.numel().ok_or(FormulaError::Overflow)
}

/// `linalg_vector_norm(self, ord, ...)`, `norm(self, p, ...)`: a p-norm, 2 FLOPs per input
/// element whatever `p` (the power or absolute value, and the accumulate; the root per result,
/// like `mean`'s division, is within the accumulate's count), as `_foreach_norm` counts each
/// list element: the same norm costs the same computed per tensor or for a list.
pub fn p_norm(args: &Args) -> Result<u64, FormulaError> {
    mul(require_tensor(args, 0)?.numel().ok_or(FormulaError::Overflow)?, 2)
}

/// `embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)`:
/// every gradient row is added into its weight row, one FLOP per `grad_output` element.
pub fn one_per_source_element(args: &Args) -> Result<u64, FormulaError> {
    require_tensor(args, 0)?.numel().ok_or(FormulaError::Overflow)
}

/// `index_put(self, indices, values, accumulate)`, `index_put_` and `_index_put_impl_(...,
/// accumulate, unsafe)`: one FLOP per `values` element when accumulating (assignment alone is a
/// copy, zero FLOPs). `values` broadcasts to the indexed positions, so their count is read from
/// the indices when they are longer.
pub fn index_put(args: &Args) -> Result<u64, FormulaError> {
    let accumulate = args.bool(3).ok_or(FormulaError::MissingArgument(3))?;
    if !accumulate {
        return Ok(0);
    }
    let values = require_tensor(args, 2)?.numel().ok_or(FormulaError::Overflow)?;
    // `values` broadcasts to the positions written: (broadcast index count) x (the sizes of
    // `self` the indices do not cover). An accumulate adds once per position.
    let target = require_tensor(args, 0)?;
    let (mut indexed, mut count) = (0usize, 0u64);
    if let Some(indices) = args.list_tensors(1) {
        for index in indices {
            indexed += 1;
            count = count.max(index.numel().ok_or(FormulaError::Overflow)?);
        }
    }
    let trailing = product(target.dims.get(indexed..).unwrap_or(&[]))?;
    Ok(values.max(mul(count, trailing)?))
}

/// `reflection_pad{1,2,3}d_backward` and `replication_pad{1,2,3}d_backward(grad_output, self,
/// padding)`: every padded position's gradient is added into the element it copied, one add per
/// `grad_output` element beyond the input's.
pub fn pad_backward(args: &Args) -> Result<u64, FormulaError> {
    let grad = require_tensor(args, 0)?.numel().ok_or(FormulaError::Overflow)?;
    let input = require_tensor(args, 1)?.numel().ok_or(FormulaError::Overflow)?;
    grad.checked_sub(input).ok_or(FormulaError::UnexpectedShape)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::build::*;
    use crate::formulas::testing::with_args;

    #[test]
    fn p_norms_count_two_per_element() {
        // linalg_vector_norm(x [6, 7], 2.0): 42 squares, 41 adds and a square root = 84, what
        // _foreach_norm counts for the same tensor in a list.
        let f = with_args(
            |s| {
                tensor(s, &[6, 7]);
                double(s, 2.0);
                none(s);
                boolean(s, false);
                none(s);
            },
            p_norm,
        );
        assert_eq!(f, Ok(84));
        let foreach = with_args(|s| tensors(s, &[&[6, 7]]), crate::formulas::pointwise::foreach::<2>);
        assert_eq!(foreach, f);
    }

    #[test]
    fn counts_input_elements() {
        // mean over [1,512,7,7] along (2,3): 25_088 elements.
        let f = with_args(
            |s| {
                tensor(s, &[1, 512, 7, 7]);
                ints(s, &[-1, -2]);
                boolean(s, true);
                none(s);
            },
            one_per_input_element,
        );
        assert_eq!(f, Ok(25_088));
        assert_eq!(
            with_args(
                |s| {
                    none(s);
                },
                one_per_input_element
            ),
            Err(FormulaError::MissingTensor(0))
        );
    }

    #[test]
    fn accumulating_writes() {
        // embedding_dense_backward: grad [2,8,32] -> 512 adds.
        let embedding = with_args(
            |s| {
                tensor(s, &[2, 8, 32]);
                tensor(s, &[2, 8]);
                int(s, 100);
                int(s, -1);
                boolean(s, false);
            },
            one_per_source_element,
        );
        assert_eq!(embedding, Ok(512));
        let put = |accumulate: bool, values: &[i64]| {
            with_args(
                |s| {
                    tensor(s, &[10, 4]);
                    tensors(s, &[&[6]]);
                    tensor(s, values);
                    boolean(s, accumulate);
                    boolean(s, false);
                },
                index_put,
            )
        };
        // 6 rows of 4 accumulated: 24; assignment is a copy.
        assert_eq!(put(true, &[6, 4]), Ok(24));
        assert_eq!(put(false, &[6, 4]), Ok(0));
        // A scalar value broadcast to the 6 indexed rows of 4.
        assert_eq!(put(true, &[]), Ok(24));
    }

    #[test]
    fn padding_backward_adds_the_padded_gradients() {
        // [1, 2, 4] padded to [1, 2, 7]: 6 of the 14 gradients are added into the 8 inputs.
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[1, 2, 7]);
                    tensor(s, &[1, 2, 4]);
                    ints(s, &[2, 1]);
                },
                pad_backward
            ),
            Ok(6)
        );
    }
}
