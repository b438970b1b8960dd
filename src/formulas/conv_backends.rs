//! Backend convolution kernels: cuDNN, MIOpen, and the slow, dilated and depthwise paths of the
//! CPU and CUDA backends. `aten::convolution` claims them when it dispatches them (the
//! outermost counted call), so these rows price only a direct call, with `conv.rs`'s convention
//! (2 FLOPs per multiply-accumulate, a bias 1 per output element, its gradient 1 per element
//! of `grad_output`). The fused epilogues add, per output element, 1 FLOP for a ReLU and 3 for
//! an add-ReLU (scale `z` by `alpha`, add, clamp).

use super::conv::{conv_output_spatial, conv_work, convolution_of, outputs, transposed_outputs};
use super::{add, mul, mul_all, require_tensor, FormulaError};
use crate::args::Args;

/// Where a kernel's arguments sit (a missing dilation is 1; `None`: the kernel has no such
/// argument, a bias it cannot take or groups of 1, an output padding of 0).
struct Layout {
    stride: usize,
    padding: usize,
    dilation: usize,
    transposed: bool,
    bias: Option<usize>,
    output_padding: Option<usize>,
    groups: Option<usize>,
}

const NONE: Layout =
    Layout { stride: 0, padding: 0, dilation: 0, transposed: false, bias: None, output_padding: None, groups: None };

fn list<'a>(args: &Args<'a>, index: usize) -> Result<&'a [i64], FormulaError> {
    args.int_list(index).ok_or(FormulaError::MissingArgument(index))
}

/// The convolution, and its bias's add (1 per output element) when the kernel is given one.
fn convolution_at(args: &Args, layout: Layout) -> Result<u64, FormulaError> {
    let (input, weight) = (require_tensor(args, 0)?, require_tensor(args, 1)?);
    let dilation = args.int_list(layout.dilation).unwrap_or(&[1]);
    let (stride, padding) = (list(args, layout.stride)?, list(args, layout.padding)?);
    let work = convolution_of(input.dims, weight.dims, stride, padding, dilation, layout.transposed)?;
    if !layout.bias.is_some_and(|b| args.has_tensor(b)) {
        return Ok(work);
    }
    let bias = if layout.transposed {
        let output_padding = layout.output_padding.map(|i| list(args, i)).transpose()?.unwrap_or(&[]);
        let groups = layout.groups.map(|i| args.int(i).ok_or(FormulaError::MissingArgument(i))).transpose()?;
        transposed_outputs(input.dims, weight.dims, stride, padding, dilation, output_padding, groups.unwrap_or(1))?
    } else {
        outputs(input.dims, weight.dims, stride, padding, dilation)?
    };
    add(work, bias)
}

/// `_slow_conv2d_forward`, `slow_conv3d_forward` (no dilation), `slow_conv_dilated2d/3d`,
/// `_conv_depthwise2d`, `conv_depthwise3d`: `(self, weight, kernel_size, bias, stride, padding
/// [, dilation])`.
pub fn slow(args: &Args) -> Result<u64, FormulaError> {
    convolution_at(args, Layout { stride: 4, padding: 5, dilation: 6, bias: Some(3), ..NONE })
}

/// `slow_conv_transpose2d/3d(self, weight, kernel_size, bias, stride, padding, output_padding,
/// dilation)`.
pub fn slow_transpose(args: &Args) -> Result<u64, FormulaError> {
    let layout =
        Layout { stride: 4, padding: 5, dilation: 7, transposed: true, bias: Some(3), output_padding: Some(6), ..NONE };
    convolution_at(args, layout)
}

/// `cudnn_convolution(self, weight, padding, stride, dilation, groups, ...)`: no bias.
pub fn cudnn(args: &Args) -> Result<u64, FormulaError> {
    convolution_at(args, Layout { stride: 3, padding: 2, dilation: 4, ..NONE })
}

