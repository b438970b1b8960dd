//! Matrix products. Convention (PyTorch's `torch/utils/flop_counter.py`): 2 FLOPs per
//! multiply-accumulate.
//!
//! The bias convention: a fused kernel's added input costs what the separate operators would
//! (an ordinary `add` cannot be told from a bias add, so `F.linear` must cost the same whether it
//! runs as `addmm` or as `mm` + `add`, as it does under `torch.func.vmap`). `addmm(self, a, b,
//! beta, alpha) = beta * self + alpha * (a @ b)` costs the product, 1 FLOP per output element for
//! the add, 1 per element of `self` for `beta`'s multiply and 1 per output element for `alpha`'s;
//! `beta = 1` and `alpha = 1` are free (no multiply), `beta = 0` ignores `self` (no add). PyTorch's
//! counter drops the added input: it differs from these rows by exactly that term.

use super::{add, dim, mul, mul_all, require_tensor, FormulaError};
use crate::args::{Arg, Args};

/// A `beta`/`alpha` Scalar argument: a number, or 1 where the call leaves it out. A Scalar the
/// stream cannot read as a number (complex) is neither 0 nor 1, so its multiply is counted.
pub(super) fn scale(args: &Args, index: usize) -> f64 {
    match args.get(index) {
        Some(Arg::Int(v)) => v as f64,
        Some(Arg::Double(v)) => v,
        None | Some(Arg::None) => 1.0,
        Some(_) => f64::NAN,
    }
}

/// Elements of the added input at `index`: a dense tensor's, or a sparse one's stored values.
pub(super) fn added_elements(args: &Args, index: usize) -> Result<u64, FormulaError> {
    match args.get(index) {
        Some(Arg::Tensor(t)) => t.numel().ok_or(FormulaError::Overflow),
        Some(Arg::Sparse(s)) => u64::try_from(s.stored).map_err(|_| FormulaError::UnexpectedShape),
        _ => Err(FormulaError::MissingTensor(index)),
    }
}

/// The accumulate of `beta * self + alpha * product` into `outputs` elements, as the separate
/// operators would cost it: the add (unless `beta` is 0), `beta`'s multiply over `self` (unless
/// `beta` is 0 or 1), `alpha`'s over the product (unless `alpha` is 1).
pub(super) fn accumulate(
    args: &Args,
    input: usize,
    beta: usize,
    alpha: usize,
    outputs: u64,
) -> Result<u64, FormulaError> {
    let (beta, alpha) = (scale(args, beta), scale(args, alpha));
    let scaled = if alpha == 1.0 { 0 } else { outputs };
    if beta == 0.0 {
        return Ok(scaled);
    }
    let beta_multiply = if beta == 1.0 { 0 } else { added_elements(args, input)? };
    add(add(outputs, beta_multiply)?, scaled)
}

/// `mm(a[m,k], b[k,n])`: 2*m*k*n.
pub fn mm(args: &Args) -> Result<u64, FormulaError> {
    matrix_product(args, 0, 1)
}

/// `addmm(bias, a[m,k], b[k,n], beta, alpha)`: 2*m*k*n, and the bias's [`accumulate`] into
/// the m*n outputs (`m n` with `beta = alpha = 1`).
pub fn addmm(args: &Args) -> Result<u64, FormulaError> {
    add(matrix_product(args, 1, 2)?, accumulate(args, 0, 3, 4, matrix_outputs(args, 1, 2)?)?)
}

/// Elements of `a[m,k] @ b[k,n]`: m*n.
pub(super) fn matrix_outputs(args: &Args, left: usize, right: usize) -> Result<u64, FormulaError> {
    mul(dim(&require_tensor(args, left)?, 0)?, dim(&require_tensor(args, right)?, 1)?)
}

/// `bmm(a[b,m,k], b[b,k,n])`: 2*b*m*k*n.
pub fn bmm(args: &Args) -> Result<u64, FormulaError> {
    batched_product(args, 0, 1)
}

