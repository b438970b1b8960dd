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
//! | SiLU (`x sigmoid(x)`) | 5 | in + out |
//! | GELU (erf: scale, erf, add, two multiplies) | 5 | in + out |
//! | GELU, tanh approximation (cube 2, scale and add 2, scale 1, tanh 6, add 1, two multiplies) | 14 | in + out |
//! | QuickGELU (`x sigmoid(1.702 x)`) | 6 | in + out |
//! | ClippedGELU (GELU, then two clamps) | 7 | in + out |
//! | Hardswish (`x relu6(x + 3) / 6`: add, two clamps, divide, multiply) | 5 | in + out |
//! | Hardsigmoid (`relu6(x + 3) / 6`) | 4 | in + out |
//! | Softplus (exp, add, log) | 3 | in + out |
//! | Mish (`x tanh(softplus(x))`: 3 + 6 + 1) | 10 | in + out |
//!
//! The functions inside a formula cost what their own rows say (`tanh` 6, `sigmoid` 4); `erf`,
//! `exp` and `log` cost 1, as in the ELU and Sigmoid rows. MACs are 0. PReLU costs what
//! LeakyReLU costs (its slope is a parameter per channel); its DMAs read its weights.
//!
//! Dropout, as ATen's `_dropout_impl` computes it in training with 0 < p < 1: a noise tensor
//! (one value per element, or per channel for `Dropout1d/2d/3d` and `FeatureAlphaDropout`)
//! rescaled (1 per noise value; alpha dropout 4: the shift and scale of the noise and of the
//! offset), then applied (1 per element; alpha dropout 2: a multiply and the offset's add); the
//! random draws are not arithmetic. p == 1: a fill (1 per element); in evaluation, or with
//! p == 0, nothing. DMAs in + 1 + out.

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
    Silu,
    Gelu,
    GeluTanh,
    QuickGelu,
    ClippedGelu,
    Hardswish,
    Hardsigmoid,
    Softplus,
    Mish,
    Prelu,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Activation {
    pub kind: Kind,
    #[serde(default)]
    pub inplace: bool,
    /// PReLU's slopes (one, or one per channel).
    #[serde(default)]
    pub weights: u64,
}

impl Activation {
    pub fn flops(&self, input: &[i64]) -> Count {
        let per = match self.kind {
            Kind::Relu => 1,
            Kind::Relu6 => 2,
            Kind::Softplus => 3,
            Kind::LeakyRelu | Kind::Prelu | Kind::Sigmoid | Kind::Hardsigmoid => 4,
            Kind::Silu | Kind::Gelu | Kind::Hardswish => 5,
            Kind::Elu | Kind::Tanh | Kind::QuickGelu => 6,
            Kind::ClippedGelu => 7,
            Kind::Mish => 10,
            Kind::GeluTanh => 14,
        };
        product(&[numel(input)?, per])
    }

    pub fn dmas(&self, n_in: u64, n_out: u64) -> Count {
        let out = if self.inplace { 0 } else { n_out };
        match self.kind {
            Kind::Relu | Kind::Relu6 => sum(&[n_in, out]),
            Kind::Elu | Kind::LeakyRelu => sum(&[n_in, 1, out]),
            Kind::Prelu => sum(&[n_in, self.weights, out]),
            Kind::Tanh => sum(&[n_in.checked_mul(2).ok_or_else(overflow)?, n_out]),
            Kind::Sigmoid
            | Kind::Silu
            | Kind::Gelu
            | Kind::GeluTanh
            | Kind::QuickGelu
            | Kind::ClippedGelu
            | Kind::Hardswish
            | Kind::Hardsigmoid
            | Kind::Softplus
            | Kind::Mish => sum(&[n_in, n_out]),
        }
    }
}

