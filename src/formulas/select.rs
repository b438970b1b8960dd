//! Sorting, selection, histograms and scattered accumulation: work that depends on the data as
//! well as the shapes. Each formula counts from the input shapes alone, by a stated convention:
//!
//! - `sort` (and `_unique2`, which sorts): `n ceil(log2 n)` comparisons per sorted row of `n`
//!   elements, the worst case of a comparison sort (`_unique2` adds `n` for the adjacent
//!   comparisons);
//! - `topk`: `n ceil(log2(k + 1))` comparisons per row: every element is compared with a heap of
//!   `k` and sifted down at most its height;
//! - `kthvalue`, `median`: `n` comparisons per row (one selection pass; the reduction convention);
//! - `isin`: PyTorch's own choice of algorithm, from the sizes: `n m` comparisons when the `m`
//!   test elements are fewer than `floor(10 n^0.145)` (each element against each test element), else a
//!   sort of both (`(n + m) ceil(log2(n + m))`) and a pass over them (`n + m`); one comparison per
//!   element against a scalar;
//! - `histc`: 3 per element (the bin index: a subtract and a scale; the count's increment), + 2
//!   when `min == max` (the data's own minimum and maximum are computed first);
//! - scattered accumulation (`scatter_add`, `scatter_reduce`, `scatter` with `reduce`,
//!   `index_add`, `_embedding_bag` and its gradients): 1 per element accumulated (+1 for a
//!   multiply: `index_add`'s `alpha`, per-sample weights); a plain `scatter` is a copy (0);
//! - binary searches (`searchsorted`, `bucketize`): `ceil(log2(n + 1))` comparisons per value
//!   searched among `n` boundaries;
//! - `mode`: a sort of each row and a pass counting its runs (`n` more);
//! - `unique_consecutive` and `unique_dim_consecutive`: one comparison per element; `unique_dim`
//!   sorts the slices along `dim` (`r ceil(log2 r)` slice comparisons of `w` elements) and
//!   compares neighbours (`r w`);
//! - `histogram` and `histogramdd`: `histc`'s 3 per element with a bin count (2 per coordinate
//!   and 1 increment per sample for `histogramdd`), + 2 per element when the range comes from the
//!   data; a binary search per coordinate and an increment with bin edges given; + 2 per bin for
//!   `density`.

use super::{add, ceil_log2, dim, mul, require_tensor, FormulaError};
use crate::args::{Arg, Args};

/// `(rows, n)` of a tensor reduced or sorted along `dim` (negative counts from the end).
fn rows_along(args: &Args, tensor: usize, along: i64) -> Result<(u64, u64), FormulaError> {
    let t = require_tensor(args, tensor)?;
    let numel = t.numel().ok_or(FormulaError::Overflow)?;
    if t.dims.is_empty() {
        return Ok((1, numel));
    }
    let rank = t.dims.len() as i64;
    let index = if along < 0 { along + rank } else { along };
    let n = usize::try_from(index).ok().filter(|&i| i < t.dims.len()).ok_or(FormulaError::UnexpectedShape)?;
    let n = dim(&t, n)?;
    Ok((numel.checked_div(n).unwrap_or(0), n))
}

/// `n ceil(log2 n)` comparisons for each of `rows` rows.
fn sorted_rows(rows: u64, n: u64) -> Result<u64, FormulaError> {
    mul(rows, mul(n, ceil_log2(n))?)
}

/// `sort(self, dim, descending)` and `sort.stable(self, stable, dim, descending)`.
pub fn sort(args: &Args) -> Result<u64, FormulaError> {
    // The stable overload has `stable` (a bool or None) where the other has `dim`.
    let along = match args.get(1) {
        Some(Arg::Int(d)) => d,
        _ => args.int(2).unwrap_or(-1),
    };
    let (rows, n) = rows_along(args, 0, along)?;
    sorted_rows(rows, n)
}

/// `topk(self, k, dim, largest, sorted)`.
pub fn topk(args: &Args) -> Result<u64, FormulaError> {
    let k = u64::try_from(args.int(1).ok_or(FormulaError::MissingArgument(1))?)
        .map_err(|_| FormulaError::UnexpectedShape)?;
    let (rows, n) = rows_along(args, 0, args.int(2).unwrap_or(-1))?;
    mul(rows, mul(n, ceil_log2(k.saturating_add(1)).max(1))?)
}

/// `kthvalue(self, k, dim, keepdim)`.
pub fn kthvalue(args: &Args) -> Result<u64, FormulaError> {
    let (rows, n) = rows_along(args, 0, args.int(2).unwrap_or(-1))?;
    mul(rows, n)
}

