//! Quantization: quantizing, dequantizing, fake quantization (QAT) and its observers in
//! floating point; and the kernels of quantized models. Integer kernels (`quantized::linear`,
//! `quantized::conv2d`, `aten::_int_mm`, quantized `add`/`mul`) are priced in integer operations,
//! category `integer`, which the report keeps apart from FLOPs (`integer_ops`): an integer
//! multiply-accumulate (int8 x int8 into int32) is 2 operations, as a floating-point one is 2
//! FLOPs. `quantized::linear_dynamic_fp16` multiplies in floating point: FLOPs, `matmul`.
//! A packed weight's shape and a packed convolution's parameters come from the packed object
//! (`Arg::Packed`, read by the shim). Not counted, by convention: the requantization of each
//! output (scale and zero point) and a fused ReLU's clamp, which are the integer kernels'
//! epilogue. A dynamic kernel (`quantized::linear_dynamic`) computes in floating point around its
//! integer product: its input's quantization, its output's dequantization and bias, which are
//! FLOPs, counted beside its integer operations ([`dynamic_linear_float`]).

use super::conv::convolution_of;
use super::pointwise::broadcast_numel;
use super::{add, mul, mul_all, product, require_tensor, FormulaError};
use crate::args::Args;

/// An operator that does arithmetic torchscan deliberately does not count, and why. Its calls
/// make the total partial with a `deliberately_uncounted` diagnostic that gives the reason.
pub struct Uncounted {
    pub operator: &'static str,
    pub reason: &'static str,
}

/// Why an operator's work cannot be priced from what the dispatcher shows.
const TEST_ONLY: &str = "a PyTorch internal test operator, not model work";
const OPAQUE_OPERAND: &str = "an operand the dispatcher shows no sizes for (a compressed or packed buffer)";
const DATA_DEPENDENT: &str =
    "its work depends on the values (each box's size and angle), which the observer does not read";

/// The deliberately uncounted operators (listed in `docs/formulas.md` and `docs/coverage.md`): a
/// call of one leaves the total `partial` with the operator named, as an unknown one does.
pub static UNCOUNTED: &[Uncounted] = &[
    Uncounted { operator: "aten::_foobar", reason: TEST_ONLY },
    Uncounted { operator: "aten::_test_functorch_fallback", reason: TEST_ONLY },
    Uncounted { operator: "aten::_test_optional_filled_intlist", reason: TEST_ONLY },
    Uncounted { operator: "aten::_test_optional_floatlist", reason: TEST_ONLY },
    Uncounted { operator: "aten::_test_optional_intlist", reason: TEST_ONLY },
    Uncounted { operator: "aten::_cslt_sparse_mm", reason: OPAQUE_OPERAND },
    Uncounted { operator: "aten::_cslt_sparse_mm_search", reason: OPAQUE_OPERAND },
    Uncounted { operator: "aten::quantized_lstm", reason: OPAQUE_OPERAND },
    Uncounted { operator: "aten::quantized_gru", reason: OPAQUE_OPERAND },
    Uncounted { operator: "torchvision::roi_pool", reason: DATA_DEPENDENT },
    Uncounted { operator: "torchvision::ps_roi_pool", reason: DATA_DEPENDENT },
    Uncounted { operator: "torchvision::_ps_roi_pool_backward", reason: DATA_DEPENDENT },
    Uncounted { operator: "torchvision::box_iou_rotated", reason: DATA_DEPENDENT },
];

/// The reason `operator` is deliberately uncounted, if it is.
pub fn uncounted_reason(operator: &str) -> Option<&'static str> {
    UNCOUNTED.iter().find(|u| u.operator == operator).map(|u| u.reason)
}

/// `quantized::linear(X[..., K], W_prepack[N, K], scale, zero_point)` and its `_relu` and
/// `_dynamic` forms (their integer operations): `2 * numel(X) * N` (each of `numel(X) / K` rows
/// meets the `N x K` weight).
pub fn packed_linear(args: &Args) -> Result<u64, FormulaError> {
    let input = require_tensor(args, 0)?;
    let packed = args.packed(1).ok_or(FormulaError::MissingArgument(1))?;
    let &[out_features, in_features] = packed.weight.dims else { return Err(FormulaError::UnexpectedShape) };
    if input.dims.last() != Some(&in_features) || out_features < 0 {
        return Err(FormulaError::UnexpectedShape);
    }
    mul_all(&[2, input.numel().ok_or(FormulaError::Overflow)?, out_features as u64])
}