/// Modules that only move or relabel elements (padding, pixel shuffles, nearest upsampling,
/// `Unflatten`): 0 FLOPs and MACs; DMAs `in + out`. The receptive field is pointwise for a
/// reshape, `(1, 1, p)` for a symmetric padding `p`, and not applicable where positions move
/// (shuffles, upsampling, asymmetric padding).
#[derive(Clone, Debug, Deserialize)]
pub struct Movement {
    /// `None`: positions move (no receptive field); `Some(p)`: pointwise with padding `p`.
    pub padding: Option<i64>,
}

/// `nn.Softmax`/`LogSoftmax`/`Softmin`: per element the running maximum, a difference, an
/// exponential, the sum and the division (5, the operator formula's); DMAs `in + out`. The
/// normalization mixes the positions along its dimension: no receptive field.
#[derive(Clone, Debug, Deserialize)]
pub struct Softmax {
    /// `Softmin`: the softmax of the negated input (1 more per element).
    #[serde(default)]
    pub negate: bool,
}

impl Softmax {
    pub fn flops(&self, input: &[i64]) -> Count {
        product(&[numel(input)?, if self.negate { 6 } else { 5 }])
    }
}

#[derive(Clone, Debug, Deserialize)]
pub struct Dropout {
    pub p: f64,
    pub training: bool,
    #[serde(default)]
    pub inplace: bool,
    /// Channel-wise dropout: the spatial rank its noise is constant over (`Dropout2d`: 2); 0 for
    /// element-wise dropout.
    #[serde(default)]
    pub spatial: usize,
    /// `FeatureAlphaDropout`: the noise is per `[N, C]`, the input's first 2 dimensions, whatever
    /// its rank (0: see `spatial`).
    #[serde(default)]
    pub leading: usize,
    /// Alpha dropout (`AlphaDropout`, `FeatureAlphaDropout`): the noise also shifts the output.
    #[serde(default)]
    pub alpha: bool,
}

impl Dropout {
    pub fn flops(&self, input: &[i64]) -> Count {
        let n = numel(input)?;
        if !self.training || self.p <= 0.0 {
            return Ok(0);
        }
        if self.p >= 1.0 {
            return Ok(n);
        }
        // The noise: one value per element, or per channel (the dimensions before the spatial ones).
        let noise = match (self.leading, self.spatial) {
            (0, 0) => n,
            (0, k) => numel(&input[..input.len().saturating_sub(k)])?,
            (k, _) => numel(&input[..k.min(input.len())])?,
        };
        let (per_noise, per_element) = if self.alpha { (4, 2) } else { (1, 1) };
        sum(&[product(&[noise, per_noise])?, product(&[n, per_element])?])
    }

    pub fn dmas(&self, n_in: u64, n_out: u64) -> Count {
        sum(&[n_in, 1, if self.inplace { 0 } else { n_out }])
    }
}

/// `nn.Upsample` (and `UpsamplingBilinear2d`) in its interpolating modes: `taps` input values
/// weighted per output element (linear 2, bilinear 4, bicubic 16, trilinear 8), 1 FLOP and 1
/// multiply-accumulate each, as the operator formulas count them (fvcore's convention); DMAs
/// `in + out`. Resampling mixes neighbouring positions by fractional weights: no receptive field
/// is stated.
#[derive(Clone, Debug, Deserialize)]
pub struct Interpolate {
    pub taps: u64,
}

