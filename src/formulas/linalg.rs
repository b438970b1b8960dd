//! Dense linear algebra (`torch.linalg`). Convention: the leading-order FLOP counts of the
//! standard LAPACK algorithms (LAPACK Working Note 41; Golub & Van Loan, Matrix Computations,
//! 4th ed.), for each matrix of a batch, rounded to the nearest integer:
//!
//! | operator | algorithm | FLOPs for `A` n x n (`B` n x k) |
//! | --- | --- | --- |
//! | `linalg_inv_ex` | LU, then the inverse from it | `2 n^3` |
//! | `_linalg_solve_ex` | LU, then two triangular solves | `2/3 n^3 + 2 n^2 k` |
//! | `_linalg_det`, `_linalg_slogdet` | LU | `2/3 n^3` |
//! | `linalg_cholesky_ex` | Cholesky | `1/3 n^3` |
//! | `_cholesky_solve_helper` | two triangular solves | `2 n^2 k` |
//! | `linalg_solve_triangular` | one triangular solve | `n^2 k` |
//! | `_linalg_eigh` | symmetric tridiagonal QR | `4/3 n^3` (values), `9 n^3` (with vectors) |
//! | `linalg_eig` | Hessenberg QR | `25 n^3` (values and vectors) |
//! | `_linalg_svd` (`A` m x n, `m >= n`) | R-SVD | `4 m n^2 - 4/3 n^3` (values), `14 m n^2 + 8 n^3` (thin U, V), `4 m^2 n + 8 m n^2 + 9 n^3` (full U) |
//!
//! Complex matrices count 4x (a complex multiply-add is 8 real FLOPs, a real one 2), as the
//! matrix-product family. Iterative algorithms whose work depends on the data (eigenvalues, SVD)
//! are counted by these standard estimates, stated as such.

use super::{require_tensor, FormulaError};
use crate::args::{Arg, Args};

/// `(batch, rows, columns)` of the matrix (or batch of matrices) at `index`.
fn matrices(args: &Args, index: usize) -> Result<(f64, f64, f64), FormulaError> {
    let t = require_tensor(args, index)?;
    let rank = t.dims.len();
    if rank < 2 {
        return Err(FormulaError::UnexpectedShape);
    }
    let batch = super::product(&t.dims[..rank - 2])? as f64;
    Ok((batch, t.dims[rank - 2] as f64, t.dims[rank - 1] as f64))
}

/// Right-hand sides of `B` at `index` for a system of order `n`: a vector is one, a matrix its
/// columns (its rows when solving from the right).
fn rhs(args: &Args, index: usize, left: bool) -> Result<f64, FormulaError> {
    let t = require_tensor(args, index)?;
    match t.dims.len() {
        0 => Err(FormulaError::UnexpectedShape),
        1 => Ok(1.0),
        rank => Ok(if left { t.dims[rank - 1] } else { t.dims[rank - 2] } as f64),
    }
}

fn rounded(flops: f64) -> Result<u64, FormulaError> {
    if !(0.0..1.8e19).contains(&flops) {
        return Err(FormulaError::Overflow);
    }
    Ok(flops.round() as u64)
}

fn square(args: &Args, index: usize) -> Result<(f64, f64), FormulaError> {
    let (batch, m, n) = matrices(args, index)?;
    if m != n {
        return Err(FormulaError::UnexpectedShape);
    }
    Ok((batch, n))
}

/// `linalg_inv_ex(A, check_errors)`.
pub fn inv(args: &Args) -> Result<u64, FormulaError> {
    let (batch, n) = square(args, 0)?;
    rounded(batch * 2.0 * n.powi(3))
}

/// `_linalg_solve_ex(A, B, left, check_errors)`.
pub fn solve(args: &Args) -> Result<u64, FormulaError> {
    let (batch, n) = square(args, 0)?;
    let k = rhs(args, 1, args.bool(2).unwrap_or(true))?;
    rounded(batch * (2.0 / 3.0 * n.powi(3) + 2.0 * n * n * k))
}

/// `_linalg_det(A)`, `_linalg_slogdet(A)`.
pub fn det(args: &Args) -> Result<u64, FormulaError> {
    let (batch, n) = square(args, 0)?;
    rounded(batch * 2.0 / 3.0 * n.powi(3))
}

/// `linalg_cholesky_ex(A, upper, check_errors)`.
pub fn cholesky(args: &Args) -> Result<u64, FormulaError> {
    let (batch, n) = square(args, 0)?;
    rounded(batch * n.powi(3) / 3.0)
}

/// `_cholesky_solve_helper(B, A, upper)`.
pub fn cholesky_solve(args: &Args) -> Result<u64, FormulaError> {
    let (batch, n) = square(args, 1)?;
    rounded(batch * 2.0 * n * n * rhs(args, 0, true)?)
}

