//! Reductions. Convention: one FLOP per input element (each element enters one add; `mean`'s
//! final division per output stands in for the one add fewer than elements per output, so
//! `mean` is exactly one FLOP per input element and `sum` within one FLOP per output of it).

use super::{require_tensor, FormulaError};
use crate::args::Args;

/// `sum` / `mean` / ... over `self` (argument 0): `numel(self)`.
pub fn one_per_input_element(args: &Args) -> Result<u64, FormulaError> {
    require_tensor(args, 0)?.numel().ok_or(FormulaError::Overflow)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::build::*;
    use crate::formulas::testing::with_args;

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
}