/// `baddbmm(bias, a[b,m,k], b[b,k,n], beta, alpha)`: 2*b*m*k*n, and the bias's
/// [`accumulate`] into the b*m*n outputs.
pub fn baddbmm(args: &Args) -> Result<u64, FormulaError> {
    let outputs = mul(dim(&require_tensor(args, 1)?, 0)?, batched_outputs(args, 1, 2)?)?;
    add(batched_product(args, 1, 2)?, accumulate(args, 0, 3, 4, outputs)?)
}

/// `addbmm(bias, a[b,m,k], b[b,k,n], beta, alpha)`: the batch of products summed into one
/// matrix; the reduction over the batch is the accumulate of the same multiply-accumulates
/// (2*b*m*k*n, as one `[m, bk] @ [bk, n]` product), and the bias's [`accumulate`] into the m*n
/// outputs.
pub fn addbmm(args: &Args) -> Result<u64, FormulaError> {
    add(batched_product(args, 1, 2)?, accumulate(args, 0, 3, 4, batched_outputs(args, 1, 2)?)?)
}

/// Elements of one product of the batch `a[b,m,k] @ b[b,k,n]`: m*n.
fn batched_outputs(args: &Args, left: usize, right: usize) -> Result<u64, FormulaError> {
    mul(dim(&require_tensor(args, left)?, 1)?, dim(&require_tensor(args, right)?, 2)?)
}

/// `mv(a[m,k], v[k])`: 2*m*k.
pub fn mv(args: &Args) -> Result<u64, FormulaError> {
    let a = require_tensor(args, 0)?;
    mul_all(&[2, dim(&a, 0)?, dim(&a, 1)?])
}

/// `addmv(bias, a[m,k], v[k], beta, alpha)`: 2*m*k, and the bias's [`accumulate`] into the m
/// outputs.
pub fn addmv(args: &Args) -> Result<u64, FormulaError> {
    let a = require_tensor(args, 1)?;
    add(mul_all(&[2, dim(&a, 0)?, dim(&a, 1)?])?, accumulate(args, 0, 3, 4, dim(&a, 0)?)?)
}

/// `dot(a[k], b[k])` (and `vdot`): 2*k.
pub fn dot(args: &Args) -> Result<u64, FormulaError> {
    let a = require_tensor(args, 0)?;
    mul_all(&[2, dim(&a, 0)?])
}

fn matrix_product(args: &Args, left: usize, right: usize) -> Result<u64, FormulaError> {
    let a = require_tensor(args, left)?;
    let b = require_tensor(args, right)?;
    if a.dims.len() != 2 || b.dims.len() != 2 {
        return Err(FormulaError::UnexpectedShape);
    }
    mul_all(&[2, dim(&a, 0)?, dim(&a, 1)?, dim(&b, 1)?])
}

fn batched_product(args: &Args, left: usize, right: usize) -> Result<u64, FormulaError> {
    let a = require_tensor(args, left)?;
    let b = require_tensor(args, right)?;
    if a.dims.len() != 3 || b.dims.len() != 3 {
        return Err(FormulaError::UnexpectedShape);
    }
    mul_all(&[2, dim(&a, 0)?, dim(&a, 1)?, dim(&a, 2)?, dim(&b, 2)?])
}

