//! Scaled dot-product attention kernels. Convention (PyTorch's flop counter,
//! `sdpa_flop_count` / `sdpa_backward_flop_count`): the two batched matrix products of
//! attention at 2 FLOPs per multiply-accumulate; softmax, scaling, masking and dropout are not
//! counted, and a causal mask does not halve the count (the kernels' convention).
//!
//! Shapes are `[..., s, d]`: every leading dimension is batch (batch and heads). Query `[B, s_q,
//! d_q]`, key `[B, s_k, d_q]`, value `[B, s_k, d_v]`.
//! - forward: `2*B*s_q*s_k*d_q` (scores) + `2*B*s_q*s_k*d_v` (weighted values);
//! - backward: the score recomputation, grad of values, grad of scores, grad of query and key:
//!   `2*B*s_q*s_k*(3*d_q + 2*d_v)`.

use super::{add, mul_all, product, require_tensor, FormulaError};
use crate::args::Args;

struct Dims {
    batch: u64,
    s_q: u64,
    s_k: u64,
    d_q: u64,
    d_v: u64,
}

fn last_two(dims: &[i64]) -> Result<(u64, u64, &[i64]), FormulaError> {
    let n = dims.len();
    if n < 2 {
        return Err(FormulaError::UnexpectedShape);
    }
    let s = u64::try_from(dims[n - 2]).map_err(|_| FormulaError::UnexpectedShape)?;
    let d = u64::try_from(dims[n - 1]).map_err(|_| FormulaError::UnexpectedShape)?;
    Ok((s, d, &dims[..n - 2]))
}

/// Query, key and value at `first`, `first + 1`, `first + 2`.
fn qkv(args: &Args, first: usize) -> Result<Dims, FormulaError> {
    let (s_q, d_q, batch_dims) = last_two(require_tensor(args, first)?.dims)?;
    let (s_k, _, _) = last_two(require_tensor(args, first + 1)?.dims)?;
    let (_, d_v, _) = last_two(require_tensor(args, first + 2)?.dims)?;
    Ok(Dims { batch: product(batch_dims)?, s_q, s_k, d_q, d_v })
}

/// Forward kernels: `(query, key, value, ...)`.
pub fn sdpa_forward(args: &Args) -> Result<u64, FormulaError> {
    forward_at(args, 0)
}

/// `_flash_attention_forward_no_dropout_inplace(out, query, key, value, ...)`.
pub fn sdpa_forward_into(args: &Args) -> Result<u64, FormulaError> {
    forward_at(args, 1)
}

fn forward_at(args: &Args, first: usize) -> Result<u64, FormulaError> {
    let d = qkv(args, first)?;
    add(mul_all(&[2, d.batch, d.s_q, d.s_k, d.d_q])?, mul_all(&[2, d.batch, d.s_q, d.s_k, d.d_v])?)
}

/// `_transform_bias_rescale_qkv(qkv [B, T, 3E], qkv_bias [3E], num_heads)`: the bias added to
/// every element and the query third scaled by `1/sqrt(head_dim)`: `numel + numel / 3`.
pub fn transform_bias_rescale_qkv(args: &Args) -> Result<u64, FormulaError> {
    let n = super::require_tensor(args, 0)?.numel().ok_or(FormulaError::Overflow)?;
    if n % 3 != 0 {
        return Err(FormulaError::UnexpectedShape);
    }
    add(n, n / 3)
}

/// Backward kernels: `(grad_out, query, key, value, ...)`.
pub fn sdpa_backward(args: &Args) -> Result<u64, FormulaError> {
    let d = qkv(args, 1)?;
    let score_sized = mul_all(&[2, d.batch, d.s_q, d.s_k])?;
    let depth = add(mul_all(&[3, d.d_q])?, mul_all(&[2, d.d_v])?)?;
    mul_all(&[score_sized, depth])
}

