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
//! | `linalg_qr` (`A` m x n, `m >= n`) | Householder QR, then Q formed | `2 m n^2 - 2/3 n^3` (`"r"`), `4 m n^2 - 4/3 n^3` (`"reduced"`), `4 m^2 n - 2 m n^2 + 2/3 n^3` (`"complete"`) |
//! | `linalg_lstsq` (`A` m x n, `m >= n`, `B` m x k) | QR (`gels`, `gelsy`), SVD (`gelsd`, `gelss`) | `2 m n^2 - 2/3 n^3 + 4 m n k - n^2 k` (QR), `4 m n^2 + 8 n^3 + 4 m n k` (SVD, an estimate) |
//!
//! Complex matrices count 4x (a complex multiply-add is 8 real FLOPs, a real one 2), as the
//! matrix-product family. Iterative algorithms whose work depends on the data (eigenvalues, SVD)
//! are counted by these standard estimates, stated as such.

use super::{require_tensor, FormulaError};
use crate::args::{choice, Arg, Args};

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

/// `cholesky_inverse(L, upper)`: the inverse from a Cholesky factor (`potri`: the triangular
/// inverse and its product with its transpose), `2/3 n^3`.
pub fn cholesky_inverse(args: &Args) -> Result<u64, FormulaError> {
    let (batch, n) = square(args, 0)?;
    rounded(batch * 2.0 / 3.0 * n.powi(3))
}

/// `triangular_solve(B, A, upper, transpose, unitriangular)`: one triangular solve, `n^2 k`.
pub fn triangular_solve(args: &Args) -> Result<u64, FormulaError> {
    let (batch, n) = square(args, 1)?;
    rounded(batch * n * n * rhs(args, 0, true)?)
}

/// Householder QR of an `m x n` matrix (`geqrf`): `2 m n^2 - 2/3 n^3` for `m >= n`, `2 n m^2 -
/// 2/3 m^3` otherwise.
fn householder_qr(m: f64, n: f64) -> f64 {
    let (long, short) = if m >= n { (m, n) } else { (n, m) };
    2.0 * long * short * short - 2.0 / 3.0 * short.powi(3)
}

/// `geqrf(A)`.
pub fn geqrf(args: &Args) -> Result<u64, FormulaError> {
    let (batch, m, n) = matrices(args, 0)?;
    rounded(batch * householder_qr(m, n))
}

/// Forming the `m x q` matrix `Q` from `k` Householder reflectors (`orgqr`, LAPACK Working Note
/// 41): `4 m q k - 2 (m + q) k^2 + 4/3 k^3`.
fn form_q(m: f64, q: f64, k: f64) -> f64 {
    4.0 * m * q * k - 2.0 * (m + q) * k * k + 4.0 / 3.0 * k.powi(3)
}

/// `linalg_householder_product(A [m, n], tau [k])`: forming `Q` from `k` reflectors
/// (`orgqr`), `4 m n k - 2 (m + n) k^2 + 4/3 k^3`.
pub fn householder_product(args: &Args) -> Result<u64, FormulaError> {
    let (batch, m, n) = matrices(args, 0)?;
    let tau = require_tensor(args, 1)?;
    let k = *tau.dims.last().ok_or(FormulaError::UnexpectedShape)? as f64;
    rounded(batch * form_q(m, n, k))
}

/// `linalg_qr(A [m, n], mode)`: what PyTorch's kernel runs (`linalg_qr_out`: `geqrf`, then
/// `orgqr` on `Q` unless `mode = "r"`), by the LAPACK Working Note 41 counts: Householder QR
/// `2 m n^2 - 2/3 n^3` (m and n swapped when `m < n`), then `Q` formed from the `k = min(m, n)`
/// reflectors, [`form_q`]: `"reduced"` `Q` is `m x k`, `"complete"` `m x m`, `"r"` none. For
/// `m >= n` that is `2 m n^2 - 2/3 n^3` more for `"reduced"` (`4 m n^2 - 4/3 n^3` in all) and
/// `4 m^2 n - 4 m n^2 + 4/3 n^3` more for `"complete"` (`4 m^2 n - 2 m n^2 + 2/3 n^3` in all;
/// Golub & Van Loan, Matrix Computations, chapter 5: the backward accumulation of a full `Q`,
/// `4 (m^2 n - m n^2 + n^3 / 3)`); for `m < n` `Q` is `m x m` either way, `4/3 m^3`.
pub fn qr(args: &Args) -> Result<u64, FormulaError> {
    let (batch, m, n) = matrices(args, 0)?;
    let k = m.min(n);
    // The schema's default is "reduced" (the dispatcher always hands the argument over).
    let q_columns = match args.get(1) {
        None | Some(Arg::Choice(choice::REDUCED)) => Some(k),
        Some(Arg::Choice(choice::COMPLETE)) => Some(m),
        Some(Arg::Choice(choice::R)) => None,
        _ => return Err(FormulaError::MissingArgument(1)),
    };
    rounded(batch * (householder_qr(m, n) + q_columns.map_or(0.0, |q| form_q(m, q, k))))
}

