//! Recurrent layers whose whole time loop is one kernel: the oneDNN LSTM layer that `nn.LSTM`
//! runs on CPU (`aten::mkldnn_rnn_layer`, one direction of one layer per call).
//!
//! Convention: what the same layer counts when PyTorch runs it operator by operator
//! (`lstm_cell`): per time step and batch row, the input and hidden products at 2 FLOPs per
//! multiply-accumulate (`2 G (I + P)` for `G = 4H` gate rows, input size `I` and recurrent size
//! `P`), their sum (`G`), and the gate arithmetic (`9H`: three sigmoids, two tanh, three
//! multiplies and an add). The biases follow the bias convention (`matmul.rs`): the two
//! `linear` calls of `lstm_cell` add `b_ih` and `b_hh`, `G` each (`2G` per row when the layer has
//! biases). The backward kernel counts twice the forward's products and gates (the input and
//! weight gradients of each product, and the gates' derivatives) and the two bias gradients,
//! the sums over the rows that the operator-by-operator backward dispatches (`2G` per row).

use super::{add, dim, mul, mul_all, require_tensor, FormulaError};
use crate::args::Args;

/// `mode` of an LSTM (`ideep::rnn_kind::LSTM`); the oneDNN path runs LSTMs only.
const LSTM: i64 = 2;

/// FLOPs of one LSTM layer-direction over `input` with weights `w_ih` [4H, I] and `w_hh` [4H, P]:
/// the products and gates (times `passes`: 1 forward, 2 backward), and `2G` per row for the
/// biases (their adds forward, their gradients' sums backward) when `has_biases` says so.
fn lstm_layer(
    args: &Args,
    input: usize,
    w_ih: usize,
    w_hh: usize,
    mode: usize,
    passes: u64,
) -> Result<u64, FormulaError> {
    if args.int(mode) != Some(LSTM) {
        return Err(FormulaError::UnexpectedShape);
    }
    // `has_biases` sits 3 after `mode` in both kernels' schemas.
    let biases = args.bool(mode + 3).ok_or(FormulaError::MissingArgument(mode + 3))?;
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
    let per_row = mul(add(add(products, gates)?, mul(9, hidden)?)?, passes)?;
    let bias = if biases { mul(2, gates)? } else { 0 };
    mul(rows, add(per_row, bias)?)
}

/// `mkldnn_rnn_layer(input, weight0 (w_ih), weight1 (w_hh), weight2, weight3, hx, cx, reverse,
/// batch_sizes, mode, hidden_size, num_layers, has_biases, ...)`.
pub fn mkldnn_rnn_layer(args: &Args) -> Result<u64, FormulaError> {
    lstm_layer(args, 0, 1, 2, 9, 1)
}

/// `mkldnn_rnn_layer_backward(input, weight1 (w_ih), weight2 (w_hh), weight3, weight4, hx,
/// cx_tmp, output, hy, cy, grad_output, grad_hy, grad_cy, reverse, mode, hidden_size,
/// num_layers, has_biases, ...)`: twice the forward's products and gates, and the bias gradients.
pub fn mkldnn_rnn_layer_backward(args: &Args) -> Result<u64, FormulaError> {
    lstm_layer(args, 0, 1, 2, 14, 2)
}

/// The fused pointwise cells behind `nn.LSTMCell` / `nn.GRUCell` on CUDA, after their two gate
/// products (counted as `mm`): per hidden unit of each batch row, LSTM 13 (the 4 gate sums and
/// the 9 of the gate arithmetic above), GRU 11 (the 2 sums of the reset and update gates, 2
/// sigmoids, the reset multiply and its add, a tanh, `1 - z`, two multiplies and an add). The
/// biases, when given, are added in the cell: 1 FLOP per gate element each (the bias
/// convention), LSTM +8 and GRU +6 per hidden unit. Backward kernels: twice the forward's gate
/// arithmetic, and the bias gradients' sums over the batch, 1 per gate element each: the LSTM
/// kernel sums once (+4; both biases take that gradient), the GRU kernel twice (+6).
///
/// `_thnn_fused_lstm_cell(input_gates, hidden_gates, cx [B, H], input_bias, hidden_bias)`.
pub fn fused_lstm_cell(args: &Args) -> Result<u64, FormulaError> {
    let units = require_tensor(args, 2)?.numel().ok_or(FormulaError::Overflow)?;
    mul(units, add(13, cell_biases(args, 4))?)
}

/// 1 per gate element (`gates` per hidden unit) for each bias given at 3 and 4.
fn cell_biases(args: &Args, gates: u64) -> u64 {
    gates * (u64::from(args.has_tensor(3)) + u64::from(args.has_tensor(4)))
}

/// `has_bias` at `index`: the bias gradients' `sums` per hidden unit, or none.
fn bias_gradients(args: &Args, index: usize, sums: u64) -> Result<u64, FormulaError> {
    Ok(if args.bool(index).ok_or(FormulaError::MissingArgument(index))? { sums } else { 0 })
}

/// `_thnn_fused_lstm_cell_backward_impl(grad_hy, grad_cy, cx [B, H], cy, workspace, has_bias)`.
pub fn fused_lstm_cell_backward(args: &Args) -> Result<u64, FormulaError> {
    let units = require_tensor(args, 2)?.numel().ok_or(FormulaError::Overflow)?;
    mul(units, add(26, bias_gradients(args, 5, 4)?)?)
}

/// `_thnn_fused_gru_cell(input_gates, hidden_gates, hx [B, H], input_bias, hidden_bias)`.
pub fn fused_gru_cell(args: &Args) -> Result<u64, FormulaError> {
    let units = require_tensor(args, 2)?.numel().ok_or(FormulaError::Overflow)?;
    mul(units, add(11, cell_biases(args, 3))?)
}

