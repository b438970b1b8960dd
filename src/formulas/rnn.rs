//! Recurrent layers whose whole time loop is one kernel: the oneDNN LSTM layer that `nn.LSTM`
//! runs on CPU (`aten::mkldnn_rnn_layer`, one direction of one layer per call).
//!
//! Convention: what the same layer counts when PyTorch runs it operator by operator
//! (`lstm_cell`): per time step and batch row, the input and hidden products at 2 FLOPs per
//! multiply-accumulate (`2 G (I + P)` for `G = 4H` gate rows, input size `I` and recurrent size
//! `P`), their sum (`G`), and the gate arithmetic (`9H`: three sigmoids, two tanh, three
//! multiplies and an add); biases are not counted (PyTorch's matmul convention). The backward
//! kernel counts twice the forward (the input and weight gradients of each product, and the
//! gates' derivatives).

use super::{add, dim, mul, mul_all, require_tensor, FormulaError};
use crate::args::Args;

/// `mode` of an LSTM (`ideep::rnn_kind::LSTM`); the oneDNN path runs LSTMs only.
const LSTM: i64 = 2;

/// FLOPs of one LSTM layer-direction over `input` with weights `w_ih` [4H, I] and `w_hh` [4H, P].
fn lstm_layer(args: &Args, input: usize, w_ih: usize, w_hh: usize, mode: usize) -> Result<u64, FormulaError> {
    if args.int(mode) != Some(LSTM) {
        return Err(FormulaError::UnexpectedShape);
    }
    let (w_ih, w_hh) = (require_tensor(args, w_ih)?, require_tensor(args, w_hh)?);
    let (gates, input_size, recurrent) = (dim(&w_ih, 0)?, dim(&w_ih, 1)?, dim(&w_hh, 1)?);
    if gates % 4 != 0 || dim(&w_hh, 0)? != gates || input_size == 0 {
        return Err(FormulaError::UnexpectedShape);
    }
    let hidden = gates / 4;
    let elements = require_tensor(args, input)?.numel().ok_or(FormulaError::Overflow)?;
    if elements % input_size != 0 {
        return Err(FormulaError::UnexpectedShape);
    }
    // Every (time step, batch row) pair, packed or padded: the input's rows.
    let rows = elements / input_size;
    let products = mul_all(&[2, gates, add(input_size, recurrent)?])?;
    let per_row = add(add(products, gates)?, mul(9, hidden)?)?;
    mul(rows, per_row)
}

/// `mkldnn_rnn_layer(input, weight0 (w_ih), weight1 (w_hh), weight2, weight3, hx, cx, reverse,
/// batch_sizes, mode, ...)`.
pub fn mkldnn_rnn_layer(args: &Args) -> Result<u64, FormulaError> {
    lstm_layer(args, 0, 1, 2, 9)
}

/// `mkldnn_rnn_layer_backward(input, weight1 (w_ih), weight2 (w_hh), weight3, weight4, hx,
/// cx_tmp, output, hy, cy, grad_output, grad_hy, grad_cy, reverse, mode, ...)`: twice the forward.
pub fn mkldnn_rnn_layer_backward(args: &Args) -> Result<u64, FormulaError> {
    mul(lstm_layer(args, 0, 1, 2, 14)?, 2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::build::*;
    use crate::formulas::testing::with_args;

    /// nn.LSTM(8, 16) on a [5, 3, 8] sequence: 15 rows; per row 2 x 64 x (8 + 16) = 3072 for the
    /// products, 64 for their sum and 9 x 16 = 144 for the gates: 3280; x 15 = 49,200.
    fn forward(mode: i64) -> Result<u64, FormulaError> {
        with_args(
            |s| {
                tensor(s, &[5, 3, 8]);
                tensor(s, &[64, 8]);
                tensor(s, &[64, 16]);
                tensor(s, &[64]);
                tensor(s, &[64]);
                tensor(s, &[3, 16]);
                tensor(s, &[3, 16]);
                boolean(s, false);
                ints(s, &[]);
                int(s, mode);
                int(s, 16);
            },
            mkldnn_rnn_layer,
        )
    }

    #[test]
    fn lstm_layer_forward() {
        assert_eq!(forward(LSTM), Ok(49_200));
        assert_eq!(forward(3), Err(FormulaError::UnexpectedShape), "only LSTMs take this path");
    }

    #[test]
    fn lstm_layer_backward_is_twice_the_forward() {
        let backward = with_args(
            |s| {
                tensor(s, &[5, 3, 8]);
                tensor(s, &[64, 8]);
                tensor(s, &[64, 16]);
                tensor(s, &[64]);
                tensor(s, &[64]);
                tensor(s, &[3, 16]);
                tensor(s, &[3, 16]);
                tensor(s, &[5, 3, 16]);
                tensor(s, &[3, 16]);
                tensor(s, &[3, 16]);
                tensor(s, &[5, 3, 16]);
                none(s);
                none(s);
                boolean(s, true);
                int(s, LSTM);
            },
            mkldnn_rnn_layer_backward,
        );
        assert_eq!(backward, Ok(98_400));
    }
}