/// The product of the broadcast batch dimensions of two shapes' batches.
fn broadcast_batch(a: &[i64], b: &[i64]) -> Result<f64, FormulaError> {
    let rank = a.len().max(b.len());
    let at = |dims: &[i64], i: usize| if i + dims.len() >= rank { dims[i + dims.len() - rank] } else { 1 };
    let mut batch = 1.0;
    for i in 0..rank {
        let (x, y) = (at(a, i), at(b, i));
        let d = match (x, y) {
            _ if x == y => x,
            (1, _) => y,
            (_, 1) => x,
            _ => return Err(FormulaError::UnexpectedShape),
        };
        if d < 0 {
            return Err(FormulaError::UnexpectedShape);
        }
        batch *= d as f64;
    }
    Ok(batch)
}

/// `linalg_lstsq(A [*, m, n], B [*, m, k] or [*, m], rcond, driver)`, per matrix of the
/// broadcast batch, with `M >= N` the larger and smaller of `m` and `n` (an underdetermined
/// system, `m < n`, factors `A`'s transpose or reduces `A`'s trapezoid: the same leading terms):
/// - `"gels"` (LAPACK `gels`; cuSOLVER's and cuBLAS's QR on CUDA): Householder QR of `A` (LQ
///   when `m < n`) `2 M N^2 - 2/3 N^3`, its reflectors applied to `B`'s `k` columns (`ormqr`,
///   LAPACK Working Note 41: `4 M N k - 2 N^2 k`) and the triangular solve `N^2 k`:
///   `2 M N^2 - 2/3 N^3 + 4 M N k - N^2 k`. Full rank (as the driver assumes).
/// - `"gelsy"` (the CPU's default): the complete orthogonal factorization, QR with column
///   pivoting (`geqp3`, the leading terms of `geqrf`), then for `m < n` the reduction of the
///   `m x n` trapezoid to triangular (`tzrzf`: reflector `i` spans `n - m + 1` entries and is
///   applied to the `i - 1` rows above it, `4 (n - m) (i - 1)` each, `2 m^2 (n - m)` in all),
///   `Q^T B`, the triangular solve and `Z^T` on `B` (`ormrz`, `4 m k (n - m)`): what `"gels"`
///   counts, plus `2 m^2 (n - m)` when `m < n`. Counted for a matrix of full rank: a smaller
///   numerical rank, read from the data by the kernel, does less.
/// - `"gelsd"`, `"gelss"` (SVD): an estimate, as `_linalg_svd`'s, since the SVD is iterative:
///   the Golub-Reinsch count of the SVD least squares solution (Golub & Van Loan, Matrix
///   Computations, chapter 5's comparison of least squares methods: `4 M N^2 + 8 N^3`, the
///   singular values and V, as `_linalg_svd`'s table row), plus the right-hand sides:
///   the bidiagonalization's reflectors applied to `B` (`4 M N k - 2 N^2 k`) and the product with
///   `V` (`2 N^2 k`), `4 M N k`. Divide and conquer (`gelsd`) is counted as `gelss`.
/// - no driver: the device's default, `"gelsy"` on the CPU and `"gels"` elsewhere (CUDA has no
///   other). The two differ only when `m < n`: then the formula asks the shim where `A` is (a
///   `DATA` record, 1 on the CPU, 0 elsewhere).
pub fn lstsq(args: &Args) -> Result<u64, FormulaError> {
    let a = require_tensor(args, 0)?;
    let b = require_tensor(args, 1)?;
    let rank = a.dims.len();
    if rank < 2 || !(b.dims.len() == rank || b.dims.len() + 1 == rank) {
        return Err(FormulaError::UnexpectedShape);
    }
    let (m, n) = (a.dims[rank - 2] as f64, a.dims[rank - 1] as f64);
    // B's columns, and its batch dimensions (a vector per matrix has none of its own last).
    let (k, b_batch) =
        if b.dims.len() == rank { (b.dims[rank - 1] as f64, &b.dims[..rank - 2]) } else { (1.0, &b.dims[..rank - 2]) };
    let batch = broadcast_batch(&a.dims[..rank - 2], b_batch)?;
    let (long, short) = if m >= n { (m, n) } else { (n, m) };
    let gels = householder_qr(m, n) + 4.0 * long * short * k - short * short * k;
    let trapezoid = if m < n { 2.0 * m * m * (n - m) } else { 0.0 };
    let per = match args.get(3) {
        Some(Arg::Choice(choice::GELS)) => gels,
        Some(Arg::Choice(choice::GELSY)) => gels + trapezoid,
        Some(Arg::Choice(choice::GELSD | choice::GELSS)) => {
            4.0 * long * short * short + 8.0 * short.powi(3) + 4.0 * long * short * k
        }
        None | Some(Arg::None) if m >= n => gels,
        None | Some(Arg::None) => match args.data() {
            Some(1) => gels + trapezoid,
            Some(0) => gels,
            _ => return Err(FormulaError::DataDependent),
        },
        _ => return Err(FormulaError::MissingArgument(3)),
    };
    rounded(batch * per)
}

