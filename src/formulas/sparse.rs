//! Matrix products with a sparse operand (COO, CSR, CSC, BSR, BSC): the kernel multiplies each
//! stored value of the sparse operand with a row (or column) of the dense one, so the work is
//! 2 FLOPs per stored value per element of the dense operand's other dimension. Stored values
//! include the explicit zeros of stored blocks (BSR/BSC), which the kernel multiplies too.
//! A product of two sparse operands depends on how their non-zeros meet: not priced.
//!
//! `add`/`add_`/`sub`/`sub_` of a dense and a sparse operand (an `nn.Embedding(sparse=True)`
//! gradient applied by SGD, `param.add_(grad, alpha=-lr)`): the kernel adds each stored value
//! into the dense tensor, 1 FLOP per stored value (the dense pointwise convention, per element
//! actually added). Two sparse operands merge where their indices meet (data-dependent): not
//! priced.

use super::{matmul, FormulaError};
use crate::args::{Arg, Args, SparseMeta, TensorMeta};

/// `mm(a, b)` with a sparse `a` or `b`.
pub fn mm(args: &Args) -> Result<u64, FormulaError> {
    product(args, 0, 1, matmul::mm)
}

/// `addmm(bias, a, b, beta, alpha)` with a sparse operand: the product, and the bias's
/// accumulate into the dense `[m, n]` output as dense `addmm` counts it (`matmul::accumulate`).
/// With dense operands (the bias sparse), dense `addmm`.
pub fn addmm(args: &Args) -> Result<u64, FormulaError> {
    if !is_sparse(args, 1) && !is_sparse(args, 2) {
        return matmul::addmm(args);
    }
    let products = product(args, 1, 2, matmul::addmm)?;
    let (a, b) = (dims(args, 1)?, dims(args, 2)?);
    let outputs = super::mul(first(a)?, last(b)?)?;
    super::add(products, matmul::accumulate(args, 0, 3, 4, outputs)?)
}

/// `sspaddmm(self (sparse), mat1 (sparse), mat2, beta, alpha)`: a sparse result that holds
/// `self`'s entries beside the products' (PyTorch does not coalesce it): the products (2 per
/// stored value of `mat1` per column of `mat2`), 1 add per stored value of `self` (none when
/// `beta` is 0), `beta`'s multiply over those values and `alpha`'s over the products' values.
pub fn sspaddmm(args: &Args) -> Result<u64, FormulaError> {
    let products = product(args, 1, 2, matmul::addmm)?;
    let (beta, alpha) = (matmul::scale(args, 3), matmul::scale(args, 4));
    let added = if beta == 0.0 { 0 } else { matmul::added_elements(args, 0)? };
    let beta_multiply = if beta == 0.0 || beta == 1.0 { 0 } else { added };
    let alpha_multiply = if alpha == 1.0 { 0 } else { products / 2 };
    super::add(super::add(products, added)?, super::add(beta_multiply, alpha_multiply)?)
}

fn is_sparse(args: &Args, index: usize) -> bool {
    matches!(args.get(index), Some(Arg::Sparse(_)))
}

fn dims<'a>(args: &Args<'a>, index: usize) -> Result<&'a [i64], FormulaError> {
    match args.get(index) {
        Some(Arg::Tensor(t)) => Ok(t.dims),
        Some(Arg::Sparse(s)) => Ok(s.tensor.dims),
        _ => Err(FormulaError::MissingTensor(index)),
    }
}

fn first(dims: &[i64]) -> Result<u64, FormulaError> {
    dims.first().and_then(|&d| u64::try_from(d).ok()).ok_or(FormulaError::UnexpectedShape)
}

fn last(dims: &[i64]) -> Result<u64, FormulaError> {
    dims.last().and_then(|&d| u64::try_from(d).ok()).ok_or(FormulaError::UnexpectedShape)
}

/// `bmm(a[b,m,k], b[b,k,n])` with a sparse (COO) operand: the stored values cover every batch.
pub fn bmm(args: &Args) -> Result<u64, FormulaError> {
    product(args, 0, 1, matmul::bmm)
}

/// `mv(a[m,k], v[k])` with a sparse `a`: 2 per stored value.
pub fn mv(args: &Args) -> Result<u64, FormulaError> {
    vector_product(args, 0, 1, matmul::mv)
}