/// `median(self)` (all elements) and `median.dim(self, dim, keepdim)`: `n` per row, which is
/// every element once either way.
pub fn median(args: &Args) -> Result<u64, FormulaError> {
    require_tensor(args, 0)?.numel().ok_or(FormulaError::Overflow)
}

/// `_unique2(self, sorted, return_inverse, return_counts)`: the flattened input sorted, then
/// each element compared with its neighbour.
pub fn unique(args: &Args) -> Result<u64, FormulaError> {
    let n = require_tensor(args, 0)?.numel().ok_or(FormulaError::Overflow)?;
    add(sorted_rows(1, n)?, n)
}

/// `isin.Tensor_Tensor(elements, test_elements, ...)`, `isin.Tensor_Scalar(elements, test, ...)`
/// and `isin.Scalar_Tensor(element, test_elements, ...)`.
pub fn isin(args: &Args) -> Result<u64, FormulaError> {
    let numel = |i: usize| args.tensor(i).map(|t| t.numel().ok_or(FormulaError::Overflow));
    match (numel(0).transpose()?, numel(1).transpose()?) {
        (Some(n), Some(m)) => {
            // aten/src/ATen/native/TensorCompare.cpp: the brute-force kernel below this size
            // (`static_cast<int64_t>(10.0f * std::pow(double(n), 0.145))`, truncated).
            if m < (10.0 * (n as f64).powf(0.145)) as u64 {
                mul(n, m)
            } else {
                let total = add(n, m)?;
                add(sorted_rows(1, total)?, total)
            }
        }
        (Some(n), None) | (None, Some(n)) => Ok(n),
        (None, None) => Err(FormulaError::MissingTensor(0)),
    }
}

/// `histc(self, bins, min, max)`.
pub fn histc(args: &Args) -> Result<u64, FormulaError> {
    let n = require_tensor(args, 0)?.numel().ok_or(FormulaError::Overflow)?;
    let (low, high) = (args.scalar(2).unwrap_or(0.0), args.scalar(3).unwrap_or(0.0));
    mul(n, if low == high { 5 } else { 3 })
}

/// `scatter_add(self, dim, index, src)` and `scatter_reduce.two(self, dim, index, src, reduce,
/// include_self)`: one per index element (the mean's final division is not counted).
pub fn scatter_accumulate(args: &Args) -> Result<u64, FormulaError> {
    require_tensor(args, 2)?.numel().ok_or(FormulaError::Overflow)
}

/// `scatter(self, dim, index, src | value)`: a copy (0); with `reduce` (a string where the
/// other overloads have nothing or `out`), one per index element.
pub fn scatter(args: &Args) -> Result<u64, FormulaError> {
    match args.get(4) {
        Some(Arg::Other) => scatter_accumulate(args),
        _ => Ok(0),
    }
}

/// `index_add(self, dim, index, source, alpha)`: one add per `source` element, and a multiply
/// when `alpha` is not 1.
pub fn index_add(args: &Args) -> Result<u64, FormulaError> {
    let n = require_tensor(args, 3)?.numel().ok_or(FormulaError::Overflow)?;
    mul(n, if args.scalar(4).unwrap_or(1.0) == 1.0 { 1 } else { 2 })
}

/// Elements gathered into bags: the ids at `indices` x the embedding width `width`, doubled
/// when the argument `weights` holds per-sample weights (a multiply each). With a padding index
/// (the argument `padding` >= 0) the kernel skips the ids equal to it, a count that depends on
/// the ids' values: the shim reads them (on the CPU) and hands over how many are kept
/// (`Args::data`); ids it cannot read leave the call data-dependent, never priced as if none
/// were padding.
fn bagged(args: &Args, indices: usize, width: u64, weights: usize, padding: usize) -> Result<u64, FormulaError> {
    let ids = match args.int(padding) {
        Some(p) if p >= 0 => {
            let kept = args.data().ok_or(FormulaError::DataDependent)?;
            u64::try_from(kept).map_err(|_| FormulaError::UnexpectedShape)?
        }
        _ => require_tensor(args, indices)?.numel().ok_or(FormulaError::Overflow)?,
    };
    mul(mul(ids, width)?, if args.has_tensor(weights) { 2 } else { 1 })
}