/// `ormqr(A, tau [k], C [m, n], left, transpose)`: applying `k` reflectors to `C`, `4 m n k - 2
/// n k^2` from the left, `4 m n k - 2 m k^2` from the right.
pub fn ormqr(args: &Args) -> Result<u64, FormulaError> {
    let (batch, m, n) = matrices(args, 2)?;
    let tau = require_tensor(args, 1)?;
    let k = *tau.dims.last().ok_or(FormulaError::UnexpectedShape)? as f64;
    let side = if args.bool(3).unwrap_or(true) { n } else { m };
    rounded(batch * (4.0 * m * n * k - 2.0 * side * k * k))
}

/// `linalg_lu_factor_ex(A [m, n], pivot, check_errors)`: LU with partial pivoting (`getrf`),
/// `m n^2 - n^3 / 3` for `m >= n`, `n m^2 - m^3 / 3` otherwise (`2/3 n^3` square).
pub fn lu_factor(args: &Args) -> Result<u64, FormulaError> {
    let (batch, m, n) = matrices(args, 0)?;
    let (long, short) = if m >= n { (m, n) } else { (n, m) };
    rounded(batch * (long * short * short - short.powi(3) / 3.0))
}

/// `linalg_lu_solve(LU, pivots, B, left, adjoint)`: two triangular solves, `2 n^2 k`.
pub fn lu_solve(args: &Args) -> Result<u64, FormulaError> {
    let (batch, n) = square(args, 0)?;
    rounded(batch * 2.0 * n * n * rhs(args, 2, args.bool(3).unwrap_or(true))?)
}

/// `linalg_ldl_solve(LD, pivots, B, hermitian)`: two triangular solves (and the block-diagonal
/// one, of lower order), `2 n^2 k`; always from the left.
pub fn ldl_solve(args: &Args) -> Result<u64, FormulaError> {
    let (batch, n) = square(args, 0)?;
    rounded(batch * 2.0 * n * n * rhs(args, 2, true)?)
}

/// `linalg_ldl_factor_ex(A, hermitian, check_errors)`: symmetric indefinite factorization
/// (`sytrf`), `1/3 n^3`.
pub fn ldl_factor(args: &Args) -> Result<u64, FormulaError> {
    let (batch, n) = square(args, 0)?;
    rounded(batch * n.powi(3) / 3.0)
}