/// `addmv(bias, a[m,k], v[k], beta, alpha)` with a sparse `a`: 2 per stored value, and the
/// bias's accumulate into the m outputs (as dense `addmv`).
pub fn addmv(args: &Args) -> Result<u64, FormulaError> {
    if !is_sparse(args, 1) && !is_sparse(args, 2) {
        return matmul::addmv(args);
    }
    let products = vector_product(args, 1, 2, matmul::addmv)?;
    super::add(products, matmul::accumulate(args, 0, 3, 4, first(dims(args, 1)?)?)?)
}

/// `add(self, other, alpha)` (and `add_`, `sub`, `sub_`) with one sparse operand: 1 per stored value.
pub fn add(args: &Args) -> Result<u64, FormulaError> {
    match (args.get(0), args.get(1)) {
        (Some(Arg::Tensor(_)), Some(Arg::Sparse(s))) | (Some(Arg::Sparse(s)), Some(Arg::Tensor(_))) => stored(&s),
        (Some(Arg::Sparse(s)), _) | (_, Some(Arg::Sparse(s))) => Err(FormulaError::SparseLayout(s.layout)),
        _ => Err(FormulaError::MissingTensor(1)),
    }
}

fn stored(s: &SparseMeta) -> Result<u64, FormulaError> {
    u64::try_from(s.stored).map_err(|_| FormulaError::UnexpectedShape)
}

fn last_dim(t: &TensorMeta, from_end: usize) -> Result<u64, FormulaError> {
    let d = t.dims.len().checked_sub(from_end).and_then(|i| t.dims.get(i)).ok_or(FormulaError::UnexpectedShape)?;
    u64::try_from(*d).map_err(|_| FormulaError::UnexpectedShape)
}

fn times_two(a: u64, b: u64) -> Result<u64, FormulaError> {
    a.checked_mul(b).and_then(|v| v.checked_mul(2)).ok_or(FormulaError::Overflow)
}

/// `a @ b` at positions `a`, `b`: sparse @ dense is 2 * stored * n, dense @ sparse is
/// 2 * m * stored; `dense` prices a call whose sparse tensor is elsewhere (the bias).
fn product(args: &Args, a: usize, b: usize, dense: super::FlopFn) -> Result<u64, FormulaError> {
    match (args.get(a), args.get(b)) {
        (Some(Arg::Sparse(s)), Some(Arg::Tensor(d))) => times_two(stored(&s)?, last_dim(&d, 1)?),
        (Some(Arg::Tensor(d)), Some(Arg::Sparse(s))) => times_two(last_dim(&d, 2)?, stored(&s)?),
        (Some(Arg::Sparse(s)), Some(Arg::Sparse(_))) => Err(FormulaError::SparseLayout(s.layout)),
        (Some(Arg::Tensor(_)), Some(Arg::Tensor(_))) => dense(args),
        _ => Err(FormulaError::MissingTensor(a)),
    }
}

