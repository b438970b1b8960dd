//! Matrix products. Convention (PyTorch's `torch/utils/flop_counter.py`): 2 FLOPs per
//! multiply-accumulate; the added bias/input of `addmm`-style ops and `beta`/`alpha` scaling are
//! not counted.

use super::{dim, mul, mul_all, require_tensor, FormulaError};
use crate::args::Args;

/// `mm(a[m,k], b[k,n])`: 2*m*k*n.
pub fn mm(args: &Args) -> Result<u64, FormulaError> {
    matrix_product(args, 0, 1)
}

/// `addmm(bias, a[m,k], b[k,n])`: 2*m*k*n, bias not counted.
pub fn addmm(args: &Args) -> Result<u64, FormulaError> {
    matrix_product(args, 1, 2)
}

/// `bmm(a[b,m,k], b[b,k,n])`: 2*b*m*k*n.
pub fn bmm(args: &Args) -> Result<u64, FormulaError> {
    batched_product(args, 0, 1)
}

/// `baddbmm(bias, a[b,m,k], b[b,k,n])`: 2*b*m*k*n, bias not counted.
pub fn baddbmm(args: &Args) -> Result<u64, FormulaError> {
    batched_product(args, 1, 2)
}

/// `addbmm(bias, a[b,m,k], b[b,k,n])`: the batch of products summed into one matrix; the
/// reduction over the batch is the accumulate of the same multiply-accumulates: 2*b*m*k*n.
pub fn addbmm(args: &Args) -> Result<u64, FormulaError> {
    batched_product(args, 1, 2)
}

/// `mv(a[m,k], v[k])`: 2*m*k.
pub fn mv(args: &Args) -> Result<u64, FormulaError> {
    let a = require_tensor(args, 0)?;
    mul_all(&[2, dim(&a, 0)?, dim(&a, 1)?])
}

/// `addmv(bias, a[m,k], v[k])`: 2*m*k, bias not counted.
pub fn addmv(args: &Args) -> Result<u64, FormulaError> {
    let a = require_tensor(args, 1)?;
    mul_all(&[2, dim(&a, 0)?, dim(&a, 1)?])
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

/// `_addmm_activation(self, mat1, mat2, beta, alpha, use_gelu)`: `addmm` (2 FLOPs per
/// multiply-accumulate, the added `self` not counted) and its fused ReLU or GELU, 1 FLOP per
/// output element (the activation convention).
pub fn addmm_activation(args: &Args) -> Result<u64, FormulaError> {
    let (a, b) = (require_tensor(args, 1)?, require_tensor(args, 2)?);
    if a.dims.len() != 2 || b.dims.len() != 2 {
        return Err(FormulaError::UnexpectedShape);
    }
    let outputs = mul(dim(&a, 0)?, dim(&b, 1)?)?;
    super::add(addmm(args)?, outputs)
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

/// `addr(self, vec1 [n], vec2 [m], beta, alpha)`: the outer product accumulated into `self`, 2
/// FLOPs per element (a multiply-accumulate each).
pub fn addr(args: &Args) -> Result<u64, FormulaError> {
    let numel = |i: usize| require_tensor(args, i).and_then(|t| t.numel().ok_or(FormulaError::Overflow));
    mul_all(&[2, numel(1)?, numel(2)?])
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

/// `_mixed_dtypes_linear(input [..., K], weight, scale [N], ...)`: one scale per output feature.
pub fn mixed_dtypes_linear(args: &Args) -> Result<u64, FormulaError> {
    rows_times(args, 0, require_tensor(args, 2)?.numel().ok_or(FormulaError::Overflow)?)
}

/// 2:4 semi-structured sparse products count the kept values only (as the sparse family: stored
/// values): `2 * numel(compressed [m, k/2]) * n`. `_sparse_semi_structured_mm(mat1, mat1_meta,
/// mat2 [k, n])`.
pub fn semi_structured_mm(args: &Args) -> Result<u64, FormulaError> {
    mul_all(&[2, require_tensor(args, 0)?.numel().ok_or(FormulaError::Overflow)?, dim(&require_tensor(args, 2)?, 1)?])
}

/// `_sparse_semi_structured_addmm(input, mat1, mat1_meta, mat2, ...)`: the product (the added
/// input not counted, as addmm).
pub fn semi_structured_addmm(args: &Args) -> Result<u64, FormulaError> {
    mul_all(&[2, require_tensor(args, 1)?.numel().ok_or(FormulaError::Overflow)?, dim(&require_tensor(args, 3)?, 1)?])
}

/// `_sparse_semi_structured_linear(input [..., K], weight [N, K/2], meta, ...)`.
pub fn semi_structured_linear(args: &Args) -> Result<u64, FormulaError> {
    let input = require_tensor(args, 0)?;
    let k = input
        .dims
        .last()
        .and_then(|&k| u64::try_from(k).ok())
        .filter(|&k| k > 0)
        .ok_or(FormulaError::UnexpectedShape)?;
    let rows = input.numel().ok_or(FormulaError::Overflow)? / k;
    mul_all(&[2, rows, require_tensor(args, 1)?.numel().ok_or(FormulaError::Overflow)?])
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

    #[test]
    fn addmm_ignores_the_bias() {
        // bias [5], [2,3] @ [3,5]: 2*2*3*5 = 60.
        let f = with_args(
            |s| {
                tensor(s, &[5]);
                tensor(s, &[2, 3]);
                tensor(s, &[3, 5]);
                int(s, 1);
                int(s, 1);
            },
            addmm,
        );
        assert_eq!(f, Ok(60));
    }

    #[test]
    fn bmm_and_baddbmm() {
        // 7 x ([2,3] @ [3,4]) = 7 * 2*3*4*2 = 336.
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
        assert_eq!(f, Ok(336));
        let f = with_args(
            |s| {
                tensor(s, &[2, 4]);
                tensor(s, &[7, 2, 3]);
                tensor(s, &[7, 3, 4]);
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
            Ok(60)
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
        // [12, 32] @ [32, 64] + bias, then ReLU: 2 x 12 x 32 x 64 + 12 x 64 = 49,920.
        let f = with_args(
            |s| {
                tensor(s, &[64]);
                tensor(s, &[12, 32]);
                tensor(s, &[32, 64]);
            },
            addmm_activation,
        );
        assert_eq!(f, Ok(49_920));
    }

    #[test]
    fn outer_products_lists_and_combinations() {
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
        let addmm = with_args(
            |s| {
                tensor(s, &[6, 3]);
                tensor(s, &[6, 4]);
                tensor(s, &[6, 1]);
                tensor(s, &[8, 3]);
            },
            semi_structured_addmm,
        );
        assert_eq!(addmm, Ok(144));
        // input [5, 8], weight [6, 8] kept as [6, 4]: 2 x 5 x 24 = 240.
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[5, 8]);
                    tensor(s, &[6, 4]);
                    tensor(s, &[6, 1]);
                },
                semi_structured_linear
            ),
            Ok(240)
        );
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
