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

/// The fused pointwise cells behind `nn.LSTMCell` / `nn.GRUCell` on CUDA, after their two gate
/// products (counted as `mm`): per hidden unit of each batch row, LSTM 13 (the 4 gate sums and
/// the 9 of the gate arithmetic above), GRU 11 (the 2 sums of the reset and update gates, 2
/// sigmoids, the reset multiply and its add, a tanh, `1 - z`, two multiplies and an add). The
/// biases are not counted (the product convention). Backward kernels: twice the forward.
///
/// `_thnn_fused_lstm_cell(input_gates, hidden_gates, cx [B, H], input_bias, hidden_bias)`.
pub fn fused_lstm_cell(args: &Args) -> Result<u64, FormulaError> {
    mul(require_tensor(args, 2)?.numel().ok_or(FormulaError::Overflow)?, 13)
}

/// `_thnn_fused_lstm_cell_backward_impl(grad_hy, grad_cy, cx [B, H], cy, workspace, has_bias)`.
pub fn fused_lstm_cell_backward(args: &Args) -> Result<u64, FormulaError> {
    mul(fused_lstm_cell(args)?, 2)
}

/// `_thnn_fused_gru_cell(input_gates, hidden_gates, hx [B, H], input_bias, hidden_bias)`.
pub fn fused_gru_cell(args: &Args) -> Result<u64, FormulaError> {
    mul(require_tensor(args, 2)?.numel().ok_or(FormulaError::Overflow)?, 11)
}

/// `_thnn_fused_gru_cell_backward(grad_hy [B, H], workspace, has_bias)`.
pub fn fused_gru_cell_backward(args: &Args) -> Result<u64, FormulaError> {
    mul(require_tensor(args, 0)?.numel().ok_or(FormulaError::Overflow)?, 22)
}

/// A whole multi-layer RNN in one kernel (cuDNN, MIOpen): its weights come as one list, `stride`
/// tensors per layer and direction (`w_ih [G, I]`, `w_hh [G, P]`, then biases and a projection
/// `w_hr [P, H]` when present). Per time step and batch row, each layer-direction costs its two
/// products `2 G (I + P)` and the gates: LSTM `G + 9H` (as `mkldnn_rnn_layer`), GRU `11 H` (as
/// the fused cell), tanh or ReLU RNN `G + H` (the sum and the activation); a projection adds
/// `2 H P`. Modes as cuDNN numbers them: 0 ReLU, 1 tanh, 2 LSTM, 3 GRU.
fn whole_rnn(args: &Args, mode: usize) -> Result<u64, FormulaError> {
    let stride = usize::try_from(args.int(2).ok_or(FormulaError::MissingArgument(2))?)
        .ok()
        .filter(|&s| s >= 2)
        .ok_or(FormulaError::UnexpectedShape)?;
    let weights: Vec<_> = args.list_tensors(1).ok_or(FormulaError::MissingArgument(1))?.collect();
    let mode = args.int(mode).ok_or(FormulaError::MissingArgument(mode))?;
    let first = weights.first().ok_or(FormulaError::UnexpectedShape)?;
    let input_size = dim(first, 1)?;
    let elements = require_tensor(args, 0)?.numel().ok_or(FormulaError::Overflow)?;
    if input_size == 0 || elements % input_size != 0 || weights.len() % stride != 0 {
        return Err(FormulaError::UnexpectedShape);
    }
    let rows = elements / input_size;
    let mut per_row = 0u64;
    for chunk in weights.chunks(stride) {
        let (gates, inputs, recurrent) = (dim(&chunk[0], 0)?, dim(&chunk[0], 1)?, dim(&chunk[1], 1)?);
        let (hidden, gate_work) = match mode {
            0 | 1 => (gates, add(gates, gates)?),
            2 => (gates / 4, add(gates, mul(9, gates / 4)?)?),
            3 => (gates / 3, mul(11, gates / 3)?),
            _ => return Err(FormulaError::UnexpectedShape),
        };
        let projection = if stride % 2 == 1 { mul_all(&[2, hidden, recurrent])? } else { 0 };
        let products = mul_all(&[2, gates, add(inputs, recurrent)?])?;
        per_row = add(per_row, add(add(products, gate_work)?, projection)?)?;
    }
    mul(rows, per_row)
}

/// `_cudnn_rnn(input, weight, weight_stride0, weight_buf, hx, cx, mode, ...)`.
pub fn cudnn_rnn(args: &Args) -> Result<u64, FormulaError> {
    whole_rnn(args, 6)
}

/// `miopen_rnn(input, weight, weight_stride0, hx, cx, mode, ...)`.
pub fn miopen_rnn(args: &Args) -> Result<u64, FormulaError> {
    whole_rnn(args, 5)
}

/// `_cudnn_rnn_backward` / `miopen_rnn_backward(input, weight, weight_stride0, weight_buf, hx,
/// cx, output, grad_output, grad_hy, grad_cy, mode, ...)`: twice the forward.
pub fn whole_rnn_backward(args: &Args) -> Result<u64, FormulaError> {
    mul(whole_rnn(args, 10)?, 2)
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

    #[test]
    fn fused_cells_and_whole_rnn_kernels() {
        // Cells of batch 3, hidden 16: LSTM 48 x 13, GRU 48 x 11.
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[3, 64]);
                    tensor(s, &[3, 64]);
                    tensor(s, &[3, 16]);
                },
                fused_lstm_cell
            ),
            Ok(624)
        );
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[3, 48]);
                    tensor(s, &[3, 48]);
                    tensor(s, &[3, 16]);
                },
                fused_gru_cell
            ),
            Ok(528)
        );
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[3, 16]);
                    tensor(s, &[3, 80]);
                    boolean(s, true);
                },
                fused_gru_cell_backward
            ),
            Ok(1056)
        );
        // cuDNN LSTM(8, 16), one layer, [5, 3, 8]: as mkldnn_rnn_layer, 15 rows x 3,280 = 49,200.
        let lstm = with_args(
            |s| {
                tensor(s, &[5, 3, 8]);
                tensors(s, &[&[64, 8], &[64, 16], &[64], &[64]]);
                int(s, 4);
                none(s);
                tensor(s, &[1, 3, 16]);
                tensor(s, &[1, 3, 16]);
                int(s, 2);
            },
            cudnn_rnn,
        );
        assert_eq!(lstm, Ok(49_200));
        // A bidirectional GRU(4, 6) without biases on [2, 1, 4]: per direction 2 x 18 x (4 + 6)
        // + 66 = 426; 2 rows x 2 directions = 1,704. MIOpen's layout.
        let gru = with_args(
            |s| {
                tensor(s, &[2, 1, 4]);
                tensors(s, &[&[18, 4], &[18, 6], &[18, 4], &[18, 6]]);
                int(s, 2);
                tensor(s, &[2, 1, 6]);
                none(s);
                int(s, 3);
            },
            miopen_rnn,
        );
        assert_eq!(gru, Ok(1704));
    }
}