fn vector_product(args: &Args, a: usize, v: usize, dense: super::FlopFn) -> Result<u64, FormulaError> {
    match (args.get(a), args.get(v)) {
        (Some(Arg::Sparse(s)), Some(Arg::Tensor(_))) => times_two(stored(&s)?, 1),
        (Some(Arg::Tensor(_)), Some(Arg::Tensor(_))) => dense(args),
        (Some(Arg::Sparse(s)), _) | (_, Some(Arg::Sparse(s))) => Err(FormulaError::SparseLayout(s.layout)),
        _ => Err(FormulaError::MissingTensor(a)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::build::{double, int, sparse, tensor};
    use crate::formulas::testing::with_args;

    const COO: i64 = 1;
    const CSR: i64 = 2;
    const BSR: i64 = 5;

    #[test]
    fn sparse_times_dense_counts_stored_values() {
        // A 64x64 CSR matrix with 232 stored values @ a dense 64x8: each stored value meets the
        // 8 columns once: 2 * 232 * 8 = 3,712 (dense would be 2*64*64*8 = 65,536).
        let f = with_args(
            |s| {
                sparse(s, CSR, 232, &[64, 64]);
                tensor(s, &[64, 8]);
            },
            mm,
        );
        assert_eq!(f, Ok(3_712));
    }

    #[test]
    fn dense_times_sparse_and_addmm_bias() {
        // [8,64] @ COO[64,64] with 232 stored: each stored value meets the 8 rows: 3,712.
        let f = with_args(
            |s| {
                tensor(s, &[8, 64]);
                sparse(s, COO, 232, &[64, 64]);
            },
            mm,
        );
        assert_eq!(f, Ok(3_712));
        // addmm(bias[64,8], BSR[64,64] with 16 blocks of 4x4 = 256 stored, [64,8]): 2*256*8,
        // and the bias added to the 64 x 8 = 512 outputs: 4,608.
        let f = with_args(
            |s| {
                tensor(s, &[64, 8]);
                sparse(s, BSR, 256, &[64, 64]);
                tensor(s, &[64, 8]);
            },
            addmm,
        );
        assert_eq!(f, Ok(4_608));
        // A sparse bias with dense operands: the dense product, 2*2*3*5 = 60, and the add into
        // the 2 x 5 = 10 outputs.
        let f = with_args(
            |s| {
                sparse(s, COO, 3, &[2, 5]);
                tensor(s, &[2, 3]);
                tensor(s, &[3, 5]);
            },
            addmm,
        );
        assert_eq!(f, Ok(70));
        // sspaddmm(COO self with 4 stored, COO[64,64] with 232 stored, [64,8], beta 2, alpha 3):
        // products 2 x 232 x 8 = 3,712; self's 4 values added (4) and scaled by beta (4); the
        // products' 232 x 8 = 1,856 values scaled by alpha: 5,576.
        let f = with_args(
            |s| {
                sparse(s, COO, 4, &[64, 8]);
                sparse(s, COO, 232, &[64, 64]);
                tensor(s, &[64, 8]);
                double(s, 2.0);
                int(s, 3);
            },
            sspaddmm,
        );
        assert_eq!(f, Ok(5_576));
    }

    #[test]
    fn sparse_vector_products_and_batches() {
        let f = with_args(
            |s| {
                sparse(s, CSR, 10, &[5, 7]);
                tensor(s, &[7]);
            },
            mv,
        );
        assert_eq!(f, Ok(20));
        // addmv(bias [5], CSR[5,7] with 10 stored, [7]): 20, and the add into 5 outputs.
        let f = with_args(
            |s| {
                tensor(s, &[5]);
                sparse(s, CSR, 10, &[5, 7]);
                tensor(s, &[7]);
            },
            addmv,
        );
        assert_eq!(f, Ok(25));
        // COO[3,4,5] with 12 stored values @ [3,5,6]: 2*12*6 = 144.
        let f = with_args(
            |s| {
                sparse(s, COO, 12, &[3, 4, 5]);
                tensor(s, &[3, 5, 6]);
            },
            bmm,
        );
        assert_eq!(f, Ok(144));
    }

    #[test]
    fn dense_plus_sparse_counts_stored_values() {
        // An embedding gradient (hybrid COO [100, 16], 5 looked-up rows: 80 stored values)
        // applied by SGD, weight.add_(grad, alpha=-lr): 80 adds (dense would be 1,600).
        let f = with_args(
            |s| {
                tensor(s, &[100, 16]);
                sparse(s, 1, 80, &[100, 16]);
                double(s, -0.1);
            },
            add,
        );
        assert_eq!(f, Ok(80));
        let sparse_first = with_args(
            |s| {
                sparse(s, 1, 80, &[100, 16]);
                tensor(s, &[100, 16]);
            },
            add,
        );
        assert_eq!(sparse_first, Ok(80));
        // Two sparse operands merge where their indices meet: not priced.
        let both = with_args(
            |s| {
                sparse(s, 1, 80, &[100, 16]);
                sparse(s, 1, 32, &[100, 16]);
            },
            add,
        );
        assert_eq!(both, Err(FormulaError::SparseLayout(1)));
    }

    #[test]
    fn sparse_times_sparse_is_not_priced() {
        let f = with_args(
            |s| {
                sparse(s, CSR, 10, &[5, 5]);
                sparse(s, CSR, 10, &[5, 5]);
            },
            mm,
        );
        assert_eq!(f, Err(FormulaError::SparseLayout(CSR)));
    }
}