/// `_embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse,
/// per_sample_weights, include_last_offset, padding_idx)` (and `_embedding_bag_forward_only`):
/// every looked-up row that is not padding accumulated into its bag (sum, mean or max alike).
pub fn embedding_bag(args: &Args) -> Result<u64, FormulaError> {
    let width = dim(&require_tensor(args, 0)?, 1)?;
    bagged(args, 1, width, 6, 8)
}

/// `_embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices,
/// num_weights, scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx)`: every
/// looked-up row that is not padding receives its bag's gradient.
pub fn embedding_bag_backward(args: &Args) -> Result<u64, FormulaError> {
    let width = dim(&require_tensor(args, 0)?, 1)?;
    bagged(args, 1, width, 10, 11)
}

/// `_embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices,
/// num_weights, scale_grad_by_freq, mode, per_sample_weights, padding_idx)`.
pub fn embedding_bag_dense_backward(args: &Args) -> Result<u64, FormulaError> {
    let width = dim(&require_tensor(args, 0)?, 1)?;
    bagged(args, 1, width, 8, 9)
}

/// `trace(self)`: the diagonal's `min(rows, columns)` elements added.
pub fn trace(args: &Args) -> Result<u64, FormulaError> {
    let t = require_tensor(args, 0)?;
    if t.dims.len() != 2 {
        return Err(FormulaError::UnexpectedShape);
    }
    Ok(dim(&t, 0)?.min(dim(&t, 1)?))
}

fn numel(args: &Args, index: usize) -> Result<u64, FormulaError> {
    require_tensor(args, index)?.numel().ok_or(FormulaError::Overflow)
}

/// A binary search among `n` boundaries: `ceil(log2(n + 1))` comparisons.
fn search(n: u64) -> u64 {
    ceil_log2(n.saturating_add(1))
}

/// `searchsorted(sorted_sequence [..., n], self, ...)` (`self` a tensor or a scalar).
pub fn searchsorted(args: &Args) -> Result<u64, FormulaError> {
    let sequence = require_tensor(args, 0)?;
    let n = sequence.dims.last().map_or(Ok(1), |_| dim(&sequence, sequence.dims.len() - 1))?;
    let values = args.tensor(1).map_or(Ok(1), |t| t.numel().ok_or(FormulaError::Overflow))?;
    mul(values, search(n))
}

/// `bucketize(self, boundaries [n], ...)` (`self` a tensor or a scalar).
pub fn bucketize(args: &Args) -> Result<u64, FormulaError> {
    let values = args.tensor(0).map_or(Ok(1), |t| t.numel().ok_or(FormulaError::Overflow))?;
    mul(values, search(numel(args, 1)?))
}

/// `mode(self, dim, keepdim)`.
pub fn mode(args: &Args) -> Result<u64, FormulaError> {
    let (rows, n) = rows_along(args, 0, args.int(1).unwrap_or(-1))?;
    add(sorted_rows(rows, n)?, mul(rows, n)?)
}

/// `unique_consecutive(self, ...)` and `unique_dim_consecutive(self, dim, ...)`.
pub fn unique_consecutive(args: &Args) -> Result<u64, FormulaError> {
    numel(args, 0)
}

/// `unique_dim(self, dim, sorted, return_inverse, return_counts)`.
pub fn unique_dim(args: &Args) -> Result<u64, FormulaError> {
    let (width, rows) = rows_along(args, 0, args.int(1).ok_or(FormulaError::MissingArgument(1))?)?;
    mul(add(mul(rows, ceil_log2(rows))?, rows)?, width)
}

/// `put_(self, index, source, accumulate)`: one add per `source` element when accumulating, a
/// copy otherwise.
pub fn put(args: &Args) -> Result<u64, FormulaError> {
    if args.bool(3).unwrap_or(false) {
        numel(args, 2)
    } else {
        Ok(0)
    }
}

/// `_embedding_bag_per_sample_weights_backward(grad [B, D], weight [V, D], indices [n], ...)`:
/// one dot product of the embedding width per looked-up index.
pub fn embedding_bag_per_sample_weights_backward(args: &Args) -> Result<u64, FormulaError> {
    let width = dim(&require_tensor(args, 0)?, 1)?;
    mul(mul(numel(args, 2)?, width)?, 2)
}