/// `_grouped_mm(mat_a, mat_b, offs, bias, out_dtype)`, mixture-of-experts' grouped product:
/// every group's product at 2 FLOPs per multiply-accumulate. By ranks: `[M, K] x [G, K, N]`
/// (groups along M: `2 M K N`), `[G, M, K] x [G, K, N]` (batched: `2 G M K N`), `[M, K] x
/// [K, N]` (groups along K: `2 M K N`), `[G, M, K] x [K, N]` (groups along N: `2 M K N`).
pub fn grouped_mm(args: &Args) -> Result<u64, FormulaError> {
    let (a, b) = (require_tensor(args, 0)?, require_tensor(args, 1)?);
    let d = |t: &crate::args::TensorMeta, i: usize| dim(t, i);
    let (m, k, n, k_b) = match (a.dims.len(), b.dims.len()) {
        (2, 3) => (d(&a, 0)?, d(&a, 1)?, d(&b, 2)?, d(&b, 1)?),
        (3, 3) if a.dims[0] == b.dims[0] => (super::mul(d(&a, 0)?, d(&a, 1)?)?, d(&a, 2)?, d(&b, 2)?, d(&b, 1)?),
        (2, 2) => (d(&a, 0)?, d(&a, 1)?, d(&b, 1)?, d(&b, 0)?),
        (3, 2) => (d(&a, 1)?, d(&a, 2)?, d(&b, 1)?, d(&b, 0)?),
        _ => return Err(FormulaError::UnexpectedShape),
    };
    if k != k_b {
        return Err(FormulaError::UnexpectedShape);
    }
    mul_all(&[2, m, k, n])
}

/// `_addmm_activation(self, mat1, mat2, beta, alpha, use_gelu)`: `addmm` (the product and the
/// added `self`, as [`addmm`]) and its fused ReLU or GELU, 1 FLOP per output element (the
/// activation convention): with `beta = alpha = 1`, `2 m k n + 2 m n`.
pub fn addmm_activation(args: &Args) -> Result<u64, FormulaError> {
    add(addmm(args)?, matrix_outputs(args, 1, 2)?)
}

/// Pairs times features of `cdist(x1 [..., P, M], x2 [..., R, M])`: `batch x P x R x M`.
fn pair_features(args: &Args, x1: usize, x2: usize) -> Result<u64, FormulaError> {
    let (a, b) = (require_tensor(args, x1)?, require_tensor(args, x2)?);
    let rank = a.dims.len();
    if rank < 2 || b.dims.len() != rank {
        return Err(FormulaError::UnexpectedShape);
    }
    let batch = super::product(&a.dims[..rank - 2])?;
    mul_all(&[batch, dim(&a, rank - 2)?, dim(&b, rank - 2)?, dim(&a, rank - 1)?])
}

/// `_cdist_forward(x1, x2, p, compute_mode)`: per pair and feature a difference, its power (or
/// absolute value) and an accumulation, 3 FLOPs (the per-pair root is not counted). The
/// matrix-product form for large Euclidean inputs is a composite: its `mm` counts instead.
pub fn cdist(args: &Args) -> Result<u64, FormulaError> {
    mul_all(&[3, pair_features(args, 0, 1)?])
}

/// `_cdist_backward(grad, x1, x2, p, cdist)`: per pair and feature a difference, its
/// derivative, the gradient's scale and an accumulation, 4 FLOPs.
pub fn cdist_backward(args: &Args) -> Result<u64, FormulaError> {
    mul_all(&[4, pair_features(args, 1, 2)?])
}

/// `addr(self, vec1 [n], vec2 [m], beta, alpha)`: the outer product, 1 multiply per element (as
/// `torch.outer`, a `mul`), and its [`accumulate`] into `self`: with `beta = alpha = 1`, a
/// multiply-accumulate per element, `2 n m`; with `beta = 0`, `n m`.
pub fn addr(args: &Args) -> Result<u64, FormulaError> {
    let numel = |i: usize| require_tensor(args, i).and_then(|t| t.numel().ok_or(FormulaError::Overflow));
    let outputs = mul(numel(1)?, numel(2)?)?;
    add(outputs, accumulate(args, 0, 3, 4, outputs)?)
}