/// `quantized::linear_dynamic_fp16(X[..., K], W_prepack[N, K])` and `linear_relu_dynamic_fp16`
/// (`RELU = 1`): a floating-point product (fp16 weights), FLOPs, under the bias convention as a
/// float `Linear`: `2 numel(X) N`, plus 1 per output element for the bias when the packed weight
/// has one and 1 for the ReLU (as `_addmm_activation`'s).
pub fn packed_fp16_linear<const RELU: u64>(args: &Args) -> Result<u64, FormulaError> {
    let product = packed_linear(args)?;
    let packed = args.packed(1).ok_or(FormulaError::MissingArgument(1))?;
    let &[bias @ (0 | 1)] = packed.params else { return Err(FormulaError::UnexpectedShape) };
    let input = require_tensor(args, 0)?;
    let rows = product_of_rows(input.dims)?;
    add(product, mul(mul(rows, packed.weight.dims[0] as u64)?, bias as u64 + RELU)?)
}

/// The rows of a linear's input `[..., K]`: the product of its leading dimensions.
fn product_of_rows(dims: &[i64]) -> Result<u64, FormulaError> {
    product(dims.split_last().ok_or(FormulaError::UnexpectedShape)?.1)
}

/// The floating-point work of `quantized::linear_dynamic(X[..., K], W_prepack[N, K],
/// reduce_range)` (and `linear_relu_dynamic`, `RELU = 1`), in FLOPs, as the separate operators
/// would count it. What the kernel does (fbgemm's `PackedLinearWeight::apply_dynamic_impl`,
/// qnnpack's alike): the input's range (`FindMinMax`: a minimum and a maximum, 2 per element),
/// its scale and zero point (per tensor: nothing per element), its quantization (divide by the
/// scale, add the zero point, round, clamp: 4 per element, as `quantize_per_tensor`); the integer
/// product (the integer operations); then per output element the dequantization (the int32
/// accumulator, corrected for the zero points in integer arithmetic, times the input's and the
/// weight's scales: 1), the bias when the packed weight has one (1) and the ReLU's clamp (1).
/// `6 numel(X) + (1 + bias + RELU) rows N`, `rows = numel(X) / K`.
pub fn dynamic_linear_float<const RELU: u64>(args: &Args) -> Result<u64, FormulaError> {
    let input = require_tensor(args, 0)?;
    let packed = args.packed(1).ok_or(FormulaError::MissingArgument(1))?;
    let &[out_features, in_features] = packed.weight.dims else { return Err(FormulaError::UnexpectedShape) };
    // The shim records whether the packed weight holds a bias (1 or 0).
    let &[bias @ (0 | 1)] = packed.params else { return Err(FormulaError::UnexpectedShape) };
    let rank = input.dims.len();
    if rank == 0 || input.dims[rank - 1] != in_features || out_features < 0 {
        return Err(FormulaError::UnexpectedShape);
    }
    let outputs = mul(product_of_rows(input.dims)?, out_features as u64)?;
    let quantize = mul(input.numel().ok_or(FormulaError::Overflow)?, 6)?;
    add(quantize, mul(outputs, 1 + bias as u64 + RELU)?)
}

/// `quantized::conv{1,2,3}d(qx, packed_weight, scale, zero_point)` with its `_relu`/`_add`
/// forms, and `conv_transpose{1,2,3}d`: the convolution's multiply-accumulates, 2 each, from the
/// packed weight and parameters. `conv1d` runs as a 2-d convolution of height 1 (its packed
/// weight is 4-d): its input is read as `[N, C, 1, L]`.
pub fn packed_conv(args: &Args) -> Result<u64, FormulaError> {
    let input = require_tensor(args, 0)?;
    let packed = args.packed(1).ok_or(FormulaError::MissingArgument(1))?;
    let params = packed.params;
    let rank = params.first().and_then(|&d| usize::try_from(d).ok()).ok_or(FormulaError::UnexpectedShape)?;
    if params.len() != 1 + 4 * rank + 2 || rank > 3 {
        return Err(FormulaError::UnexpectedShape);
    }
    let list = |i: usize| &params[1 + i * rank..1 + (i + 1) * rank];
    let (stride, padding, dilation) = (list(0), list(1), list(3));
    let transposed = params[1 + 4 * rank + 1] != 0;
    let weight = packed.weight.dims;
    let mut dims = [0i64; 5];
    let input = match (input.dims.len(), weight.len()) {
        (n, w) if n == w => input.dims,
        (3, 4) if weight[2] == 1 => {
            dims[..4].copy_from_slice(&[input.dims[0], input.dims[1], 1, input.dims[2]]);
            &dims[..4]
        }
        _ => return Err(FormulaError::UnexpectedShape),
    };
    convolution_of(input, weight, stride, padding, dilation, transposed)
}