/// `cudnn_convolution_transpose(self, weight, padding, output_padding, stride, dilation, ...)`.
pub fn cudnn_transpose(args: &Args) -> Result<u64, FormulaError> {
    convolution_at(args, Layout { stride: 4, padding: 2, dilation: 5, transposed: true, ..NONE })
}

/// `miopen_convolution` and `miopen_depthwise_convolution(self, weight, bias, padding, stride,
/// dilation, groups, ...)`.
pub fn miopen(args: &Args) -> Result<u64, FormulaError> {
    convolution_at(args, Layout { stride: 4, padding: 3, dilation: 5, bias: Some(2), ..NONE })
}

/// `miopen_convolution_transpose(self, weight, bias, padding, output_padding, stride, dilation,
/// groups, ...)`.
pub fn miopen_transpose(args: &Args) -> Result<u64, FormulaError> {
    let layout = Layout {
        stride: 5,
        padding: 3,
        dilation: 6,
        transposed: true,
        bias: Some(2),
        output_padding: Some(4),
        groups: Some(7),
    };
    convolution_at(args, layout)
}

/// `cudnn_convolution_relu` / `miopen_convolution_relu(self, weight, bias, stride, padding,
/// dilation, groups)`: the convolution and 1 FLOP per output element, +1 with a bias.
pub fn relu(args: &Args) -> Result<u64, FormulaError> {
    let (input, weight) = (require_tensor(args, 0)?, require_tensor(args, 1)?);
    let (stride, padding, dilation) = (list(args, 3)?, list(args, 4)?, list(args, 5)?);
    let spatial = conv_output_spatial(input.dims, weight.dims, stride, padding, dilation)?;
    let work = conv_work(input.dims, weight.dims, false, spatial)?;
    let outputs = mul_all(&[super::dim(&input, 0)?, super::dim(&weight, 0)?, spatial])?;
    let epilogue = if args.has_tensor(2) { mul(outputs, 2)? } else { outputs };
    add(work, epilogue)
}

/// `cudnn_convolution_add_relu` / `miopen_convolution_add_relu(self, weight, z, alpha, bias,
/// stride, padding, dilation, groups)`: the convolution and 3 FLOPs per element of `z` (the
/// output's shape), 4 with a bias.
pub fn add_relu(args: &Args) -> Result<u64, FormulaError> {
    let work = convolution_at(args, Layout { stride: 5, padding: 6, dilation: 7, bias: Some(4), ..NONE })?;
    add(work, mul(require_tensor(args, 2)?.numel().ok_or(FormulaError::Overflow)?, 3)?)
}