/// `_thnn_fused_gru_cell_backward(grad_hy [B, H], workspace, has_bias)`.
pub fn fused_gru_cell_backward(args: &Args) -> Result<u64, FormulaError> {
    let units = require_tensor(args, 0)?.numel().ok_or(FormulaError::Overflow)?;
    mul(units, add(22, bias_gradients(args, 2, 6)?)?)
}

/// A whole multi-layer RNN in one kernel (cuDNN, MIOpen): its weights come as one list, `stride`
/// tensors per layer and direction (`w_ih [G, I]`, `w_hh [G, P]`, then biases and a projection
/// `w_hr [P, H]` when present). Per time step and batch row, each layer-direction costs its two
/// products `2 G (I + P)` and the gates: LSTM `G + 9H` (as `mkldnn_rnn_layer`), GRU `11 H` (as
/// the fused cell), tanh or ReLU RNN `G + H` (the sum and the activation); a projection adds
/// `2 H P`. Modes as cuDNN numbers them: 0 ReLU, 1 tanh, 2 LSTM, 3 GRU. With biases (4 or 5
/// weights per layer-direction), `2G` per row: their adds forward, their gradients' sums
/// backward (`passes` multiplies the rest: 1 forward, 2 backward).
fn whole_rnn(args: &Args, mode: usize, passes: u64) -> Result<u64, FormulaError> {
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
        let biases = if stride >= 4 { mul(2, gates)? } else { 0 };
        let work = mul(add(add(products, gate_work)?, projection)?, passes)?;
        per_row = add(per_row, add(work, biases)?)?;
    }
    mul(rows, per_row)
}

/// `_cudnn_rnn(input, weight, weight_stride0, weight_buf, hx, cx, mode, ...)`.
pub fn cudnn_rnn(args: &Args) -> Result<u64, FormulaError> {
    whole_rnn(args, 6, 1)
}

/// `miopen_rnn(input, weight, weight_stride0, hx, cx, mode, ...)`.
pub fn miopen_rnn(args: &Args) -> Result<u64, FormulaError> {
    whole_rnn(args, 5, 1)
}

/// `_cudnn_rnn_backward` / `miopen_rnn_backward(input, weight, weight_stride0, weight_buf, hx,
/// cx, output, grad_output, grad_hy, grad_cy, mode, ...)`: twice the forward's products and
/// gates, and the bias gradients.
pub fn whole_rnn_backward(args: &Args) -> Result<u64, FormulaError> {
    whole_rnn(args, 10, 2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::build::*;
    use crate::formulas::testing::with_args;

    /// nn.LSTM(8, 16) on a [5, 3, 8] sequence: 15 rows; per row 2 x 64 x (8 + 16) = 3072 for the
    /// products, 64 for their sum and 9 x 16 = 144 for the gates: 3280; x 15 = 49,200. Its two
    /// biases add 2 x 64 = 128 per row: 15 x 3,408 = 51,120.
    fn forward(mode: i64, biases: bool) -> Result<u64, FormulaError> {
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
                int(s, 1);
                boolean(s, biases);
            },
            mkldnn_rnn_layer,
        )
    }

    #[test]
    fn lstm_layer_forward() {
        assert_eq!(forward(LSTM, false), Ok(49_200));
        assert_eq!(forward(LSTM, true), Ok(51_120));
        assert_eq!(forward(3, true), Err(FormulaError::UnexpectedShape), "only LSTMs take this path");
    }

    #[test]
    fn lstm_layer_backward_is_twice_the_forward_and_the_bias_gradients() {
        // 2 x 49,200 for the products and gates; the two bias gradients sum 15 rows of 64 each:
        // 98,400 + 1,920 = 100,320.
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
                int(s, 16);
                int(s, 1);
                boolean(s, true);
            },
            mkldnn_rnn_layer_backward,
        );
        assert_eq!(backward, Ok(100_320));
    }

    #[test]
    fn fused_cells_and_whole_rnn_kernels() {
        // Cells of batch 3, hidden 16: LSTM 48 x 13, GRU 48 x 11; with their two biases
        // 48 x (13 + 8) = 1,008 and 48 x (11 + 6) = 816.
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
        let biased = |gates: i64| {
            move |s: &mut Vec<i64>| {
                tensor(s, &[3, gates]);
                tensor(s, &[3, gates]);
                tensor(s, &[3, 16]);
                tensor(s, &[gates]);
                tensor(s, &[gates]);
            }
        };
        assert_eq!(with_args(biased(64), fused_lstm_cell), Ok(1_008));
        assert_eq!(with_args(biased(48), fused_gru_cell), Ok(816));
        // Backward: twice the gate arithmetic, and the bias gradients' sums: LSTM one sum of
        // [3, 64] (48 x (26 + 4) = 1,440), GRU two of [3, 48] (48 x (22 + 6) = 1,344).
        let lstm_backward = |has_bias: bool| {
            with_args(
                |s| {
                    tensor(s, &[3, 16]);
                    tensor(s, &[3, 16]);
                    tensor(s, &[3, 16]);
                    tensor(s, &[3, 16]);
                    tensor(s, &[3, 64]);
                    boolean(s, has_bias);
                },
                fused_lstm_cell_backward,
            )
        };
        assert_eq!(lstm_backward(false), Ok(1_248));
        assert_eq!(lstm_backward(true), Ok(1_440));
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[3, 16]);
                    tensor(s, &[3, 80]);
                    boolean(s, true);
                },
                fused_gru_cell_backward
            ),
            Ok(1_344)
        );
        // cuDNN LSTM(8, 16), one layer, [5, 3, 8], with biases: as mkldnn_rnn_layer, 15 rows x
        // 3,408 = 51,120.
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
        assert_eq!(lstm, Ok(51_120));
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