/// `quantized::add(qa, qb, scale, zero_point)`, `mul`, their `_relu` and `_scalar` forms: one
/// integer operation per output element (the operands broadcast; a scalar adds nothing).
pub fn elementwise(args: &Args) -> Result<u64, FormulaError> {
    if args.has_tensor(1) {
        broadcast_numel(args)
    } else {
        require_tensor(args, 0)?.numel().ok_or(FormulaError::Overflow)
    }
}

/// `K` FLOPs per element of argument 0 (the tensor quantized, dequantized or observed; scales
/// and zero points are per tensor or per channel and add nothing per element).
pub fn per_input_element<const K: u64>(args: &Args) -> Result<u64, FormulaError> {
    require_tensor(args, 0)?.numel().and_then(|n| n.checked_mul(K)).ok_or(FormulaError::Overflow)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::build::{boolean, double, int, packed, tensor};
    use crate::formulas::testing::with_args;

    /// A call `(input, packed weight, scale, zero point)`.
    fn packed_call(
        input: &[i64],
        weight: &[i64],
        params: &[i64],
        formula: super::super::FlopFn,
    ) -> Result<u64, FormulaError> {
        with_args(
            |s| {
                tensor(s, input);
                packed(s, weight, params);
                double(s, 0.1);
                int(s, 0);
            },
            formula,
        )
    }

    #[test]
    fn quantized_linear_counts_two_integer_operations_per_multiply_accumulate() {
        // X[2,3,16] @ W[8,16]^T: 6 rows x 16 x 8 = 768 multiply-accumulates = 1,536.
        assert_eq!(packed_call(&[2, 3, 16], &[8, 16], &[], packed_linear), Ok(1536));
        // The weight must match the input's last dimension.
        assert_eq!(packed_call(&[2, 3, 15], &[8, 16], &[], packed_linear), Err(FormulaError::UnexpectedShape));
        // No packed weight where one should be: the argument is named.
        let missing = with_args(
            |s| {
                tensor(s, &[2, 16]);
                tensor(s, &[8, 16]);
            },
            packed_linear,
        );
        assert_eq!(missing, Err(FormulaError::MissingArgument(1)));
    }

    #[test]
    fn dynamic_linear_counts_its_floating_point_work_as_flops() {
        // quantize_dynamic(Linear(16, 8)) on X[4, 16]: the input's quantization 64 x 6 = 384
        // (minimum and maximum 2, quantize 4); per output element (4 x 8 = 32) the
        // dequantization's multiply and the bias: 2 x 32 = 64. 448 FLOPs, beside 2 x 4 x 16 x 8 =
        // 1,024 integer operations.
        let call = |input: &[i64], bias: i64, f: super::super::FlopFn| {
            with_args(
                |s| {
                    tensor(s, input);
                    packed(s, &[8, 16], &[bias]);
                    boolean(s, false);
                },
                f,
            )
        };
        assert_eq!(call(&[4, 16], 1, dynamic_linear_float::<0>), Ok(384 + 64));
        assert_eq!(call(&[4, 16], 1, packed_linear), Ok(1024));
        // No bias: 384 + 32; with the fused ReLU: 384 + 3 x 32.
        assert_eq!(call(&[4, 16], 0, dynamic_linear_float::<0>), Ok(416));
        assert_eq!(call(&[4, 16], 1, dynamic_linear_float::<1>), Ok(480));
        // X[2, 3, 16]: 96 x 6 = 576; 6 rows x 8 = 48 outputs x 2 = 96.
        assert_eq!(call(&[2, 3, 16], 1, dynamic_linear_float::<0>), Ok(672));
        // The weight must match the input; the bias flag must be there: never a guess.
        assert_eq!(call(&[4, 15], 1, dynamic_linear_float::<0>), Err(FormulaError::UnexpectedShape));
        assert_eq!(call(&[4, 16], 2, dynamic_linear_float::<0>), Err(FormulaError::UnexpectedShape));
        let no_flag = with_args(
            |s| {
                tensor(s, &[4, 16]);
                packed(s, &[8, 16], &[]);
            },
            dynamic_linear_float::<0>,
        );
        assert_eq!(no_flag, Err(FormulaError::UnexpectedShape));
    }

    #[test]
    fn fp16_dynamic_linear_adds_its_bias_as_a_float_linear() {
        // X[4, 16] @ W[8, 16]^T: 2 x 4 x 16 x 8 = 1,024 FLOPs; the bias on 32 outputs, + 32; the
        // fused ReLU + 32 more; without a bias, the product alone.
        let call = |bias: i64, f: super::super::FlopFn| {
            with_args(
                |s| {
                    tensor(s, &[4, 16]);
                    packed(s, &[8, 16], &[bias]);
                },
                f,
            )
        };
        assert_eq!(call(1, packed_fp16_linear::<0>), Ok(1056));
        assert_eq!(call(1, packed_fp16_linear::<1>), Ok(1088));
        assert_eq!(call(0, packed_fp16_linear::<0>), Ok(1024));
        assert_eq!(call(0, packed_fp16_linear::<1>), Ok(1056));
        assert_eq!(call(3, packed_fp16_linear::<0>), Err(FormulaError::UnexpectedShape));
    }

    #[test]
    fn quantized_convolutions_from_their_packed_parameters() {
        // conv2d: x[2,4,8,8], weight [6, 4/2, 3, 3], stride 1, padding 1, dilation 1, groups 2:
        // output 8x8; 2 x 6 x 2 x 9 x 64 = 13,824 multiply-accumulates = 27,648.
        let params = [2, 1, 1, 1, 1, 0, 0, 1, 1, 2, 0];
        assert_eq!(packed_call(&[2, 4, 8, 8], &[6, 2, 3, 3], &params, packed_conv), Ok(27_648));
        // Stride 2, no padding: output 3x3; 2 x 6 x 2 x 9 x 9 = 1,944 MACs = 3,888.
        let strided = [2, 2, 2, 0, 0, 0, 0, 1, 1, 2, 0];
        assert_eq!(packed_call(&[2, 4, 8, 8], &[6, 2, 3, 3], &strided, packed_conv), Ok(3888));
        // conv1d runs as 2-d of height 1: x[1,3,10], weight [4,3,1,3], no padding: output 1x8;
        // 1 x 4 x 3 x 3 x 8 = 288 MACs = 576.
        let one_d = [2, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0];
        assert_eq!(packed_call(&[1, 3, 10], &[4, 3, 1, 3], &one_d, packed_conv), Ok(576));
        // Transposed: each input element meets each kernel element once: x[1,4,5,5], weight
        // [4, 2, 3, 3] (C_in, C_out/groups), groups 1: 1 x 4 x 2 x 9 x 25 = 1,800 MACs = 3,600.
        let transposed = [2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1];
        assert_eq!(packed_call(&[1, 4, 5, 5], &[4, 2, 3, 3], &transposed, packed_conv), Ok(3600));
        // Parameters of the wrong length are an error, never a guess.
        assert_eq!(
            packed_call(&[2, 4, 8, 8], &[6, 2, 3, 3], &[2, 1, 1], packed_conv),
            Err(FormulaError::UnexpectedShape)
        );
    }

    #[test]
    fn quantized_elementwise_counts_one_operation_per_output_element() {
        let add = with_args(
            |s| {
                tensor(s, &[2, 3, 4]);
                tensor(s, &[3, 1]);
                double(s, 0.1);
                int(s, 0);
            },
            elementwise,
        );
        assert_eq!(add, Ok(24));
        let add_scalar = with_args(
            |s| {
                tensor(s, &[5, 7]);
                double(s, 2.0);
            },
            elementwise,
        );
        assert_eq!(add_scalar, Ok(35));
    }

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
