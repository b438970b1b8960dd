//! Losses. Convention, per target element: `nll_loss` picks the target's log-probability and
//! accumulates it, 1 FLOP (2 with class weights: the multiply); its backward writes one scaled
//! gradient per target element, 1 FLOP (2 with class weights).

use super::{mul, require_tensor, FormulaError};
use crate::args::{Arg, Args};

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
}
