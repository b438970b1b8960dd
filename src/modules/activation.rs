//! Activations and `nn.Dropout`, per input element:
//!
//! | module | FLOPs | DMAs |
//! | --- | --- | --- |
//! | ReLU | 1 (compare) | in + out (out skipped in place) |
//! | ReLU6 | 2 (two clamps) | in + out |
//! | ELU | 6 | in + 1 (alpha) + out |
//! | LeakyReLU | 4 | in + 1 (slope) + out |
//! | Tanh | 6 | 2 in + out |
//! | Sigmoid | 4 | in + out |
//!
//! MACs are 0. Dropout: in training with 0 < p < 1, a mask compare and a rescale (2 per
//! element), p == 1 a fill (1); in evaluation, or with p == 0, nothing. DMAs in + 1 + out.

use serde::Deserialize;

use super::{numel, overflow, product, sum, Count};

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Relu,
    Relu6,
    Elu,
    LeakyRelu,
    Tanh,
    Sigmoid,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Activation {
    pub kind: Kind,
    #[serde(default)]
    pub inplace: bool,
}

impl Activation {
    pub fn flops(&self, input: &[i64]) -> Count {
        let per = match self.kind {
            Kind::Relu => 1,
            Kind::Relu6 => 2,
            Kind::Elu | Kind::Tanh => 6,
            Kind::LeakyRelu | Kind::Sigmoid => 4,
        };
        product(&[numel(input)?, per])
    }

    pub fn dmas(&self, n_in: u64, n_out: u64) -> Count {
        let out = if self.inplace { 0 } else { n_out };
        match self.kind {
            Kind::Relu | Kind::Relu6 => sum(&[n_in, out]),
            Kind::Elu | Kind::LeakyRelu => sum(&[n_in, 1, out]),
            Kind::Tanh => sum(&[n_in.checked_mul(2).ok_or_else(overflow)?, n_out]),
            Kind::Sigmoid => sum(&[n_in, n_out]),
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
pub struct Dropout {
    pub p: f64,
    pub training: bool,
    #[serde(default)]
    pub inplace: bool,
}

impl Dropout {
    pub fn flops(&self, input: &[i64]) -> Count {
        let n = numel(input)?;
        Ok(match (self.training, self.p) {
            (true, p) if p > 0.0 && p < 1.0 => n.checked_mul(2).ok_or_else(overflow)?,
            (true, p) if p >= 1.0 => n,
            _ => 0,
        })
    }

    pub fn dmas(&self, n_in: u64, n_out: u64) -> Count {
        sum(&[n_in, 1, if self.inplace { 0 } else { n_out }])
    }
}

#[cfg(test)]
mod tests {
    use crate::modules::testing::call;
    use serde_json::json;

    fn act(kind: &str, inplace: bool) -> crate::modules::Call {
        call(json!({"family": "activation", "kind": kind, "inplace": inplace, "input": [1, 8], "output": [1, 8]}))
    }

    #[test]
    fn torchscan_reference_values() {
        let flops: Vec<_> = ["relu", "elu", "leaky_relu", "relu6", "tanh", "sigmoid"]
            .iter()
            .map(|k| act(k, false).flops().unwrap())
            .collect();
        assert_eq!(flops, vec![8, 48, 32, 16, 48, 32]);
        assert_eq!(act("relu", false).dmas(), Ok(16));
        assert_eq!(act("relu", true).dmas(), Ok(8));
        assert_eq!(act("elu", false).dmas(), Ok(17));
        assert_eq!(act("tanh", false).dmas(), Ok(24));
        assert_eq!(act("sigmoid", false).dmas(), Ok(16));
        assert_eq!(act("relu", false).macs(), Ok(0));
    }

    #[test]
    fn dropout() {
        let d = |p: f64, training: bool| {
            call(json!({"family": "dropout", "p": p, "training": training, "input": [1, 8], "output": [1, 8]}))
        };
        assert_eq!(d(0.5, true).flops(), Ok(16));
        assert_eq!(d(1.0, true).flops(), Ok(8));
        assert_eq!(d(0.0, true).flops(), Ok(0));
        assert_eq!(d(0.5, false).flops(), Ok(0));
        assert_eq!(d(0.5, true).dmas(), Ok(17));
    }
}