/// `_foreach_mm(self [[m, k]...], mat2 [[k, n]...])`: one `mm` per pair.
pub fn foreach_mm(args: &Args) -> Result<u64, FormulaError> {
    let (left, right) = (
        args.list_tensors(0).ok_or(FormulaError::MissingArgument(0))?,
        args.list_tensors(1).ok_or(FormulaError::MissingArgument(1))?,
    );
    let mut total = 0u64;
    for (a, b) in left.zip(right) {
        let (&[m, k], &[k2, n]) = (a.dims, b.dims) else { return Err(FormulaError::UnexpectedShape) };
        if k != k2 {
            return Err(FormulaError::UnexpectedShape);
        }
        total = super::add(total, mul_all(&[2, super::product(&[m, k, n])?])?)?;
    }
    Ok(total)
}

/// `_compute_linear_combination(input [m, ...], coefficients [m, n])`: output `j` is
/// `sum_i c[i, j] * input[i]`, `2 * numel(input) * n`.
pub fn linear_combination(args: &Args) -> Result<u64, FormulaError> {
    let input = require_tensor(args, 0)?.numel().ok_or(FormulaError::Overflow)?;
    mul_all(&[2, input, dim(&require_tensor(args, 1)?, 1)?])
}

/// `2 * numel(activations at a) * n`: a weight-only-quantized product whose weight is unpacked
/// in the kernel (FLOPs: the activations are floating point).
fn rows_times(args: &Args, activations: usize, n: u64) -> Result<u64, FormulaError> {
    mul_all(&[2, require_tensor(args, activations)?.numel().ok_or(FormulaError::Overflow)?, n])
}

/// `_weight_int8pack_mm(self [M, K], mat2 [N, K] int8, scales [N])`: `2 M N K`.
pub fn weight_int8pack_mm(args: &Args) -> Result<u64, FormulaError> {
    rows_times(args, 0, dim(&require_tensor(args, 1)?, 0)?)
}

/// `_weight_int4pack_mm(self [M, K], mat2 (packed), group_size, scales_and_zeros [K/g, N, 2])`
/// and `_weight_int4pack_mm_for_cpu`: `2 M N K`, `N` read from the scales.
pub fn weight_int4pack_mm(args: &Args) -> Result<u64, FormulaError> {
    rows_times(args, 0, dim(&require_tensor(args, 3)?, 1)?)
}

/// `_dyn_quant_matmul_4bit(input [..., K], packed, block_size, in_features, out_features)`.
pub fn dyn_quant_matmul_4bit(args: &Args) -> Result<u64, FormulaError> {
    let n = u64::try_from(args.int(4).ok_or(FormulaError::MissingArgument(4))?)
        .map_err(|_| FormulaError::UnexpectedShape)?;
    rows_times(args, 0, n)
}

/// `_mixed_dtypes_linear(input [..., K], weight, scale [N], bias, activation)`: one scale per
/// output feature; a bias adds 1 per output element (the bias convention).
pub fn mixed_dtypes_linear(args: &Args) -> Result<u64, FormulaError> {
    let n = require_tensor(args, 2)?.numel().ok_or(FormulaError::Overflow)?;
    add(rows_times(args, 0, n)?, bias_add(args, 3, mul(rows(args, 0)?, n)?))
}

/// Rows of the activations at `index` (`[..., K]`): numel / K.
fn rows(args: &Args, index: usize) -> Result<u64, FormulaError> {
    let input = require_tensor(args, index)?;
    let k = input
        .dims
        .last()
        .and_then(|&k| u64::try_from(k).ok())
        .filter(|&k| k > 0)
        .ok_or(FormulaError::UnexpectedShape)?;
    Ok(input.numel().ok_or(FormulaError::Overflow)? / k)
}

/// The bias convention for an optional bias argument at `index`: 1 FLOP per output element
/// when a bias is given (the separate `add`'s cost), nothing without one.
pub(super) fn bias_add(args: &Args, index: usize, outputs: u64) -> u64 {
    if args.has_tensor(index) {
        outputs
    } else {
        0
    }
}