/// `_slow_conv2d_backward(grad_output, self, weight, kernel_size, stride, padding, output_mask)`:
/// the input and weight gradients each cost one forward convolution (`convolution_backward`'s
/// convention); the bias gradient, a sum of `grad_output`, 1 per element.
pub fn slow_backward(args: &Args) -> Result<u64, FormulaError> {
    let (grad_output, input, weight) = (require_tensor(args, 0)?, require_tensor(args, 1)?, require_tensor(args, 2)?);
    let spatial = super::product(grad_output.dims.get(2..).ok_or(FormulaError::UnexpectedShape)?)?;
    let one = conv_work(input.dims, weight.dims, false, spatial)?;
    let mask = args.bool_list(6).unwrap_or(&[1, 1, 1]);
    let wanted = |i: usize| u64::from(mask.get(i).copied().unwrap_or(0) != 0);
    let bias = mul(grad_output.numel().ok_or(FormulaError::Overflow)?, wanted(2))?;
    add(mul(one, wanted(0) + wanted(1))?, bias)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::build::*;
    use crate::formulas::testing::with_args;

    // Conv2d(2, 4, 3) on [1, 2, 7, 7] with stride 2, padding 1, dilation 2: the output side is
    // (7 + 2 - 2*2 - 1) / 2 + 1 = 3, so 2 x 4 x 2 x 9 x 9 = 1,296 FLOPs.
    const X: &[i64] = &[1, 2, 7, 7];
    const W: &[i64] = &[4, 2, 3, 3];
    const OUT: u64 = 1296;

    #[test]
    fn slow_and_depthwise_paths() {
        let f = with_args(
            |s| {
                tensor(s, X);
                tensor(s, W);
                ints(s, &[3, 3]);
                none(s);
                ints(s, &[2, 2]);
                ints(s, &[1, 1]);
                ints(s, &[2, 2]);
            },
            slow,
        );
        assert_eq!(f, Ok(OUT));
        // `_slow_conv2d_forward` has no dilation: 1. Output side (7 + 2 - 3) / 2 + 1 = 4.
        let f = with_args(
            |s| {
                tensor(s, X);
                tensor(s, W);
                ints(s, &[3, 3]);
                none(s);
                ints(s, &[2, 2]);
                ints(s, &[1, 1]);
            },
            slow,
        );
        assert_eq!(f, Ok(2 * 4 * 2 * 9 * 16));
    }

    #[test]
    fn cudnn_and_miopen_layouts() {
        let cudnn_args = |s: &mut Vec<i64>| {
            tensor(s, X);
            tensor(s, W);
            ints(s, &[1, 1]); // padding
            ints(s, &[2, 2]); // stride
            ints(s, &[2, 2]); // dilation
            int(s, 1);
        };
        assert_eq!(with_args(cudnn_args, cudnn), Ok(OUT));
        let miopen_args = |s: &mut Vec<i64>| {
            tensor(s, X);
            tensor(s, W);
            none(s);
            ints(s, &[1, 1]);
            ints(s, &[2, 2]);
            ints(s, &[2, 2]);
            int(s, 1);
        };
        assert_eq!(with_args(miopen_args, miopen), Ok(OUT));
        // The fused ReLU: + 1 x 4 x 3 x 3 outputs.
        let relu_args = |s: &mut Vec<i64>| {
            tensor(s, X);
            tensor(s, W);
            none(s);
            ints(s, &[2, 2]); // stride
            ints(s, &[1, 1]); // padding
            ints(s, &[2, 2]); // dilation
            int(s, 1);
        };
        assert_eq!(with_args(relu_args, relu), Ok(OUT + 36));
        let add_relu_args = |s: &mut Vec<i64>| {
            tensor(s, X);
            tensor(s, W);
            tensor(s, &[1, 4, 3, 3]);
            double(s, 1.0);
            none(s);
            ints(s, &[2, 2]);
            ints(s, &[1, 1]);
            ints(s, &[2, 2]);
            int(s, 1);
        };
        assert_eq!(with_args(add_relu_args, add_relu), Ok(OUT + 3 * 36));
    }

    #[test]
    fn transposed_kernels_count_from_their_input() {
        // ConvTranspose2d(4, 2, 3) on [1, 4, 3, 3]: weight [4, 2, 3, 3]; 2 x 8 x 9 x 9 = 1,296.
        let (x, w) = (&[1, 4, 3, 3][..], &[4, 2, 3, 3][..]);
        let cudnn_args = |s: &mut Vec<i64>| {
            tensor(s, x);
            tensor(s, w);
            ints(s, &[0, 0]);
            ints(s, &[0, 0]);
            ints(s, &[2, 2]);
            ints(s, &[1, 1]);
            int(s, 1);
        };
        assert_eq!(with_args(cudnn_args, cudnn_transpose), Ok(1296));
        let slow_args = |s: &mut Vec<i64>| {
            tensor(s, x);
            tensor(s, w);
            ints(s, &[3, 3]);
            none(s);
            ints(s, &[2, 2]);
            ints(s, &[0, 0]);
            ints(s, &[0, 0]);
            ints(s, &[1, 1]);
        };
        assert_eq!(with_args(slow_args, slow_transpose), Ok(1296));
        let miopen_args = |s: &mut Vec<i64>| {
            tensor(s, x);
            tensor(s, w);
            none(s);
            ints(s, &[0, 0]);
            ints(s, &[0, 0]);
            ints(s, &[2, 2]);
            ints(s, &[1, 1]);
            int(s, 1);
        };
        assert_eq!(with_args(miopen_args, miopen_transpose), Ok(1296));
    }

    #[test]
    fn slow_backward_prices_the_requested_gradients() {
        // grad_output [1, 4, 3, 3]: one convolution is 2 x 8 x 9 x 9 = 1,296.
        let call = |mask: &[bool]| {
            let mask = mask.to_vec();
            with_args(
                move |s| {
                    tensor(s, &[1, 4, 3, 3]);
                    tensor(s, X);
                    tensor(s, W);
                    ints(s, &[3, 3]);
                    ints(s, &[2, 2]);
                    ints(s, &[1, 1]);
                    bools(s, &mask);
                },
                slow_backward,
            )
        };
        // The bias gradient sums grad_output's 36 elements (the separate `sum`'s 36).
        assert_eq!(call(&[true, true, true]), Ok(2 * OUT + 36));
        assert_eq!(call(&[true, true, false]), Ok(2 * OUT));
        assert_eq!(call(&[false, true, true]), Ok(OUT + 36));
        assert_eq!(call(&[false, false, true]), Ok(36));
    }

    #[test]
    fn a_bias_adds_one_per_output_element() {
        // The slow path with a bias [4]: the output [1, 4, 3, 3] (36 elements) gets its add.
        let slow_args = |s: &mut Vec<i64>| {
            tensor(s, X);
            tensor(s, W);
            ints(s, &[3, 3]);
            tensor(s, &[4]);
            ints(s, &[2, 2]);
            ints(s, &[1, 1]);
            ints(s, &[2, 2]);
        };
        assert_eq!(with_args(slow_args, slow), Ok(OUT + 36));
        // ReLU and add-ReLU epilogues with a bias: + 2 x 36 and + 4 x 36.
        let relu_args = |s: &mut Vec<i64>| {
            tensor(s, X);
            tensor(s, W);
            tensor(s, &[4]);
            ints(s, &[2, 2]);
            ints(s, &[1, 1]);
            ints(s, &[2, 2]);
            int(s, 1);
        };
        assert_eq!(with_args(relu_args, relu), Ok(OUT + 72));
        let add_relu_args = |s: &mut Vec<i64>| {
            tensor(s, X);
            tensor(s, W);
            tensor(s, &[1, 4, 3, 3]);
            double(s, 1.0);
            tensor(s, &[4]);
            ints(s, &[2, 2]);
            ints(s, &[1, 1]);
            ints(s, &[2, 2]);
            int(s, 1);
        };
        assert_eq!(with_args(add_relu_args, add_relu), Ok(OUT + 4 * 36));
        // ConvTranspose2d(4, 2, 3, stride 2) on [1, 4, 3, 3] with a bias: the output side is
        // (3 - 1) x 2 + (3 - 1) + 1 = 7 (8 with output padding 1), 2 channels: + 98 (+ 128).
        let miopen_args = |output_padding: i64| {
            move |s: &mut Vec<i64>| {
                tensor(s, &[1, 4, 3, 3]);
                tensor(s, &[4, 2, 3, 3]);
                tensor(s, &[2]);
                ints(s, &[0, 0]);
                ints(s, &[output_padding, output_padding]);
                ints(s, &[2, 2]);
                ints(s, &[1, 1]);
                int(s, 1);
            }
        };
        assert_eq!(with_args(miopen_args(0), miopen_transpose), Ok(1296 + 98));
        assert_eq!(with_args(miopen_args(1), miopen_transpose), Ok(1296 + 128));
    }
}
