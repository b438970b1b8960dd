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
}
