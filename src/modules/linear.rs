//! `nn.Linear`. With `rows` = the input's leading elements and `n = out_features * rows`:
//! FLOPs `n * (2*in_features - 1) + n*bias` (in_features products and in_features - 1 adds per
//! output, plus the bias add); MACs `in_features * numel(out)`; DMAs `numel(in) + parameters +
//! numel(out)` (every parameter the module registers is read once).

use serde::Deserialize;

use super::{numel, overflow, positive, product, sum, Count};

#[derive(Clone, Debug, Deserialize)]
pub struct Linear {
    pub in_features: i64,
    pub out_features: i64,
    pub bias: bool,
    /// All parameters registered on the module (recursively).
    pub num_params: u64,
}

impl Linear {
    pub fn flops(&self, input: &[i64]) -> Count {
        let rows = numel(input.get(..input.len().saturating_sub(1)).unwrap_or(&[]))?;
        let n = product(&[positive(self.out_features, "out_features")?, rows])?;
        let per_output = (2 * positive(self.in_features, "in_features")?).saturating_sub(1);
        sum(&[product(&[n, per_output])?, if self.bias { n } else { 0 }])
    }

    pub fn macs(&self, output: &[i64]) -> Count {
        product(&[positive(self.in_features, "in_features")?, numel(output)?])
    }

    pub fn dmas(&self, n_in: u64, n_out: u64) -> Count {
        sum(&[n_in, self.num_params, n_out]).map_err(|_| overflow())
    }
}

#[cfg(test)]
mod tests {
    use crate::modules::testing::call;
    use serde_json::json;

    fn linear(bias: bool, input: &[i64], output: &[i64]) -> crate::modules::Call {
        let params = if bias { 36 } else { 32 };
        call(json!({"family": "linear", "in_features": 8, "out_features": 4, "bias": bias,
                    "num_params": params, "input": input, "output": output}))
    }

    #[test]
    fn torchscan_reference_values() {
        // Linear(8, 4) on (1, 8): 4 outputs x (8 products + 7 adds + 1 bias) = 64.
        assert_eq!(linear(true, &[1, 8], &[1, 4]).flops(), Ok(64));
        assert_eq!(linear(false, &[1, 8], &[1, 4]).flops(), Ok(60));
        assert_eq!(linear(true, &[1, 2, 8], &[1, 2, 4]).flops(), Ok(128));
        assert_eq!(linear(true, &[1, 8], &[1, 4]).macs(), Ok(32));
        assert_eq!(linear(true, &[1, 2, 8], &[1, 2, 4]).macs(), Ok(64));
        // DMAs: 8 inputs + 36 parameters + 4 outputs.
        assert_eq!(linear(true, &[1, 8], &[1, 4]).dmas(), Ok(48));
        assert_eq!(linear(true, &[1, 2, 8], &[1, 2, 4]).dmas(), Ok(60));
    }
}