/// `histogram.bin_ct(self, bins, range, weight, density)` and `histogram.bins_tensor(self, bins,
/// weight, density)`.
pub fn histogram(args: &Args) -> Result<u64, FormulaError> {
    let n = numel(args, 0)?;
    let (binning, bins, density) = match args.get(1) {
        Some(Arg::Int(bins)) => {
            let from_data = matches!(args.get(2), Some(Arg::None) | None);
            (if from_data { 5 } else { 3 }, u64::try_from(bins).map_err(|_| FormulaError::UnexpectedShape)?, 4)
        }
        Some(Arg::Tensor(edges)) => {
            let edges = edges.numel().ok_or(FormulaError::Overflow)?;
            (add(search(edges), 1)?, edges.saturating_sub(1), 3)
        }
        _ => return Err(FormulaError::MissingArgument(1)),
    };
    let normalize = if args.bool(density).unwrap_or(false) { mul(bins, 2)? } else { 0 };
    add(mul(n, binning)?, normalize)
}

/// `(samples, coordinates)` of `histogramdd`'s input `[..., D]`.
fn samples(args: &Args) -> Result<(u64, u64), FormulaError> {
    let input = require_tensor(args, 0)?;
    let d = input.dims.last().map_or(Ok(1), |_| dim(&input, input.dims.len() - 1))?;
    let n = input.numel().ok_or(FormulaError::Overflow)?;
    Ok((n.checked_div(d).unwrap_or(0), n))
}

/// `_histogramdd_bin_edges(self, bins, range, weight, density)`: the range's minimum and maximum
/// from the data (2 per element) when none is given; the edges themselves are a `linspace`.
pub fn histogramdd_bin_edges(args: &Args) -> Result<u64, FormulaError> {
    if matches!(args.get(2), Some(Arg::None) | None) {
        mul(numel(args, 0)?, 2)
    } else {
        Ok(0)
    }
}

/// `_histogramdd_from_bin_cts(self, bins, range, weight, density)`.
pub fn histogramdd_from_bin_cts(args: &Args) -> Result<u64, FormulaError> {
    let (points, coordinates) = samples(args)?;
    let bins = args.int_list(1).ok_or(FormulaError::MissingArgument(1))?;
    let normalize = if args.bool(4).unwrap_or(false) { mul(super::product(bins)?, 2)? } else { 0 };
    add(add(mul(coordinates, 2)?, points)?, normalize)
}