impl Interpolate {
    pub fn flops(&self, output: &[i64]) -> Count {
        product(&[numel(output)?, self.taps])
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
        // The transformer and mobile activations, on 8 elements.
        let kinds =
            ["silu", "gelu", "gelu_tanh", "quick_gelu", "clipped_gelu", "hardswish", "hardsigmoid", "softplus", "mish"];
        let flops: Vec<_> = kinds.iter().map(|k| act(k, false).flops().unwrap()).collect();
        assert_eq!(flops, vec![40, 40, 112, 48, 56, 40, 32, 24, 80]);
        assert!(kinds.iter().all(|k| act(k, false).dmas() == Ok(16)));
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

    #[test]
    fn movement_and_softmax() {
        let moved = |padding: serde_json::Value| {
            call(json!({"family": "movement", "padding": padding, "input": [1, 2, 4, 4], "output": [1, 2, 6, 6]}))
        };
        assert_eq!(
            (moved(json!(1)).flops(), moved(json!(1)).macs(), moved(json!(1)).dmas()),
            (Ok(0), Ok(0), Ok(32 + 72))
        );
        assert!(moved(json!(1)).receptive_field().is_ok());
        assert!(moved(json!(null)).receptive_field().is_err());
        let softmax = call(json!({"family": "softmax", "input": [2, 5], "output": [2, 5]}));
        assert_eq!((softmax.flops(), softmax.macs(), softmax.dmas()), (Ok(50), Ok(0), Ok(20)));
        // Softmin: the negation, 1 more per element.
        let softmin = call(json!({"family": "softmax", "negate": true, "input": [2, 5], "output": [2, 5]}));
        assert_eq!(softmin.flops(), Ok(60));
    }

    #[test]
    fn channel_and_alpha_dropout_as_aten_computes_them() {
        // The same counts as the operators ATen dispatches in training (measured: Dropout2d's
        // div_ 8 and mul 128; AlphaDropout's 768; FeatureAlphaDropout's 176; Dropout1d's 28).
        let d = |extra: serde_json::Value, shape: serde_json::Value| {
            let mut descriptor =
                json!({"family": "dropout", "p": 0.5, "training": true, "input": shape, "output": shape});
            descriptor.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            call(descriptor)
        };
        // Dropout2d on [2,4,4,4]: 8 channel noises rescaled, 128 elements multiplied.
        assert_eq!(d(json!({"spatial": 2}), json!([2, 4, 4, 4])).flops(), Ok(8 + 128));
        // Dropout1d on an unbatched [4,6]: 4 channels, 24 elements.
        assert_eq!(d(json!({"spatial": 1}), json!([4, 6])).flops(), Ok(4 + 24));
        // AlphaDropout on [2,4,4,4]: 4 per noise value (one per element), 2 per element.
        assert_eq!(d(json!({"alpha": true}), json!([2, 4, 4, 4])).flops(), Ok(128 * 4 + 128 * 2));
        // FeatureAlphaDropout on [2,4,3,3]: noise per [N, C] (8) x 4, 72 elements x 2.
        assert_eq!(d(json!({"alpha": true, "leading": 2}), json!([2, 4, 3, 3])).flops(), Ok(8 * 4 + 72 * 2));
        // Evaluation: nothing; MACs are 0 and the receptive field pointwise, as for Dropout.
        let eval = call(
            json!({"family": "dropout", "p": 0.5, "training": false, "spatial": 2, "input": [2, 4, 4, 4], "output": [2, 4, 4, 4]}),
        );
        assert_eq!((eval.flops(), eval.macs()), (Ok(0), Ok(0)));
    }

    #[test]
    fn prelu_and_interpolation() {
        let prelu =
            call(json!({"family": "activation", "kind": "prelu", "weights": 4, "input": [2, 4], "output": [2, 4]}));
        // As LeakyReLU: 4 per element; DMAs read the input, the 4 slopes and write the output.
        assert_eq!((prelu.flops(), prelu.macs(), prelu.dmas()), (Ok(32), Ok(0), Ok(8 + 4 + 8)));
        // Bilinear upsampling to [1,1,4,4]: 4 taps per output element.
        let up = call(json!({"family": "interpolate", "taps": 4, "input": [1, 1, 2, 2], "output": [1, 1, 4, 4]}));
        assert_eq!((up.flops(), up.macs(), up.dmas()), (Ok(64), Ok(64), Ok(4 + 16)));
        assert!(matches!(up.receptive_field(), Err(crate::modules::Failure::NotApplicable(_))));
    }
}
