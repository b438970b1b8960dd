//! Normalization layers, with `N = numel(in)` and `C = num_features`:
//!
//! BatchNorm FLOPs: `2C` (the per-channel scale and shift from the statistics) `+ 2N`
//! (subtract, multiply) `+ N` per affine parameter present, `+ 4N` when batch statistics are
//! computed (training, or no running buffers), `+ C*(3 + 5)` for the running-mean and
//! running-variance updates while training with tracking; 0 for an empty input. MACs: `N*(1 +
//! affine)`, plus the statistics' reductions `C*(B*S - 1) + C*(2*B*S - 1) + 4C` while training
//! with tracking. DMAs: `in + out + 1 (eps) + running stats + affine parameters + 1 (momentum)
//! + the running-stat writes (1 + both sizes) while training with tracking`.
//!
//! LayerNorm, with `P = prod(normalized_shape)` and `R = N / P` rows: FLOPs `6N + 2R + N` per
//! affine parameter; MACs `N*(1 + weight)`; DMAs `4N + 5R + 1 + parameters + 2N` if affine.
//! Subclasses of LayerNorm get FLOPs only (their forward may differ).
//!
//! RMSNorm (`nn.RMSNorm` and the known Hugging Face RMS norms), with `P` the normalized size and
//! `R = N / P` rows: FLOPs `3N + 2R` (square, mean, scale per element; add eps and the
//! reciprocal square root per row) `+ N` with a weight; MACs `N*(1 + weight)` (as LayerNorm's);
//! DMAs `3N + 2R + 1 + weight + N` with a weight (the input read twice, the output written, the
//! row statistic written and read, eps, the weight and its pass).

use serde::Deserialize;

use super::{err, numel, overflow, product, sum, Count, Failure};

#[derive(Clone, Debug, Deserialize)]
pub struct BatchNorm {
    pub num_features: u64,
    pub affine: bool,
    /// Element counts of the tensors present (`None`: absent).
    pub weight: Option<u64>,
    pub bias: Option<u64>,
    pub running_mean: Option<u64>,
    pub running_var: Option<u64>,
    pub track_running_stats: bool,
    pub training: bool,
    pub momentum: bool,
}

impl BatchNorm {
    fn tracking_update(&self) -> bool {
        self.training && self.track_running_stats
    }

    pub fn flops(&self, input: &[i64]) -> Count {
        let n = numel(input)?;
        if n == 0 {
            return Ok(0);
        }
        let c = self.num_features;
        let affine = u64::from(self.weight.is_some()) + u64::from(self.bias.is_some());
        let batch_stats = self.training || (self.running_mean.is_none() && self.running_var.is_none());
        let updates = if self.tracking_update() {
            product(&[c, 3 * u64::from(self.running_mean.is_some()) + 5 * u64::from(self.running_var.is_some())])?
        } else {
            0
        };
        sum(&[
            product(&[2, c])?,
            product(&[2, n])?,
            product(&[n, affine])?,
            if batch_stats { product(&[4, n])? } else { 0 },
            updates,
        ])
    }

    pub fn macs(&self, input: &[i64]) -> Count {
        let n = numel(input)?;
        let base = product(&[n, 1 + u64::from(self.affine)])?;
        if !self.tracking_update() {
            return Ok(base);
        }
        let batch = u64::try_from(*input.first().ok_or_else(|| err("batch norm needs a batched input"))?)
            .map_err(|_| err("negative batch size"))?;
        let spatial = numel(input.get(2..).unwrap_or(&[]))?;
        let bs = product(&[batch, spatial])?;
        let c = self.num_features;
        sum(&[
            base,
            product(&[c, bs.saturating_sub(1)])?,
            product(&[c, (2 * bs).saturating_sub(1)])?,
            product(&[4, c])?,
        ])
    }

    pub fn dmas(&self, n_in: u64, n_out: u64) -> Count {
        let stats = match (self.running_mean, self.running_var) {
            (Some(m), Some(v)) => Some(sum(&[m, v])?),
            _ => None,
        };
        let params = match (self.affine, self.weight, self.bias) {
            (true, Some(w), Some(b)) => sum(&[w, b])?,
            _ => 0,
        };
        let writes = match stats {
            Some(s) if self.tracking_update() => sum(&[1, s])?,
            _ => 0,
        };
        sum(&[n_in, 1, stats.unwrap_or(0), params, u64::from(self.momentum), writes, n_out])
    }
}

#[derive(Clone, Debug, Deserialize)]
pub struct LayerNorm {
    pub normalized_shape: Vec<i64>,
    pub weight: Option<u64>,
    pub bias: Option<u64>,
    /// Exactly `nn.LayerNorm` (not a subclass): MACs and DMAs assume its forward.
    pub exact_type: bool,
}

