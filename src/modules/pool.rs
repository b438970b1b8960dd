//! Pooling, with `K` the window volume (a single kernel size applies to every pooled
//! dimension) and `r` the pooled rank (1, 2, 3 from the class):
//! - max: FLOPs = MACs = `numel(out) * (K - 1)` compares; DMAs `numel(out) * (K + 1 + indices)`;
//! - average: FLOPs `numel(out) * K` (K - 1 adds and a divide), MACs `numel(out) * (K - 1 + r)`
//!   (torchscan 0.2's convention), DMAs `numel(out) * (K + 1)`;
//! - adaptive: `V` = the exact number of window visits, `lead * prod(L + O - gcd(L, O))` over
//!   the pooled dimensions; max: FLOPs = MACs = `V - numel(out)`, DMAs `V + numel(out)*(1 +
//!   indices)`; average: FLOPs `V`, MACs `V + numel(out)*(r - 1)`, DMAs `V + numel(out)`.
//!
//! Receptive field: windowed `(dilation*(k-1)+1, stride, padding)` of the first dimension;
//! adaptive `(s, s, (L - s*s)/2)` with `s = ceil(L/O)` over the last dimension.

use serde::Deserialize;

use super::{err, numel, positive, product, sum, Count, Failure, Rf, RfNumber};