/// `_scaled_mm(self [m, k], mat2 [k, n], scale_a, scale_b, bias, ...)`: the fp8 product; its
/// optional bias adds 1 per output element (the scales are not counted).
pub fn scaled_mm(args: &Args) -> Result<u64, FormulaError> {
    add(mm(args)?, bias_add(args, 4, matrix_outputs(args, 0, 1)?))
}

/// `_scaled_mm_v2(self, mat2, scale_a, recipe_a, swizzle_a, scale_b, recipe_b, swizzle_b, bias,
/// ...)`: as `_scaled_mm`, its bias at 8.
pub fn scaled_mm_v2(args: &Args) -> Result<u64, FormulaError> {
    add(mm(args)?, bias_add(args, 8, matrix_outputs(args, 0, 1)?))
}

/// 2:4 semi-structured sparse products count the kept values only (as the sparse family: stored
/// values): `2 * numel(compressed [m, k/2]) * n`. `_sparse_semi_structured_mm(mat1, mat1_meta,
/// mat2 [k, n])`.
pub fn semi_structured_mm(args: &Args) -> Result<u64, FormulaError> {
    mul_all(&[2, require_tensor(args, 0)?.numel().ok_or(FormulaError::Overflow)?, dim(&require_tensor(args, 2)?, 1)?])
}

/// `_sparse_semi_structured_addmm(input, mat1 [m, k/2], mat1_meta, mat2 [k, n], alpha, beta,
/// ...)`: the product and the input's [`accumulate`] into the m*n outputs, as addmm (note
/// `alpha` before `beta` here).
pub fn semi_structured_addmm(args: &Args) -> Result<u64, FormulaError> {
    let (mat1, n) = (require_tensor(args, 1)?, dim(&require_tensor(args, 3)?, 1)?);
    let product = mul_all(&[2, mat1.numel().ok_or(FormulaError::Overflow)?, n])?;
    add(product, accumulate(args, 0, 5, 4, mul(dim(&mat1, 0)?, n)?)?)
}

/// `_sparse_semi_structured_linear(input [..., K], weight [N, K/2], meta, bias, ...)`: a bias
/// adds 1 per output element.
pub fn semi_structured_linear(args: &Args) -> Result<u64, FormulaError> {
    let (rows, weight) = (rows(args, 0)?, require_tensor(args, 1)?);
    let product = mul_all(&[2, rows, weight.numel().ok_or(FormulaError::Overflow)?])?;
    add(product, bias_add(args, 3, mul(rows, dim(&weight, 0)?)?))
}

/// Pairs times features of `pdist(x [N, M])`: `N (N - 1) / 2 * M`.
fn pdist_pairs(args: &Args, x: usize) -> Result<u64, FormulaError> {
    let x = require_tensor(args, x)?;
    if x.dims.len() != 2 {
        return Err(FormulaError::UnexpectedShape);
    }
    let (n, m) = (dim(&x, 0)?, dim(&x, 1)?);
    mul(mul(n, n.saturating_sub(1))? / 2, m)
}

/// `_pdist_forward(self, p)`: `cdist`'s 3 FLOPs per pair and feature.
pub fn pdist(args: &Args) -> Result<u64, FormulaError> {
    mul(pdist_pairs(args, 0)?, 3)
}

