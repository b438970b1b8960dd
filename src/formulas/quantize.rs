//! Quantization arithmetic in floating point: quantizing, dequantizing, fake quantization (QAT)
//! and its observers. The integer kernels of quantized models (`quantized::linear`,
//! `quantized::conv2d`, `aten::_int_mm`, ...) are not here: they are integer arithmetic, which
//! FLOPs do not count; they are reported as uncounted operators (`docs/methodology.md`).

use super::{require_tensor, FormulaError};
use crate::args::Args;

/// An operator that does arithmetic torchscan deliberately does not count, and why. Its calls
/// make the total partial with a `deliberately_uncounted` diagnostic that gives the reason.
pub struct Uncounted {
    pub operator: &'static str,
    pub reason: &'static str,
}

const INTEGER: &str =
    "integer multiply-accumulates (int8 x int8 into int32), which FLOPs (floating point) do not count";
const INTEGER_ELEMENTWISE: &str = "integer arithmetic on quantized values, which FLOPs (floating point) do not count";
const PACKED_FP16: &str =
    "floating-point work whose weight is a packed object: the dispatcher shows no weight shape to price it by";

/// The deliberately uncounted operators (listed in `docs/formulas.md`).
pub static UNCOUNTED: &[Uncounted] = &[
    Uncounted { operator: "quantized::linear", reason: INTEGER },
    Uncounted { operator: "quantized::linear_relu", reason: INTEGER },
    Uncounted { operator: "quantized::linear_dynamic", reason: INTEGER },
    Uncounted { operator: "quantized::linear_relu_dynamic", reason: INTEGER },
    Uncounted { operator: "quantized::conv1d", reason: INTEGER },
    Uncounted { operator: "quantized::conv2d", reason: INTEGER },
    Uncounted { operator: "quantized::conv3d", reason: INTEGER },
    Uncounted { operator: "quantized::conv1d_relu", reason: INTEGER },
    Uncounted { operator: "quantized::conv2d_relu", reason: INTEGER },
    Uncounted { operator: "quantized::conv3d_relu", reason: INTEGER },
    Uncounted { operator: "quantized::conv_transpose2d", reason: INTEGER },
    Uncounted { operator: "aten::_int_mm", reason: INTEGER },
    Uncounted { operator: "quantized::add", reason: INTEGER_ELEMENTWISE },
    Uncounted { operator: "quantized::add_relu", reason: INTEGER_ELEMENTWISE },
    Uncounted { operator: "quantized::add_scalar", reason: INTEGER_ELEMENTWISE },
    Uncounted { operator: "quantized::mul", reason: INTEGER_ELEMENTWISE },
    Uncounted { operator: "quantized::mul_relu", reason: INTEGER_ELEMENTWISE },
    Uncounted { operator: "quantized::mul_scalar", reason: INTEGER_ELEMENTWISE },
    Uncounted { operator: "quantized::linear_dynamic_fp16", reason: PACKED_FP16 },
    Uncounted { operator: "quantized::linear_relu_dynamic_fp16", reason: PACKED_FP16 },
];

/// The reason `operator` is deliberately uncounted, if it is.
pub fn uncounted_reason(operator: &str) -> Option<&'static str> {
    UNCOUNTED.iter().find(|u| u.operator == operator).map(|u| u.reason)
}

/// `K` FLOPs per element of argument 0 (the tensor quantized, dequantized or observed; scales
/// and zero points are per tensor or per channel and add nothing per element).
pub fn per_input_element<const K: u64>(args: &Args) -> Result<u64, FormulaError> {
    require_tensor(args, 0)?.numel().and_then(|n| n.checked_mul(K)).ok_or(FormulaError::Overflow)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::build::{int, tensor};
    use crate::formulas::testing::with_args;

    #[test]
    fn quantize_dequantize_and_fake_quantize_per_element() {
        // quantize_per_tensor(x[4,16], scale, zero_point, dtype): 64 elements x 4
        // (divide, add the zero point, round, clamp) = 256.
        let quantize = with_args(
            |s| {
                tensor(s, &[4, 16]);
                int(s, 0);
            },
            per_input_element::<4>,
        );
        assert_eq!(quantize, Ok(256));
        // fake quantization per channel on [2,3,5,5] = 150 elements x 6 = 900; the scales [3]
        // do not count.
        let fake = with_args(
            |s| {
                tensor(s, &[2, 3, 5, 5]);
                tensor(s, &[3]);
            },
            per_input_element::<6>,
        );
        assert_eq!(fake, Ok(900));
        assert_eq!(with_args(|s| int(s, 1), per_input_element::<2>), Err(FormulaError::MissingTensor(0)));
    }
}