#[derive(Clone, Debug, Deserialize)]
pub struct Pool {
    pub rank: u32,
    pub kernel_size: Vec<i64>,
    pub stride: Vec<i64>,
    pub padding: Vec<i64>,
    /// Max pooling only.
    #[serde(default)]
    pub dilation: Option<Vec<i64>>,
    #[serde(default)]
    pub return_indices: bool,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Adaptive {
    pub rank: u32,
    #[serde(default)]
    pub return_indices: bool,
}

fn volume(pool: &Pool) -> Count {
    match pool.kernel_size.as_slice() {
        [k] => positive(*k, "kernel_size")?.checked_pow(pool.rank).ok_or_else(super::overflow),
        many => many.iter().try_fold(1u64, |acc, &k| product(&[acc, positive(k, "kernel_size")?])),
    }
}

pub fn max_flops(pool: &Pool, output: &[i64]) -> Count {
    product(&[numel(output)?, volume(pool)?.saturating_sub(1)])
}

pub fn max_dmas(pool: &Pool, output: &[i64]) -> Count {
    product(&[numel(output)?, sum(&[volume(pool)?, 1, u64::from(pool.return_indices)])?])
}

pub fn avg_flops(pool: &Pool, output: &[i64]) -> Count {
    product(&[numel(output)?, volume(pool)?])
}

pub fn avg_macs(pool: &Pool, output: &[i64]) -> Count {
    product(&[numel(output)?, (volume(pool)? + u64::from(pool.rank)).saturating_sub(1)])
}

pub fn avg_dmas(pool: &Pool, output: &[i64]) -> Count {
    product(&[numel(output)?, sum(&[volume(pool)?, 1])?])
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Exact window visits of adaptive pooling over the last `rank` dimensions.
fn visits(rank: u32, input: &[i64], output: &[i64]) -> Count {
    let r = rank as usize;
    if input.len() < r || output.len() < r {
        return Err(err("adaptive pooling input and output need the pooled dimensions"));
    }
    let lead = numel(&input[..input.len() - r])?;
    let mut total = lead;
    for i in 0..r {
        let l = positive(input[input.len() - r + i], "input size")?;
        let o = positive(output[output.len() - r + i], "output size")?;
        total = product(&[total, (l + o).saturating_sub(gcd(l, o))])?;
    }
    Ok(total)
}

pub fn adaptive_max_flops(pool: &Adaptive, input: &[i64], output: &[i64]) -> Count {
    Ok(visits(pool.rank, input, output)?.saturating_sub(numel(output)?))
}

pub fn adaptive_max_dmas(pool: &Adaptive, input: &[i64], output: &[i64]) -> Count {
    sum(&[visits(pool.rank, input, output)?, product(&[numel(output)?, 1 + u64::from(pool.return_indices)])?])
}

pub fn adaptive_avg_flops(pool: &Adaptive, input: &[i64], output: &[i64]) -> Count {
    visits(pool.rank, input, output)
}

pub fn adaptive_avg_macs(pool: &Adaptive, input: &[i64], output: &[i64]) -> Count {
    sum(&[visits(pool.rank, input, output)?, product(&[numel(output)?, u64::from(pool.rank.saturating_sub(1))])?])
}

pub fn adaptive_avg_dmas(pool: &Adaptive, input: &[i64], output: &[i64]) -> Count {
    sum(&[visits(pool.rank, input, output)?, numel(output)?])
}

fn first(list: &[i64], what: &str) -> Result<i64, Failure> {
    list.first().copied().ok_or_else(|| err(format!("{what} is empty")))
}

pub fn windowed_rf(pool: &Pool, dilated: bool) -> Rf {
    let mut k = first(&pool.kernel_size, "kernel_size")?;
    if dilated {
        if let Some(d) = pool.dilation.as_deref().and_then(|d| d.first()) {
            k = d * (k - 1) + 1;
        }
    }
    Ok([
        RfNumber::Int(k),
        RfNumber::Int(first(&pool.stride, "stride")?),
        RfNumber::Int(first(&pool.padding, "padding")?),
    ])
}

pub fn adaptive_rf(input: &[i64], output: &[i64]) -> Rf {
    let (Some(&l), Some(&o)) = (input.last(), output.last()) else {
        return Err(err("adaptive pooling needs shaped tensors"));
    };
    if o <= 0 {
        return Err(err("adaptive pooling output size must be positive"));
    }
    let s = (l + o - 1) / o;
    Ok([RfNumber::Int(s), RfNumber::Int(s), RfNumber::Float((l - s * s) as f64 / 2.0)])
}

#[cfg(test)]
mod tests {
    use crate::modules::testing::call;
    use crate::modules::RfNumber::{Float, Int};
    use serde_json::json;

    fn pool(family: &str, kernel: &[i64]) -> crate::modules::Call {
        call(json!({"family": family, "rank": 2, "kernel_size": kernel, "stride": [2, 2], "padding": [0, 0],
                    "dilation": [1, 1], "input": [1, 8, 4, 4], "output": [1, 8, 2, 2]}))
    }

    fn adaptive(family: &str, rank: u32, input: &[i64], output: &[i64]) -> crate::modules::Call {
        call(json!({"family": family, "rank": rank, "input": input, "output": output}))
    }

    #[test]
    fn windowed_reference_values() {
        // 32 outputs of 2x2 windows.
        let m = pool("max_pool", &[2, 2]);
        assert_eq!((m.flops(), m.macs(), m.dmas()), (Ok(96), Ok(96), Ok(160)));
        assert_eq!(pool("max_pool", &[2]).flops(), Ok(96), "one kernel size applies to both dimensions");
        let a = pool("avg_pool", &[2, 2]);
        assert_eq!((a.flops(), a.macs(), a.dmas()), (Ok(128), Ok(160), Ok(160)));
        assert_eq!(m.receptive_field(), Ok([Int(2), Int(2), Int(0)]));
    }

    #[test]
    fn adaptive_reference_values() {
        let m = adaptive("adaptive_max_pool", 2, &[1, 8, 4, 4], &[1, 8, 2, 2]);
        assert_eq!((m.flops(), m.macs(), m.dmas()), (Ok(96), Ok(96), Ok(160)));
        let a = adaptive("adaptive_avg_pool", 2, &[1, 8, 4, 4], &[1, 8, 2, 2]);
        assert_eq!((a.flops(), a.macs(), a.dmas()), (Ok(128), Ok(160), Ok(160)));
        assert_eq!(m.receptive_field(), Ok([Int(2), Int(2), Float(0.0)]));
    }

    #[test]
    fn adaptive_non_divisible() {
        // 7 -> 3 windows [0,3) [2,5) [4,7): 9 visits = 7 + 3 - gcd(7, 3); 8 channels x 9 = 72.
        let m = adaptive("adaptive_max_pool", 1, &[2, 4, 7], &[2, 4, 3]);
        assert_eq!((m.flops(), m.dmas()), (Ok(48), Ok(96)));
        let a = adaptive("adaptive_avg_pool", 1, &[2, 4, 7], &[2, 4, 3]);
        assert_eq!((a.flops(), a.macs()), (Ok(72), Ok(72)));
        let a2 = adaptive("adaptive_avg_pool", 2, &[2, 4, 7, 8], &[2, 4, 3, 4]);
        assert_eq!((a2.flops(), a2.macs(), a2.dmas()), (Ok(576), Ok(672), Ok(672)));
        let m3 = adaptive("adaptive_max_pool", 3, &[2, 4, 7, 8, 5], &[2, 4, 3, 4, 2]);
        assert_eq!(m3.flops(), Ok(3264));
        let a3 = adaptive("adaptive_avg_pool", 3, &[2, 4, 7, 8, 5], &[2, 4, 3, 4, 2]);
        assert_eq!((a3.flops(), a3.macs(), a3.dmas()), (Ok(3456), Ok(3840), Ok(3648)));
    }
}