/// `_native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias,
/// proj_weight, proj_bias, ...)`: nn.MultiheadAttention's inference fast path, one kernel for
/// what the slow path dispatches as separate operators. The same convention as those operators
/// (2 FLOPs per multiply-accumulate, softmax and scaling not counted, biases by the bias
/// convention): Q, K and V projections `2*B*(s_q + 2*s_k)*E*E`, the two attention products
/// `4*B*s_q*s_k*E` (the heads split `E`), the output projection `2*B*s_q*E*E`; with biases, their
/// adds, `B*(s_q + 2*s_k)*E` (qkv_bias) and `B*s_q*E` (proj_bias).
///
/// A nested query (`nn.TransformerEncoder` with `src_key_padding_mask`, whose fast path drops the
/// padded tokens) has no single shape: its record is its elements as a flat tensor, and the
/// sequence lengths are data. The kernel dispatches its work on dense tensors it can see (the
/// projections on the stored tokens, `mm`/`addmm`; the attention products on the padded batch,
/// `bmm`; the softmax of each sequence), so such a call is a composite: its nested operators are
/// counted, exactly, whatever the mask.
pub fn native_multi_head_attention(args: &Args) -> Result<u64, FormulaError> {
    let query = require_tensor(args, 0)?;
    if query.dims.len() == 1 {
        return Err(FormulaError::Descend);
    }
    let (s_q, e, batch_dims) = last_two(query.dims)?;
    let (s_k, _, _) = last_two(require_tensor(args, 1)?.dims)?;
    let batch = product(batch_dims)?;
    let projections = mul_all(&[2, batch, add(s_q, mul_all(&[2, s_k])?)?, e, e])?;
    let attention = mul_all(&[4, batch, s_q, s_k, e])?;
    let output = mul_all(&[2, batch, s_q, e, e])?;
    let qkv_bias = if args.has_tensor(6) { mul_all(&[batch, add(s_q, mul_all(&[2, s_k])?)?, e])? } else { 0 };
    let proj_bias = if args.has_tensor(8) { mul_all(&[batch, s_q, e])? } else { 0 };
    add(add(add(projections, attention)?, output)?, add(qkv_bias, proj_bias)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::build::*;
    use crate::formulas::testing::with_args;

    #[test]
    fn forward_counts_both_products() {
        // q[2,4,8,16], k[2,4,10,16], v[2,4,10,32]: B = 8.
        // scores 2*8*8*10*16 = 20_480; values 2*8*8*10*32 = 40_960; total 61_440.
        let f = with_args(
            |s| {
                tensor(s, &[2, 4, 8, 16]);
                tensor(s, &[2, 4, 10, 16]);
                tensor(s, &[2, 4, 10, 32]);
                double(s, 0.0);
                boolean(s, true);
            },
            sdpa_forward,
        );
        assert_eq!(f, Ok(61_440));
    }

    #[test]
    fn backward_counts_five_products() {
        // Same shapes: 2*8*8*10 * (3*16 + 2*32) = 1280 * 112 = 143_360.
        let f = with_args(
            |s| {
                tensor(s, &[2, 4, 8, 32]);
                tensor(s, &[2, 4, 8, 16]);
                tensor(s, &[2, 4, 10, 16]);
                tensor(s, &[2, 4, 10, 32]);
            },
            sdpa_backward,
        );
        assert_eq!(f, Ok(143_360));
    }

    #[test]
    fn three_dimensional_inputs() {
        // q[3,5,4], k[3,6,4], v[3,6,4]: 2*3*5*6*4 * 2 = 1440.
        let f = with_args(
            |s| {
                tensor(s, &[3, 5, 4]);
                tensor(s, &[3, 6, 4]);
                tensor(s, &[3, 6, 4]);
            },
            sdpa_forward,
        );
        assert_eq!(f, Ok(1440));
        let f = with_args(
            |s| {
                tensor(s, &[4]);
                tensor(s, &[3, 6, 4]);
                tensor(s, &[3, 6, 4]);
            },
            sdpa_forward,
        );
        assert_eq!(f, Err(FormulaError::UnexpectedShape));
    }

    #[test]
    fn native_multi_head_attention_prices_projections_and_products() {
        // Self-attention, B=2, L=3, E=4, 2 heads: QKV 2*2*9*16 = 576, attention 4*2*3*3*4 = 288,
        // output 2*2*3*16 = 192; the biases' adds 2*9*4 = 72 (qkv) and 2*3*4 = 24 (proj).
        let f = with_args(
            |s| {
                for _ in 0..3 {
                    tensor(s, &[2, 3, 4]);
                }
                int(s, 4);
                int(s, 2);
                tensor(s, &[12, 4]);
                tensor(s, &[12]);
                tensor(s, &[4, 4]);
                tensor(s, &[4]);
                none(s);
                boolean(s, false);
                boolean(s, true);
                none(s);
            },
            native_multi_head_attention,
        );
        assert_eq!(f, Ok(576 + 288 + 192 + 72 + 24));
        // Cross-attention (no biases given), s_q=1, s_k=5, E=2, unbatched: QKV 2*11*4 = 88, 4*5*2 = 40, 2*4 = 8.
        let cross = with_args(
            |s| {
                tensor(s, &[1, 2]);
                tensor(s, &[5, 2]);
                tensor(s, &[5, 2]);
            },
            native_multi_head_attention,
        );
        assert_eq!(cross, Ok(88 + 40 + 8));
    }

    #[test]
    fn inplace_flash_forward_and_qkv_rescale() {
        // out, then q/k/v [1, 2, 4, 8]: 2 x (2 x 2 x 4 x 4 x 8) = 1,024, as sdpa_forward.
        let f = with_args(
            |s| {
                tensor(s, &[1, 2, 4, 8]);
                for _ in 0..3 {
                    tensor(s, &[1, 2, 4, 8]);
                }
            },
            sdpa_forward_into,
        );
        assert_eq!(f, Ok(1024));
        // qkv [2, 5, 12]: 120 bias adds and 40 query scalings.
        let f = with_args(
            |s| {
                tensor(s, &[2, 5, 12]);
                tensor(s, &[12]);
                int(s, 2);
            },
            transform_bias_rescale_qkv,
        );
        assert_eq!(f, Ok(160));
    }
}