/// `_linalg_eigvals(A)`: Hessenberg reduction and QR iteration, eigenvalues only, `10 n^3`.
pub fn eigvals(args: &Args) -> Result<u64, FormulaError> {
    let (batch, n) = square(args, 0)?;
    rounded(batch * 10.0 * n.powi(3))
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

    #[test]
    fn factorizations_and_solves_of_the_lapack_counts() {
        let one = |dims: &'static [i64], f: fn(&Args) -> Result<u64, FormulaError>| with_args(|s| tensor(s, dims), f);
        // n = 6: 2/3 x 216 = 144.
        assert_eq!(one(&[6, 6], cholesky_inverse), Ok(144));
        // Two 6 x 6 systems, 3 right-hand sides: 2 x 36 x 3 = 216.
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[2, 6, 3]);
                    tensor(s, &[2, 6, 6]);
                },
                triangular_solve
            ),
            Ok(216)
        );
        // QR of 8 x 4: 2 x 8 x 16 - 2/3 x 64 = 256 - 42.67 = 213; of 4 x 8 the same.
        assert_eq!(one(&[8, 4], geqrf), Ok(213));
        assert_eq!(one(&[4, 8], geqrf), Ok(213));
        // Q of 8 x 4 from 4 reflectors: 4 x 8 x 4 x 4 - 2 x 12 x 16 + 4/3 x 64 = 512 - 384 + 85.33.
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[8, 4]);
                    tensor(s, &[4]);
                },
                householder_product
            ),
            Ok(213)
        );
        // 4 reflectors applied to C 8 x 5 from the left: 4 x 8 x 5 x 4 - 2 x 5 x 16 = 480; right: 640 - 256.
        let apply = |left: bool| {
            with_args(
                move |s| {
                    tensor(s, &[8, 4]);
                    tensor(s, &[4]);
                    tensor(s, &[8, 5]);
                    boolean(s, left);
                    boolean(s, false);
                },
                ormqr,
            )
        };
        assert_eq!(apply(true), Ok(480));
        assert_eq!(apply(false), Ok(384));
        // LU of 6 x 6: 216 - 72 = 144 (2/3 n^3); of 8 x 4: 128 - 21.33.
        assert_eq!(one(&[6, 6], lu_factor), Ok(144));
        assert_eq!(one(&[8, 4], lu_factor), Ok(107));
        // LU solve, n = 6, 3 right-hand sides: 2 x 36 x 3.
        let solve = with_args(
            |s| {
                tensor(s, &[6, 6]);
                tensor(s, &[6]);
                tensor(s, &[6, 3]);
                boolean(s, true);
                boolean(s, false);
            },
            lu_solve,
        );
        assert_eq!(solve, Ok(216));
        // LDL solve: `hermitian` (false) where LU's `left` sits; always from the left.
        let ldl = with_args(
            |s| {
                tensor(s, &[6, 6]);
                tensor(s, &[6]);
                tensor(s, &[6, 3]);
                boolean(s, false);
            },
            ldl_solve,
        );
        assert_eq!(ldl, Ok(216));
        assert_eq!(one(&[6, 6], ldl_factor), Ok(72));
        assert_eq!(one(&[3, 6, 6], eigvals), Ok(3 * 2160));
    }

    #[test]
    fn qr_by_mode() {
        let qr_of = |dims: &'static [i64], mode: Option<i64>| {
            with_args(
                move |s| {
                    tensor(s, dims);
                    match mode {
                        Some(code) => choice(s, code),
                        None => other(s),
                    }
                },
                qr,
            )
        };
        // A 6 x 4 (m = 6, n = k = 4). geqrf: 2 x 6 x 16 - 2/3 x 64 = 192 - 42.67 = 149.33.
        // "r": 149.33 -> 149.
        assert_eq!(qr_of(&[6, 4], Some(choice::R)), Ok(149));
        // "reduced": + Q 6 x 4 from 4 reflectors, 4 x 6 x 4 x 4 - 2 x 10 x 16 + 4/3 x 64
        // = 384 - 320 + 85.33 = 149.33: 298.67 -> 299 (4 m n^2 - 4/3 n^3 = 384 - 85.33).
        assert_eq!(qr_of(&[6, 4], Some(choice::REDUCED)), Ok(299));
        // "complete": + Q 6 x 6 from 4 reflectors, 4 x 6 x 6 x 4 - 2 x 12 x 16 + 85.33 = 576 - 384
        // + 85.33 = 277.33: 426.67 -> 427 (4 m^2 n - 2 m n^2 + 2/3 n^3 = 576 - 192 + 42.67).
        assert_eq!(qr_of(&[6, 4], Some(choice::COMPLETE)), Ok(427));
        // A 4 x 6 (m < n, k = 4): geqrf 2 x 6 x 16 - 42.67 = 149.33; Q 4 x 4 either way,
        // 256 - 256 + 85.33: 234.67 -> 235.
        assert_eq!(qr_of(&[4, 6], Some(choice::REDUCED)), Ok(235));
        assert_eq!(qr_of(&[4, 6], Some(choice::COMPLETE)), Ok(235));
        // A batch of 3: 3 x 298.67 = 896.
        assert_eq!(qr_of(&[3, 6, 4], Some(choice::REDUCED)), Ok(896));
        // A mode the table does not know, or a least squares driver: no count guessed.
        assert_eq!(qr_of(&[6, 4], None), Err(FormulaError::MissingArgument(1)));
        assert_eq!(qr_of(&[6, 4], Some(choice::GELS)), Err(FormulaError::MissingArgument(1)));
        assert_eq!(qr_of(&[4], Some(choice::R)), Err(FormulaError::UnexpectedShape));
    }

    #[test]
    fn least_squares_by_driver() {
        let lstsq_of = |a: &'static [i64], b: &'static [i64], driver: Option<i64>, data: Option<i64>| {
            with_args(
                move |s| {
                    tensor(s, a);
                    tensor(s, b);
                    none(s);
                    match driver {
                        Some(code) => choice(s, code),
                        None => none(s),
                    }
                    if let Some(v) = data {
                        crate::args::build::data(s, v);
                    }
                },
                lstsq,
            )
        };
        // A 6 x 4, B 6 x 3 (M = 6, N = 4, k = 3). QR: 2 x 6 x 16 - 2/3 x 64 = 149.33; Q^T B
        // 4 x 6 x 4 x 3 - 2 x 16 x 3 = 288 - 96; the triangular solve 16 x 3 = 48:
        // 149.33 + 192 + 48 = 389.33 -> 389.
        assert_eq!(lstsq_of(&[6, 4], &[6, 3], Some(choice::GELS), None), Ok(389));
        // gelsy, full rank, m >= n: the same; no driver (gelsy on the CPU, gels elsewhere): the same.
        assert_eq!(lstsq_of(&[6, 4], &[6, 3], Some(choice::GELSY), None), Ok(389));
        assert_eq!(lstsq_of(&[6, 4], &[6, 3], None, None), Ok(389));
        // SVD (an estimate): 4 x 6 x 16 + 8 x 64 + 4 x 6 x 4 x 3 = 384 + 512 + 288 = 1184.
        assert_eq!(lstsq_of(&[6, 4], &[6, 3], Some(choice::GELSD), None), Ok(1184));
        assert_eq!(lstsq_of(&[6, 4], &[6, 3], Some(choice::GELSS), None), Ok(1184));
        // Underdetermined A 4 x 6, B 4 x 3 (M = 6, N = 4): gels 389; gelsy + the trapezoid's
        // reduction 2 x 16 x (6 - 4) = 64: 453.33 -> 453; no driver: where A is decides.
        assert_eq!(lstsq_of(&[4, 6], &[4, 3], Some(choice::GELS), None), Ok(389));
        assert_eq!(lstsq_of(&[4, 6], &[4, 3], Some(choice::GELSY), None), Ok(453));
        assert_eq!(lstsq_of(&[4, 6], &[4, 3], None, None), Err(FormulaError::DataDependent));
        assert_eq!(lstsq_of(&[4, 6], &[4, 3], None, Some(1)), Ok(453), "on the CPU: gelsy");
        assert_eq!(lstsq_of(&[4, 6], &[4, 3], None, Some(0)), Ok(389), "elsewhere: gels");
        // B a vector (k = 1): 149.33 + 96 - 16 = 229.33 -> 229.
        assert_eq!(lstsq_of(&[6, 4], &[6], Some(choice::GELS), None), Ok(229));
        // Batches broadcast: [2, 1] with [1, 3] is 6 matrices, 6 x 389.33 = 2336.
        assert_eq!(lstsq_of(&[2, 1, 6, 4], &[1, 3, 6, 3], Some(choice::GELS), None), Ok(2336));
        assert_eq!(lstsq_of(&[3, 6, 4], &[2, 6, 3], Some(choice::GELS), None), Err(FormulaError::UnexpectedShape));
        assert_eq!(
            lstsq_of(&[6, 4], &[6, 3], Some(choice::COMPLETE), None),
            Err(FormulaError::MissingArgument(3)),
            "a QR mode is no driver"
        );
    }
}