/// `linalg_solve_triangular(A, B, upper, left, unitriangular)`.
pub fn solve_triangular(args: &Args) -> Result<u64, FormulaError> {
    let (batch, n) = square(args, 0)?;
    rounded(batch * n * n * rhs(args, 1, args.bool(3).unwrap_or(true))?)
}

/// `_linalg_eigh(A, UPLO, compute_v)`.
pub fn eigh(args: &Args) -> Result<u64, FormulaError> {
    let (batch, n) = square(args, 0)?;
    let vectors = args.bool(2).unwrap_or(true);
    rounded(batch * if vectors { 9.0 } else { 4.0 / 3.0 } * n.powi(3))
}

/// `linalg_eig(A)`: values and vectors.
pub fn eig(args: &Args) -> Result<u64, FormulaError> {
    let (batch, n) = square(args, 0)?;
    rounded(batch * 25.0 * n.powi(3))
}

/// `_linalg_svd(A, full_matrices, compute_uv, driver)`.
pub fn svd(args: &Args) -> Result<u64, FormulaError> {
    let (batch, rows, cols) = matrices(args, 0)?;
    let (m, n) = if rows >= cols { (rows, cols) } else { (cols, rows) };
    let full = args.bool(1).unwrap_or(true);
    let vectors = !matches!(args.get(2), Some(Arg::Bool(false)));
    let per = match (vectors, full) {
        (false, _) => 4.0 * m * n * n - 4.0 / 3.0 * n.powi(3),
        (true, false) => 14.0 * m * n * n + 8.0 * n.powi(3),
        (true, true) => 4.0 * m * m * n + 8.0 * m * n * n + 9.0 * n.powi(3),
    };
    rounded(batch * per)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::build::*;
    use crate::formulas::testing::with_args;

    fn one(shape: &[i64], f: super::super::FlopFn) -> Result<u64, FormulaError> {
        with_args(|s| tensor(s, shape), f)
    }

    #[test]
    fn factorizations_of_a_4x4() {
        assert_eq!(one(&[4, 4], inv), Ok(128));
        assert_eq!(one(&[4, 4], det), Ok(43)); // 2/3 x 64 = 42.67
        assert_eq!(one(&[4, 4], cholesky), Ok(21)); // 64 / 3 = 21.33
        assert_eq!(one(&[3, 4, 4], inv), Ok(384), "batched: 3 matrices");
        assert_eq!(one(&[4, 5], inv), Err(FormulaError::UnexpectedShape));
        assert_eq!(one(&[4, 4], eig), Ok(1600));
        let eigh_of = |vectors: bool| {
            with_args(
                |s| {
                    tensor(s, &[4, 4]);
                    s.push(crate::args::TAG_OTHER);
                    boolean(s, vectors);
                },
                eigh,
            )
        };
        assert_eq!(eigh_of(true), Ok(576));
        assert_eq!(eigh_of(false), Ok(85)); // 4/3 x 64 = 85.33
    }

    #[test]
    fn solves() {
        // solve(A 4x4, B 4x2): 42.67 + 2 x 16 x 2 = 106.67 -> 107; B a vector: 42.67 + 32 -> 75.
        let solve_of = |b: &[i64]| {
            with_args(
                |s| {
                    tensor(s, &[4, 4]);
                    tensor(s, b);
                    boolean(s, true);
                },
                solve,
            )
        };
        assert_eq!(solve_of(&[4, 2]), Ok(107));
        assert_eq!(solve_of(&[4]), Ok(75));
        let triangular = with_args(
            |s| {
                tensor(s, &[4, 4]);
                tensor(s, &[4, 2]);
                boolean(s, true);
                boolean(s, true);
            },
            solve_triangular,
        );
        assert_eq!(triangular, Ok(32));
        let chol_solve = with_args(
            |s| {
                tensor(s, &[4, 2]);
                tensor(s, &[4, 4]);
            },
            cholesky_solve,
        );
        assert_eq!(chol_solve, Ok(64));
    }

    #[test]
    fn singular_value_decompositions() {
        // A 6x4 (m = 6, n = 4): values 384 - 85.33 = 298.67 -> 299; thin 1344 + 512 = 1856;
        // full 576 + 768 + 576 = 1920.
        let svd_of = |full: bool, vectors: bool| {
            with_args(
                |s| {
                    tensor(s, &[6, 4]);
                    boolean(s, full);
                    boolean(s, vectors);
                },
                svd,
            )
        };
        assert_eq!(svd_of(false, false), Ok(299));
        assert_eq!(svd_of(false, true), Ok(1856));
        assert_eq!(svd_of(true, true), Ok(1920));
    }
}