/// `_histogramdd_from_bin_tensors(self, bins (one edge tensor per coordinate), weight, density)`.
pub fn histogramdd_from_bin_tensors(args: &Args) -> Result<u64, FormulaError> {
    let (points, _) = samples(args)?;
    let edges = args.list_tensors(1).ok_or(FormulaError::MissingArgument(1))?;
    let (mut total, mut bins) = (points, 1u64);
    for edge in edges {
        let n = edge.numel().ok_or(FormulaError::Overflow)?;
        total = add(total, mul(points, search(n))?)?;
        bins = mul(bins, n.saturating_sub(1))?;
    }
    add(total, if args.bool(3).unwrap_or(false) { mul(bins, 2)? } else { 0 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::build::*;
    use crate::formulas::testing::with_args;

    #[test]
    fn sorting_and_selection() {
        assert_eq!((ceil_log2(1), ceil_log2(2), ceil_log2(50), ceil_log2(64), ceil_log2(65)), (0, 1, 6, 6, 7));
        // sort([4, 50], dim=-1): 4 rows x 50 x 6 = 1200; the stable overload reads dim after `stable`.
        let sort_of = |stable: bool| {
            with_args(
                |s| {
                    tensor(s, &[4, 50]);
                    if stable {
                        boolean(s, true);
                    }
                    int(s, -1);
                    boolean(s, false);
                },
                sort,
            )
        };
        assert_eq!(sort_of(false), Ok(1200));
        assert_eq!(sort_of(true), Ok(1200));
        // sort([4, 50], dim=0): 50 rows of 4: 50 x 4 x 2 = 400.
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[4, 50]);
                    int(s, 0);
                },
                sort
            ),
            Ok(400)
        );
        // topk(k=5) on [4, 50]: 4 x 50 x ceil(log2 6) = 600; k=1: 4 x 50 x 1 = 200.
        let topk_of = |k: i64| {
            with_args(
                |s| {
                    tensor(s, &[4, 50]);
                    int(s, k);
                    int(s, -1);
                },
                topk,
            )
        };
        assert_eq!(topk_of(5), Ok(600));
        assert_eq!(topk_of(1), Ok(200));
        // kthvalue and median: every element once.
        let kth = with_args(
            |s| {
                tensor(s, &[4, 7]);
                int(s, 2);
                int(s, 1);
            },
            kthvalue,
        );
        assert_eq!(kth, Ok(28));
        assert_eq!(with_args(|s| tensor(s, &[4, 7]), median), Ok(28));
        // _unique2 on 20 elements: 20 x 5 + 20 = 120.
        assert_eq!(with_args(|s| tensor(s, &[20]), unique), Ok(120));
        // A dim outside the tensor is an error, not a guess.
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[4]);
                    int(s, 3);
                },
                sort
            ),
            Err(FormulaError::UnexpectedShape)
        );
    }

    #[test]
    fn histograms() {
        let histc_of = |low: f64, high: f64| {
            with_args(
                |s| {
                    tensor(s, &[100]);
                    int(s, 10);
                    double(s, low);
                    double(s, high);
                },
                histc,
            )
        };
        assert_eq!(histc_of(0.0, 1.0), Ok(300));
        assert_eq!(histc_of(0.0, 0.0), Ok(500), "min == max: the data's range is computed first");
    }

    #[test]
    fn scattered_accumulation() {
        // scatter_add_(self [4,6], 1, index [4,3], src [4,3]): 12.
        let scatter_args = |s: &mut Vec<i64>| {
            tensor(s, &[4, 6]);
            int(s, 1);
            tensor(s, &[4, 3]);
            tensor(s, &[4, 3]);
        };
        assert_eq!(with_args(scatter_args, scatter_accumulate), Ok(12));
        assert_eq!(with_args(scatter_args, scatter), Ok(0), "a plain scatter is a copy");
        let reduced = with_args(
            |s| {
                scatter_args(s);
                s.push(crate::args::TAG_OTHER);
            },
            scatter,
        );
        assert_eq!(reduced, Ok(12));
        // index_add_(self [4,6], 0, index [2], source [2,6], alpha): 12, or 24 with alpha 2.
        let index_add_of = |alpha: f64| {
            with_args(
                |s| {
                    tensor(s, &[4, 6]);
                    int(s, 0);
                    tensor(s, &[2]);
                    tensor(s, &[2, 6]);
                    double(s, alpha);
                },
                index_add,
            )
        };
        assert_eq!(index_add_of(1.0), Ok(12));
        assert_eq!(index_add_of(2.0), Ok(24));
    }

    #[test]
    fn embedding_bags() {
        // weight [10, 5], 8 indices: 40 accumulated; with per-sample weights 80.
        let bag = |weighted: bool| {
            with_args(
                |s| {
                    tensor(s, &[10, 5]);
                    tensor(s, &[8]);
                    tensor(s, &[2]);
                    boolean(s, false);
                    int(s, 0);
                    boolean(s, false);
                    if weighted {
                        tensor(s, &[8])
                    } else {
                        none(s)
                    }
                },
                embedding_bag,
            )
        };
        assert_eq!(bag(false), Ok(40));
        assert_eq!(bag(true), Ok(80));
        // backward: grad [2, 5] over 8 indices: 40.
        let backward = with_args(
            |s| {
                tensor(s, &[2, 5]);
                tensor(s, &[8]);
            },
            embedding_bag_backward,
        );
        assert_eq!(backward, Ok(40));
        assert_eq!(with_args(|s| tensor(s, &[3, 5]), trace), Ok(3));
    }

    #[test]
    fn embedding_bags_with_a_padding_index_count_the_kept_ids() {
        // weight [50, 16], 20 ids of which 7 are padding_idx 0: 13 x 16 = 208 accumulated.
        let bag = |padding: i64, kept: Option<i64>| {
            with_args(
                |s| {
                    tensor(s, &[50, 16]);
                    tensor(s, &[20]);
                    tensor(s, &[4]);
                    boolean(s, false);
                    int(s, 1);
                    boolean(s, false);
                    none(s);
                    boolean(s, false);
                    int(s, padding);
                    if let Some(kept) = kept {
                        data(s, kept);
                    }
                },
                embedding_bag,
            )
        };
        assert_eq!(bag(0, Some(13)), Ok(208));
        // Without the shim's count of the ids the kernel keeps: data-dependent, never 320.
        assert_eq!(bag(0, None), Err(FormulaError::DataDependent));
        // No padding index (-1): every id, 320.
        assert_eq!(bag(-1, None), Ok(320));
        // The dense backward skips the padding ids too: grad [4, 16], 13 kept: 208.
        let backward = with_args(
            |s| {
                tensor(s, &[4, 16]);
                tensor(s, &[20]);
                tensor(s, &[20]);
                tensor(s, &[4]);
                tensor(s, &[4]);
                int(s, 50);
                boolean(s, false);
                int(s, 1);
                none(s);
                int(s, 0);
                data(s, 13);
            },
            embedding_bag_dense_backward,
        );
        assert_eq!(backward, Ok(208));
    }

    #[test]
    fn membership_tests() {
        let isin_of = |n: i64, m: i64| {
            with_args(
                |s| {
                    tensor(s, &[n]);
                    tensor(s, &[m]);
                },
                isin,
            )
        };
        // 6 elements, 1 test element (1 < floor(10 x 6^0.145) = 12): brute force, 6 comparisons.
        assert_eq!(isin_of(6, 1), Ok(6));
        // 6 against 11 (below 12): 66; against 12 (not below): sort 18 x 5 + 18 = 108.
        assert_eq!(isin_of(6, 11), Ok(66));
        assert_eq!(isin_of(6, 12), Ok(108));
        // Against a scalar: one comparison per element.
        let scalar = with_args(
            |s| {
                tensor(s, &[6]);
                int(s, 2);
            },
            isin,
        );
        assert_eq!(scalar, Ok(6));
    }

    #[test]
    fn searches_modes_and_unique_variants() {
        // 5 values among 7 boundaries: ceil(log2 8) = 3 comparisons each.
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[7]);
                    tensor(s, &[5]);
                },
                searchsorted
            ),
            Ok(15)
        );
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[5]);
                    tensor(s, &[7]);
                },
                bucketize
            ),
            Ok(15)
        );
        // A scalar value: one search.
        assert_eq!(
            with_args(
                |s| {
                    double(s, 1.0);
                    tensor(s, &[7]);
                },
                bucketize
            ),
            Ok(3)
        );
        // mode of [4, 6] along 1: 4 rows x (6 x 3 + 6) = 96.
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[4, 6]);
                    int(s, 1);
                    boolean(s, false);
                },
                mode
            ),
            Ok(96)
        );
        assert_eq!(with_args(|s| tensor(s, &[3, 5]), unique_consecutive), Ok(15));
        // unique over 8 rows of 3: (8 x 3 + 8) x 3 = 96.
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[8, 3]);
                    int(s, 0);
                },
                unique_dim
            ),
            Ok(96)
        );
        let put_call = |accumulate: bool| {
            with_args(
                move |s| {
                    tensor(s, &[9]);
                    tensor(s, &[4]);
                    tensor(s, &[4]);
                    boolean(s, accumulate);
                },
                put,
            )
        };
        assert_eq!((put_call(true), put_call(false)), (Ok(4), Ok(0)));
        // 6 indices into rows of width 5: 6 dot products of 5, 60.
        let f = with_args(
            |s| {
                tensor(s, &[2, 5]);
                tensor(s, &[10, 5]);
                tensor(s, &[6]);
            },
            embedding_bag_per_sample_weights_backward,
        );
        assert_eq!(f, Ok(60));
    }

    #[test]
    fn histograms_by_bin_count_and_by_edges() {
        // 100 values, 10 bins, the range from the data: 5 each; with a range: 3 each.
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[100]);
                    int(s, 10);
                    none(s);
                    none(s);
                    boolean(s, false);
                },
                histogram
            ),
            Ok(500)
        );
        // density adds 2 per bin.
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[100]);
                    int(s, 10);
                    none(s);
                    none(s);
                    boolean(s, true);
                },
                histogram
            ),
            Ok(520)
        );
        // 11 edges given: ceil(log2 12) = 4 comparisons and an increment per value.
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[100]);
                    tensor(s, &[11]);
                    none(s);
                    boolean(s, false);
                },
                histogram
            ),
            Ok(500)
        );
        // histogramdd of 20 points in 2-D: the range 2 x 40 = 80; the bins 2 x 40 + 20 = 100.
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[20, 2]);
                    ints(s, &[3, 3]);
                    none(s);
                    none(s);
                    boolean(s, false);
                },
                histogramdd_bin_edges
            ),
            Ok(80)
        );
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[20, 2]);
                    ints(s, &[3, 3]);
                    none(s);
                    none(s);
                    boolean(s, false);
                },
                histogramdd_from_bin_cts
            ),
            Ok(100)
        );
        // Edges of 4 and 8: 20 x (3 + 4) searches + 20 increments.
        assert_eq!(
            with_args(
                |s| {
                    tensor(s, &[20, 2]);
                    tensors(s, &[&[4], &[8]]);
                    none(s);
                    boolean(s, false);
                },
                histogramdd_from_bin_tensors
            ),
            Ok(160)
        );
    }
}