impl LayerNorm {
    /// `(N, R)`: elements and normalized rows.
    fn sizes(&self, input: &[i64], metric: &str) -> Result<(u64, u64), Failure> {
        let p = numel(&self.normalized_shape)?;
        if p == 0 {
            return Err(err(format!("LayerNorm {metric} require a nonempty normalized row.")));
        }
        let n = numel(input)?;
        Ok((n, n / p))
    }

    pub fn flops(&self, input: &[i64]) -> Count {
        let (n, rows) = self.sizes(input, "FLOPs")?;
        let affine = u64::from(self.weight.is_some()) + u64::from(self.bias.is_some());
        sum(&[product(&[6, n])?, product(&[2, rows])?, product(&[n, affine])?])
    }

    pub fn macs(&self, input: &[i64]) -> Count {
        if !self.exact_type {
            return Err(Failure::Unsupported("LayerNorm subclass".into()));
        }
        let (n, _) = self.sizes(input, "MACs")?;
        product(&[n, 1 + u64::from(self.weight.is_some())])
    }

    pub fn dmas(&self, input: &[i64]) -> Count {
        if !self.exact_type {
            return Err(Failure::Unsupported("LayerNorm subclass".into()));
        }
        let (n, rows) = self.sizes(input, "DMAs")?;
        let params = self.weight.unwrap_or(0).checked_add(self.bias.unwrap_or(0)).ok_or_else(overflow)?;
        let affine = if self.weight.is_some() || self.bias.is_some() { product(&[2, n])? } else { 0 };
        sum(&[product(&[4, n])?, product(&[5, rows])?, 1, params, affine])
    }
}

/// GroupNorm, and InstanceNorm with the input's statistics (one group per channel): statistics
/// per (sample, group) row, as LayerNorm's over that row: FLOPs `6N + 2R + N` per affine
/// parameter with `R = batch x groups`; MACs `N*(1 + weight)`; DMAs `4N + 5R + 1 + parameters
/// + 2N` if affine. The statistics mix positions: no receptive field.
#[derive(Clone, Debug, Deserialize)]
pub struct GroupNorm {
    pub groups: u64,
    pub weight: Option<u64>,
    pub bias: Option<u64>,
}

impl GroupNorm {
    fn sizes(&self, input: &[i64]) -> Result<(u64, u64), Failure> {
        let batch = u64::try_from(*input.first().ok_or_else(|| err("group norm needs a batched input"))?)
            .map_err(|_| err("negative batch size"))?;
        Ok((numel(input)?, product(&[batch, self.groups])?))
    }

    pub fn flops(&self, input: &[i64]) -> Count {
        let (n, rows) = self.sizes(input)?;
        let affine = u64::from(self.weight.is_some()) + u64::from(self.bias.is_some());
        sum(&[product(&[6, n])?, product(&[2, rows])?, product(&[n, affine])?])
    }

    pub fn macs(&self, input: &[i64]) -> Count {
        product(&[self.sizes(input)?.0, 1 + u64::from(self.weight.is_some())])
    }

    pub fn dmas(&self, input: &[i64]) -> Count {
        let (n, rows) = self.sizes(input)?;
        let params = self.weight.unwrap_or(0).checked_add(self.bias.unwrap_or(0)).ok_or_else(overflow)?;
        let affine = if self.weight.is_some() || self.bias.is_some() { product(&[2, n])? } else { 0 };
        sum(&[product(&[4, n])?, product(&[5, rows])?, 1, params, affine])
    }
}

#[derive(Clone, Debug, Deserialize)]
pub struct RmsNorm {
    /// Elements of one normalized row.
    pub normalized: u64,
    /// Elements of the weight (`None`: no weight).
    pub weight: Option<u64>,
}

impl RmsNorm {
    fn sizes(&self, input: &[i64]) -> Result<(u64, u64), Failure> {
        if self.normalized == 0 {
            return Err(err("RMSNorm requires a nonempty normalized row."));
        }
        let n = numel(input)?;
        Ok((n, n / self.normalized))
    }

    pub fn flops(&self, input: &[i64]) -> Count {
        let (n, rows) = self.sizes(input)?;
        sum(&[product(&[3 + u64::from(self.weight.is_some()), n])?, product(&[2, rows])?])
    }

    pub fn macs(&self, input: &[i64]) -> Count {
        let (n, _) = self.sizes(input)?;
        product(&[n, 1 + u64::from(self.weight.is_some())])
    }

