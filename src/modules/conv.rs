//! Convolutions. With `terms = prod(kernel) * in_channels/groups` (products per output):
//! - FLOPs `numel(out) * (2*terms - 1 + bias)`: every product of the dense, zero-padded
//!   window, the adds between them, and the bias add;
//! - MACs `numel(out) * terms`;
//! - DMAs `in_channels * prod(kernel) * numel(out) / groups + parameters + numel(out)`;
//! - receptive field `(dilation*(k-1) + 1, stride, padding)` of the first spatial dimension.
//!
//! Transposed: each input element scatters into `out_channels/groups * prod(kernel)` outputs:
//! `products = numel(in) * out_channels/groups * prod(kernel)`; FLOPs `2*products +
//! numel(out)*bias`, MACs `products`, DMAs `5*ndim + the convolution DMAs`; receptive field
//! `(-k, 1/stride, 0)` (a negative field marks upsampling, as torchscan 0.2).

use serde::Deserialize;

use super::{err, numel, overflow, positive, product, sum, Count, Rf, RfNumber};

/// `padding` is a list of ints, or `'same'`/`'valid'`.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Padding {
    Sizes(Vec<i64>),
    Mode(String),
}

#[derive(Clone, Debug, Deserialize)]
pub struct Conv {
    pub in_channels: i64,
    pub groups: i64,
    pub kernel_size: Vec<i64>,
    pub stride: Vec<i64>,
    pub padding: Padding,
    pub dilation: Vec<i64>,
    pub bias: bool,
    pub num_params: u64,
}

fn kernel_volume(kernel: &[i64]) -> Count {
    kernel.iter().try_fold(1u64, |acc, &k| acc.checked_mul(positive(k, "kernel_size")?).ok_or_else(overflow))
}

fn per_group(channels: i64, groups: i64) -> Count {
    if groups <= 0 {
        return Err(err("groups must be positive"));
    }
    positive(channels / groups, "channels")
}

fn first(list: &[i64], what: &str) -> Result<i64, super::Failure> {
    list.first().copied().ok_or_else(|| err(format!("{what} is empty")))
}

impl Conv {
    fn terms(&self) -> Count {
        product(&[kernel_volume(&self.kernel_size)?, per_group(self.in_channels, self.groups)?])
    }

    pub fn flops(&self, output: &[i64]) -> Count {
        let per_output = (2 * self.terms()?).saturating_sub(1) + u64::from(self.bias);
        product(&[numel(output)?, per_output])
    }

    pub fn macs(&self, output: &[i64]) -> Count {
        product(&[numel(output)?, self.terms()?])
    }

    pub fn dmas(&self, n_out: u64) -> Count {
        conv_dmas(self.in_channels, &self.kernel_size, self.groups, self.num_params, n_out)
    }

    pub fn receptive_field(&self) -> Rf {
        let k = first(&self.kernel_size, "kernel_size")?;
        let d = first(&self.dilation, "dilation")?;
        let padding = match &self.padding {
            Padding::Sizes(p) => RfNumber::Int(first(p, "padding")?),
            Padding::Mode(mode) => return Err(err(format!("receptive field of padding={mode:?} is not defined"))),
        };
        Ok([RfNumber::Int(d * (k - 1) + 1), RfNumber::Int(first(&self.stride, "stride")?), padding])
    }
}

fn conv_dmas(in_channels: i64, kernel: &[i64], groups: i64, num_params: u64, n_out: u64) -> Count {
    if groups <= 0 {
        return Err(err("groups must be positive"));
    }
    let reads = product(&[positive(in_channels, "in_channels")?, kernel_volume(kernel)?, n_out])? / groups as u64;
    sum(&[reads, num_params, n_out])
}

#[derive(Clone, Debug, Deserialize)]
pub struct ConvTranspose {
    pub in_channels: i64,
    pub out_channels: i64,
    pub groups: i64,
    pub kernel_size: Vec<i64>,
    pub stride: Vec<i64>,
    pub bias: bool,
    pub num_params: u64,
}

