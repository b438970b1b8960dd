//! Softmax family. Convention, per element of the input: forward 5 FLOPs (running max compare,
//! subtract the max, exp, add to the sum, divide; `log_softmax`: log of the sum once per row and
//! a subtract per element instead of the divide, also 5); backward 4 FLOPs (`softmax`:
//! `y * (g - sum(g * y))`: multiply, add to the sum, subtract, multiply; `log_softmax`:
//! `g - exp(y) * sum(g)`: add to the sum, exp, multiply, subtract).

use super::{mul, require_tensor, FormulaError};
use crate::args::Args;

/// `_softmax(self, dim, half_to_float)` / `_log_softmax(...)`.
pub fn forward(args: &Args) -> Result<u64, FormulaError> {
    mul(require_tensor(args, 0)?.numel().ok_or(FormulaError::Overflow)?, 5)
}

/// `_softmax_backward_data(grad_output, output, dim, input_dtype)` / `_log_softmax_backward_data`.
pub fn backward(args: &Args) -> Result<u64, FormulaError> {
    mul(require_tensor(args, 0)?.numel().ok_or(FormulaError::Overflow)?, 4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::build::*;
    use crate::formulas::testing::with_args;

    #[test]
    fn per_element_costs() {
        // [2,4,8,10] = 640 elements: forward 3200, backward 2560.
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[2, 4, 8, 10]);
                    int(s, -1);
                    boolean(s, false);
                },
                forward
            ),
            Ok(3200)
        );
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[2, 4, 8, 10]);
                    tensor(s, &[2, 4, 8, 10]);
                    int(s, -1);
                    int(s, 6);
                },
                backward
            ),
            Ok(2560)
        );
    }
}