/// `_pdist_backward(grad, self, p, pdist)`: `cdist`'s backward, 4 per pair and feature.
pub fn pdist_backward(args: &Args) -> Result<u64, FormulaError> {
    mul(pdist_pairs(args, 1)?, 4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::build::*;
    use crate::formulas::testing::with_args;

    #[test]
    fn mm_counts_two_per_multiply_accumulate() {
        // [3,4] @ [4,5]: 3*5 outputs, 4 MACs each, 2 FLOPs per MAC = 120.
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[3, 4]);
                    tensor(s, &[4, 5]);
                },
                mm
            ),
            Ok(120)
        );
    }

    /// `addmm(bias [5], [2,3], [3,5], beta, alpha)`.
    fn addmm_with(beta: f64, alpha: f64) -> Result<u64, FormulaError> {
        with_args(
            |s| {
                tensor(s, &[5]);
                tensor(s, &[2, 3]);
                tensor(s, &[3, 5]);
                double(s, beta);
                double(s, alpha);
            },
            addmm,
        )
    }

    #[test]
    fn addmm_counts_the_bias_as_the_separate_add() {
        // bias [5], [2,3] @ [3,5]: the product 2*2*3*5 = 60 and the add into 2*5 = 10 outputs
        // (mm + add: 60 + 10); PyTorch's counter says 60.
        assert_eq!(addmm_with(1.0, 1.0), Ok(70));
        // beta = 0: self is ignored, no add: the product alone.
        assert_eq!(addmm_with(0.0, 1.0), Ok(60));
        // beta = 0.5: its multiply over the bias's 5 elements (the separate `mul`'s 5).
        assert_eq!(addmm_with(0.5, 1.0), Ok(75));
        // alpha = 2: its multiply over the 10 outputs; both: 60 + 10 + 5 + 10.
        assert_eq!(addmm_with(1.0, 2.0), Ok(80));
        assert_eq!(addmm_with(0.5, 2.0), Ok(85));
        assert_eq!(addmm_with(0.0, 2.0), Ok(70));
        // Integer Scalars read as numbers: beta = 1, alpha = 1 as ints.
        let ints = with_args(
            |s| {
                tensor(s, &[2, 5]);
                tensor(s, &[2, 3]);
                tensor(s, &[3, 5]);
                int(s, 1);
                int(s, 1);
            },
            addmm,
        );
        assert_eq!(ints, Ok(70));
    }

    #[test]
    fn bmm_and_baddbmm() {
        // 7 x ([2,3] @ [3,4]) = 7 * 2*3*4*2 = 336; baddbmm adds its input to the 7*2*4 = 56
        // outputs (392), addbmm to the one [2, 4] sum (8: 344).
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[7, 2, 3]);
                    tensor(s, &[7, 3, 4]);
                },
                bmm
            ),
            Ok(336)
        );
        let f = with_args(
            |s| {
                tensor(s, &[7, 2, 4]);
                tensor(s, &[7, 2, 3]);
                tensor(s, &[7, 3, 4]);
            },
            baddbmm,
        );
        assert_eq!(f, Ok(392));
        let f = with_args(
            |s| {
                tensor(s, &[2, 4]);
                tensor(s, &[7, 2, 3]);
                tensor(s, &[7, 3, 4]);
            },
            addbmm,
        );
        assert_eq!(f, Ok(344));
        // beta = 0 drops the add.
        let f = with_args(
            |s| {
                tensor(s, &[2, 4]);
                tensor(s, &[7, 2, 3]);
                tensor(s, &[7, 3, 4]);
                int(s, 0);
                int(s, 1);
            },
            addbmm,
        );
        assert_eq!(f, Ok(336));
    }

    #[test]
    fn vector_products() {
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[6, 5]);
                    tensor(s, &[5]);
                },
                mv
            ),
            Ok(60)
        );
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[6]);
                    tensor(s, &[6, 5]);
                    tensor(s, &[5]);
                },
                addmv
            ),
            Ok(66)
        );
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[9]);
                    tensor(s, &[9]);
                },
                dot
            ),
            Ok(18)
        );
    }

    #[test]
    fn wrong_ranks_and_missing_tensors_are_errors() {
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[3]);
                    tensor(s, &[3, 5]);
                },
                mm
            ),
            Err(FormulaError::UnexpectedShape)
        );
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[3, 4]);
                    none(s);
                },
                mm
            ),
            Err(FormulaError::MissingTensor(1))
        );
    }

    #[test]
    fn overflow_is_reported_not_wrapped() {
        let f = with_args(
            |s| {
                tensor(s, &[1 << 30, 1 << 30]);
                tensor(s, &[1 << 30, 1 << 30]);
            },
            mm,
        );
        assert_eq!(f, Err(FormulaError::Overflow));
    }

    #[test]
    fn pairwise_distances() {
        // x1 [5, 4], x2 [6, 4]: 30 pairs x 4 features x 3 = 360; backward x 4 = 480.
        let forward = with_args(
            |s| {
                tensor(s, &[5, 4]);
                tensor(s, &[6, 4]);
                double(s, 2.0);
            },
            cdist,
        );
        assert_eq!(forward, Ok(360));
        let backward = with_args(
            |s| {
                tensor(s, &[5, 6]);
                tensor(s, &[5, 4]);
                tensor(s, &[6, 4]);
            },
            cdist_backward,
        );
        assert_eq!(backward, Ok(480));
        let unmatched = with_args(
            |s| {
                tensor(s, &[2, 5, 4]);
                tensor(s, &[6, 4]);
            },
            cdist,
        );
        assert_eq!(unmatched, Err(FormulaError::UnexpectedShape));
    }

    #[test]
    fn grouped_products() {
        let grouped = |a: &[i64], b: &[i64]| {
            with_args(
                |s| {
                    tensor(s, a);
                    tensor(s, b);
                },
                grouped_mm,
            )
        };
        // 6 tokens routed to 3 experts of [8, 4]: 2 x 6 x 8 x 4 = 384.
        assert_eq!(grouped(&[6, 8], &[3, 8, 4]), Ok(384));
        // Batched [3, 5, 8] x [3, 8, 4]: 2 x 15 x 8 x 4 = 960.
        assert_eq!(grouped(&[3, 5, 8], &[3, 8, 4]), Ok(960));
        // Groups along K ([5, 24] x [24, 4]) and along N ([3, 5, 8] x [8, 12]).
        assert_eq!(grouped(&[5, 24], &[24, 4]), Ok(960));
        assert_eq!(grouped(&[3, 5, 8], &[8, 12]), Ok(960));
        assert_eq!(grouped(&[6, 8], &[3, 7, 4]), Err(FormulaError::UnexpectedShape));
    }

    #[test]
    fn fused_addmm_activation() {
        // [12, 32] @ [32, 64] + bias, then ReLU: 2 x 12 x 32 x 64 + 12 x 64 (the bias add) +
        // 12 x 64 (the activation) = 49,152 + 768 + 768 = 50,688.
        let f = with_args(
            |s| {
                tensor(s, &[64]);
                tensor(s, &[12, 32]);
                tensor(s, &[32, 64]);
            },
            addmm_activation,
        );
        assert_eq!(f, Ok(50_688));
    }

    #[test]
    fn outer_products_lists_and_combinations() {
        // addr: 12 multiplies and 12 adds (outer + add); beta = 0: the outer product alone.
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[3, 4]);
                    tensor(s, &[3]);
                    tensor(s, &[4]);
                    int(s, 0);
                    int(s, 1);
                },
                addr
            ),
            Ok(12)
        );
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[3, 4]);
                    tensor(s, &[3]);
                    tensor(s, &[4]);
                },
                addr
            ),
            Ok(24)
        );
        // [2,3]@[3,4] and [1,5]@[5,2]: 2 x 24 + 2 x 10.
        let f = with_args(
            |s| {
                tensors(s, &[&[2, 3], &[1, 5]]);
                tensors(s, &[&[3, 4], &[5, 2]]);
            },
            foreach_mm,
        );
        assert_eq!(f, Ok(68));
        // input [3, 2, 2] (m = 3), coefficients [3, 5]: 2 x 12 x 5.
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[3, 2, 2]);
                    tensor(s, &[3, 5]);
                },
                linear_combination
            ),
            Ok(120)
        );
    }

    #[test]
    fn weight_only_quantized_and_semi_structured_products() {
        // [4, 8] activations, 6 outputs: 2 x 4 x 8 x 6 = 384.
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[4, 8]);
                    tensor(s, &[6, 8]);
                    tensor(s, &[6]);
                },
                weight_int8pack_mm
            ),
            Ok(384)
        );
        let int4 = with_args(
            |s| {
                tensor(s, &[4, 8]);
                tensor(s, &[1, 1, 32, 4]);
                int(s, 32);
                tensor(s, &[1, 6, 2]);
            },
            weight_int4pack_mm,
        );
        assert_eq!(int4, Ok(384));
        let dynamic = with_args(
            |s| {
                tensor(s, &[4, 8]);
                tensor(s, &[100]);
                int(s, 32);
                int(s, 8);
                int(s, 6);
            },
            dyn_quant_matmul_4bit,
        );
        assert_eq!(dynamic, Ok(384));
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[4, 8]);
                    tensor(s, &[8, 6]);
                    tensor(s, &[6]);
                },
                mixed_dtypes_linear
            ),
            Ok(384)
        );
        // 2:4 sparse [6, 8] kept as [6, 4], times [8, 3]: 2 x 24 x 3 = 144 (the dense 288 halved).
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[6, 4]);
                    tensor(s, &[6, 1]);
                    tensor(s, &[8, 3]);
                },
                semi_structured_mm
            ),
            Ok(144)
        );
        // The added input [6, 3]: 18 adds (alpha 1, beta 1); beta 2: + 18 multiplies.
        let addmm = |beta: i64| {
            with_args(
                |s| {
                    tensor(s, &[6, 3]);
                    tensor(s, &[6, 4]);
                    tensor(s, &[6, 1]);
                    tensor(s, &[8, 3]);
                    int(s, 1);
                    int(s, beta);
                },
                semi_structured_addmm,
            )
        };
        assert_eq!(addmm(1), Ok(162));
        assert_eq!(addmm(2), Ok(180));
        // input [5, 8], weight [6, 8] kept as [6, 4]: 2 x 5 x 24 = 240; a bias [6]: + 30.
        let linear = |bias: bool| {
            with_args(
                |s| {
                    tensor(s, &[5, 8]);
                    tensor(s, &[6, 4]);
                    tensor(s, &[6, 1]);
                    if bias {
                        tensor(s, &[6]);
                    } else {
                        none(s);
                    }
                },
                semi_structured_linear,
            )
        };
        assert_eq!(linear(false), Ok(240));
        assert_eq!(linear(true), Ok(270));
        // _mixed_dtypes_linear [4, 8] x 6 outputs with a bias: 384 + 24.
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[4, 8]);
                    tensor(s, &[8, 6]);
                    tensor(s, &[6]);
                    tensor(s, &[6]);
                },
                mixed_dtypes_linear
            ),
            Ok(408)
        );
        // _scaled_mm [4, 8] @ [8, 6] with a bias: 384 + 24; without one, 384.
        let scaled = |bias: bool| {
            with_args(
                |s| {
                    tensor(s, &[4, 8]);
                    tensor(s, &[8, 6]);
                    tensor(s, &[]);
                    tensor(s, &[]);
                    if bias {
                        tensor(s, &[6]);
                    } else {
                        none(s);
                    }
                },
                scaled_mm,
            )
        };
        assert_eq!(scaled(false), Ok(384));
        assert_eq!(scaled(true), Ok(408));
    }

    #[test]
    fn pdist_counts_each_pair_once() {
        // 5 points of 6 features: 10 pairs x 6 x 3 = 180; backward 10 x 6 x 4 = 240.
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[5, 6]);
                    double(s, 2.0);
                },
                pdist
            ),
            Ok(180)
        );
        let backward = with_args(
            |s| {
                tensor(s, &[10]);
                tensor(s, &[5, 6]);
                double(s, 2.0);
                tensor(s, &[10]);
            },
            pdist_backward,
        );
        assert_eq!(backward, Ok(240));
    }
}