    pub fn dmas(&self, input: &[i64]) -> Count {
        let (n, rows) = self.sizes(input)?;
        let weight = match self.weight {
            Some(w) => sum(&[w, n])?,
            None => 0,
        };
        sum(&[product(&[3, n])?, product(&[2, rows])?, 1, weight])
    }
}

#[cfg(test)]
mod tests {
    use crate::modules::testing::call;
    use serde_json::json;

    #[test]
    fn batch_norm_training_reference_values() {
        // BatchNorm1d(8), training, on (1, 8, 4): N = 32, C = 8.
        // FLOPs 16 + 64 + 64 (affine) + 128 (statistics) + 64 (running updates) = 336.
        let bn = call(json!({"family": "batch_norm", "num_features": 8, "affine": true, "weight": 8, "bias": 8,
                             "running_mean": 8, "running_var": 8, "track_running_stats": true, "training": true,
                             "momentum": true, "input": [1, 8, 4], "output": [1, 8, 4]}));
        assert_eq!(bn.flops(), Ok(336));
        // MACs 64 + 8*3 + 8*7 + 32 = 176; DMAs 32 + (1 + 16 + 16 + 1 + 17) + 32 = 115.
        assert_eq!(bn.macs(), Ok(176));
        assert_eq!(bn.dmas(), Ok(115));
    }

    #[test]
    fn batch_norm_evaluation() {
        // eval with running stats: 2C + 2N + 2N = 16 + 64 + 64; no statistics, no updates.
        let bn = call(json!({"family": "batch_norm", "num_features": 8, "affine": true, "weight": 8, "bias": 8,
                             "running_mean": 8, "running_var": 8, "track_running_stats": true, "training": false,
                             "momentum": true, "input": [1, 8, 4], "output": [1, 8, 4]}));
        assert_eq!(bn.flops(), Ok(144));
        assert_eq!(bn.macs(), Ok(64));
        assert_eq!(bn.dmas(), Ok(32 + 1 + 16 + 16 + 1 + 32));
    }

    #[test]
    fn layer_norm_reference_values() {
        let ln = |w: Option<u64>, b: Option<u64>| {
            call(json!({"family": "layer_norm", "normalized_shape": [4], "weight": w, "bias": b,
                        "exact_type": true, "input": [2, 3, 4], "output": [2, 3, 4]}))
        };
        // N = 24, R = 6: 144 + 12 + 24 per affine tensor.
        assert_eq!(ln(Some(4), Some(4)).flops(), Ok(204));
        assert_eq!(ln(Some(4), None).flops(), Ok(180));
        assert_eq!(ln(None, None).flops(), Ok(156));
        assert_eq!(ln(Some(4), Some(4)).macs(), Ok(48));
        // 96 + 30 + 1 + 8 + 48 = 183.
        assert_eq!(ln(Some(4), Some(4)).dmas(), Ok(183));
        let empty = call(json!({"family": "layer_norm", "normalized_shape": [0], "weight": null, "bias": null,
                                "exact_type": true, "input": [2, 0], "output": [2, 0]}));
        assert!(empty.flops().is_err());
    }

    #[test]
    fn rms_norm_reference_values() {
        let rms = |w: Option<u64>| {
            call(json!({"family": "rms_norm", "normalized": 4, "weight": w, "input": [2, 3, 4], "output": [2, 3, 4]}))
        };
        // N = 24, R = 6: with a weight 96 + 12 = 108; without 72 + 12 = 84.
        assert_eq!(rms(Some(4)).flops(), Ok(108));
        assert_eq!(rms(None).flops(), Ok(84));
        assert_eq!(rms(Some(4)).macs(), Ok(48));
        // 72 + 12 + 1 + 4 + 24 = 113.
        assert_eq!(rms(Some(4)).dmas(), Ok(113));
        let empty =
            call(json!({"family": "rms_norm", "normalized": 0, "weight": null, "input": [2, 0], "output": [2, 0]}));
        assert!(empty.flops().is_err());
    }

    #[test]
    fn group_norm_reference_values() {
        // GroupNorm(2, 4) on [2, 4, 3, 3]: N = 72, R = 4: 432 + 8 + 144 (affine) = 584.
        let gn = call(json!({"family": "group_norm", "groups": 2, "weight": 4, "bias": 4,
                             "input": [2, 4, 3, 3], "output": [2, 4, 3, 3]}));
        assert_eq!(gn.flops(), Ok(584));
        assert_eq!(gn.macs(), Ok(144));
        // 288 + 20 + 1 + 8 + 144 = 461.
        assert_eq!(gn.dmas(), Ok(461));
        assert!(gn.receptive_field().is_err());
    }
}