impl ConvTranspose {
    fn products(&self, input: &[i64]) -> Count {
        product(&[numel(input)?, per_group(self.out_channels, self.groups)?, kernel_volume(&self.kernel_size)?])
    }

    pub fn flops(&self, input: &[i64], output: &[i64]) -> Count {
        let bias = if self.bias { numel(output)? } else { 0 };
        sum(&[self.products(input)?.checked_mul(2).ok_or_else(overflow)?, bias])
    }

    pub fn macs(&self, input: &[i64]) -> Count {
        self.products(input)
    }

    pub fn dmas(&self, n_out: u64) -> Count {
        let conv = conv_dmas(self.in_channels, &self.kernel_size, self.groups, self.num_params, n_out)?;
        sum(&[5 * self.kernel_size.len() as u64, conv])
    }

    pub fn receptive_field(&self) -> Rf {
        let k = first(&self.kernel_size, "kernel_size")?;
        let s = first(&self.stride, "stride")?;
        if s <= 0 {
            return Err(err("stride must be positive"));
        }
        Ok([RfNumber::Int(-k), RfNumber::Float(1.0 / s as f64), RfNumber::Float(0.0)])
    }
}

#[cfg(test)]
mod tests {
    use crate::modules::testing::call;
    use crate::modules::RfNumber::{Float, Int};
    use serde_json::json;

    fn conv2d(dilation: i64) -> crate::modules::Call {
        call(json!({"family": "conv", "in_channels": 3, "groups": 1, "kernel_size": [3, 3], "stride": [1, 1],
                    "padding": [0, 0], "dilation": [dilation, dilation], "bias": true, "num_params": 224,
                    "input": [1, 3, 32, 32], "output": [1, 8, 30, 30]}))
    }

    fn conv_t() -> crate::modules::Call {
        call(json!({"family": "conv_transpose", "in_channels": 3, "out_channels": 8, "groups": 1,
                    "kernel_size": [3, 3], "stride": [1, 1], "bias": true, "num_params": 224,
                    "input": [1, 3, 32, 32], "output": [1, 8, 34, 34]}))
    }

    #[test]
    fn conv2d_reference_values() {
        // 7200 outputs x (2*27 - 1 + 1) = 388_800; MACs 7200 x 27; DMAs 194_400 + 224 + 7200.
        let c = conv2d(1);
        assert_eq!((c.flops(), c.macs(), c.dmas()), (Ok(388_800), Ok(194_400), Ok(201_824)));
        assert_eq!(c.receptive_field(), Ok([Int(3), Int(1), Int(0)]));
        assert_eq!(conv2d(2).receptive_field(), Ok([Int(5), Int(1), Int(0)]));
    }

    #[test]
    fn transposed_reference_values() {
        // products = 3072 inputs x 8 x 9 = 221_184; FLOPs 2 x that + 9248 bias adds.
        let c = conv_t();
        assert_eq!((c.flops(), c.macs(), c.dmas()), (Ok(451_616), Ok(221_184), Ok(259_178)));
        assert_eq!(c.receptive_field(), Ok([Int(-3), Float(1.0), Float(0.0)]));
    }

    #[test]
    fn grouped_transposed_1d() {
        // ConvTranspose1d(4, 6, 3, stride 2, groups 2) on (2,4,3) -> (2,6,6): products
        // 24 x 3 x 3 = 216; FLOPs 432 + 72 bias adds = 504.
        let c = call(json!({"family": "conv_transpose", "in_channels": 4, "out_channels": 6, "groups": 2,
                            "kernel_size": [3], "stride": [2], "bias": true, "num_params": 42,
                            "input": [2, 4, 3], "output": [2, 6, 6]}));
        assert_eq!((c.flops(), c.macs()), (Ok(504), Ok(216)));
    }
}
