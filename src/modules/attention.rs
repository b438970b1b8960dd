//! `nn.MultiheadAttention`, with `B` batch, `T` query length, `S` source length, `E` embed dim,
//! `H` heads, `D = E/H`:
//!
//! FLOPs (every multiply and add of the dense computation):
//! - input projections: per q/k/v, `rows * E * (2*width - 1 + bias)`;
//! - query scaling `B*H*T*D`; scores `B*H*T*S*(2D - 1)`; one add per score per mask given;
//! - softmax `B*H*T*(5S - 2)` (max, subtract, exp, sum, divide);
//! - dropout while training: 2 per score (1 when p == 1);
//! - weighted values `B*H*T*D*(2S - 1)`; output projection as a Linear;
//! - averaging the returned weights over heads: `B*H*T*S`.
//!
//! MACs (evaluation calls): `E*(numel(q)+numel(k)+numel(v)) + 2*B*T*S*E + B*T*E*E`.
//! DMAs (evaluation calls): inputs + parameters + `7Q + 4J + 10A + 4R` with `Q = B*T*E`,
//! `J = B*S*E`, `A = B*H*T*S`, `R = B*H*T`, plus each mask's size + `2A`, plus `A + B*T*S` when
//! head-averaged weights are returned.

use serde::Deserialize;

use super::{err, numel, positive, product, sum, Count, Failure};

/// The module's own attributes (shared with the transformer layers that contain one).
#[derive(Clone, Debug, Deserialize)]
pub struct Params {
    pub embed_dim: i64,
    pub num_heads: i64,
    pub head_dim: i64,
    pub batch_first: bool,
    pub in_proj_bias: bool,
    pub out_proj_in_features: i64,
    pub out_proj_bias: bool,
    pub bias_kv: bool,
    pub add_zero_attn: bool,
    pub dropout: f64,
    pub training: bool,
}

/// One call: the module's attributes and what the call passed and returned.
#[derive(Clone, Debug, Deserialize)]
pub struct Mha {
    #[serde(flatten)]
    pub params: Params,
    pub query: Vec<i64>,
    pub key: Vec<i64>,
    pub value: Vec<i64>,
    /// Element counts of the masks passed (`None`: not passed).
    pub key_padding_mask: Option<u64>,
    pub attn_mask: Option<u64>,
    pub need_weights: bool,
    pub average_attn_weights: bool,
    /// The call returned head-averaged (3-D) attention weights.
    pub averaged_weights_returned: bool,
}

struct Dims {
    b: u64,
    t: u64,
    s: u64,
    e: u64,
    h: u64,
    d: u64,
}

fn width(shape: &[i64]) -> Result<u64, Failure> {
    positive(*shape.last().unwrap_or(&0), "feature size")
}

fn rows(shape: &[i64]) -> Result<u64, Failure> {
    numel(&shape[..shape.len().saturating_sub(1)])
}

impl Mha {
    fn dims(&self) -> Result<Dims, Failure> {
        if self.query.len() != 3 || self.key.len() != 3 || self.value.len() != 3 {
            return Err(err("MultiheadAttention FLOPs only support batched 3D inputs."));
        }
        if self.params.bias_kv || self.params.add_zero_attn {
            return Err(err("MultiheadAttention FLOPs do not support add_bias_kv or add_zero_attn."));
        }
        let (batch, seq) = if self.params.batch_first { (0, 1) } else { (1, 0) };
        let dims = Dims {
            b: positive(self.query[batch], "batch size")?,
            t: positive(self.query[seq], "query length")?,
            s: positive(self.key[seq], "source length")?,
            e: positive(self.params.embed_dim, "embed_dim")?,
            h: positive(self.params.num_heads, "num_heads")?,
            d: positive(self.params.head_dim, "head_dim")?,
        };
        if dims.t == 0 || dims.s == 0 {
            return Err(err("MultiheadAttention FLOPs require nonempty query and source sequences."));
        }
        Ok(dims)
    }

    fn evaluation_only(&self) -> Result<(), Failure> {
        if self.params.training {
            return Err(err("Transformer MAC/DMA estimates describe evaluation calls only."));
        }
        Ok(())
    }

    pub fn flops(&self) -> Count {
        let Dims { b, t, s, e, h, d } = self.dims()?;
        let bias = u64::from(self.params.in_proj_bias);
        let mut terms = Vec::with_capacity(12);
        for shape in [&self.query, &self.key, &self.value] {
            terms.push(product(&[rows(shape)?, e, (2 * width(shape)? + bias).saturating_sub(1)])?);
        }
        let bht = product(&[b, h, t])?;
        let scores = product(&[bht, s])?;
        terms.push(product(&[bht, d])?);
        terms.push(product(&[scores, (2 * d).saturating_sub(1)])?);
        let masks = u64::from(self.key_padding_mask.is_some()) + u64::from(self.attn_mask.is_some());
        terms.push(product(&[masks, scores])?);
        terms.push(product(&[bht, (5 * s).saturating_sub(2)])?);
        if self.params.training && self.params.dropout > 0.0 {
            terms.push(product(&[if self.params.dropout < 1.0 { 2 } else { 1 }, scores])?);
        }
        terms.push(product(&[bht, d, (2 * s).saturating_sub(1)])?);
        let out_rows = product(&[e, rows(&self.query)?])?;
        let out_in = positive(self.params.out_proj_in_features, "out_proj.in_features")?;
        terms.push(product(&[out_rows, (2 * out_in).saturating_sub(1)])?);
        if self.params.out_proj_bias {
            terms.push(out_rows);
        }
        if self.averaged_weights_returned {
            terms.push(scores);
        }
        sum(&terms)
    }

    pub fn macs(&self) -> Count {
        self.evaluation_only()?;
        let Dims { b, t, s, e, .. } = self.dims()?;
        let inputs = sum(&[numel(&self.query)?, numel(&self.key)?, numel(&self.value)?])?;
        sum(&[product(&[e, inputs])?, product(&[2, b, t, s, e])?, product(&[b, t, e, e])?])
    }

    pub fn dmas(&self) -> Count {
        self.evaluation_only()?;
        let Dims { b, t, s, e, h, .. } = self.dims()?;
        let inputs = sum(&[numel(&self.query)?, numel(&self.key)?, numel(&self.value)?])?;
        let widths = sum(&[width(&self.query)?, width(&self.key)?, width(&self.value)?])?;
        let params = sum(&[
            product(&[e, widths])?,
            product(&[e, e])?,
            if self.params.in_proj_bias { 3 * e } else { 0 },
            if self.params.out_proj_bias { e } else { 0 },
        ])?;
        let (q, j) = (product(&[b, t, e])?, product(&[b, s, e])?);
        let (a, r) = (product(&[b, h, t, s])?, product(&[b, h, t])?);
        let mut terms =
            vec![inputs, params, product(&[7, q])?, product(&[4, j])?, product(&[10, a])?, product(&[4, r])?];
        for mask in [self.key_padding_mask, self.attn_mask].into_iter().flatten() {
            terms.push(sum(&[mask, product(&[2, a])?])?);
        }
        if self.need_weights && self.average_attn_weights {
            terms.push(sum(&[a, product(&[b, t, s])?])?);
        }
        sum(&terms)
    }
}

#[cfg(test)]
mod tests {
    use crate::modules::testing::call;
    use serde_json::{json, Value};

    /// MHA(4, 2, dropout 0), sequence-first, batch 2, query length 3, source length `s`.
    fn mha(bias: bool, s: i64, mask: Value, averaged: bool) -> crate::modules::Call {
        call(json!({"family": "multihead_attention", "embed_dim": 4, "num_heads": 2, "head_dim": 2,
                    "batch_first": false, "in_proj_bias": bias, "out_proj_in_features": 4, "out_proj_bias": bias,
                    "bias_kv": false, "add_zero_attn": false, "dropout": 0.0, "training": false,
                    "query": [3, 2, 4], "key": [s, 2, 4], "value": [s, 2, 4], "key_padding_mask": null,
                    "attn_mask": mask, "need_weights": averaged, "average_attn_weights": true,
                    "averaged_weights_returned": averaged}))
    }

    #[test]
    fn torchscan_reference_values() {
        // Self-attention: projections 3 x 168 + scale 24 + scores 108 + softmax 156 + values 120
        // + output projection 168 = 1080.
        assert_eq!(mha(false, 3, Value::Null, false).flops(), Ok(1080));
        assert_eq!(mha(true, 3, Value::Null, false).flops(), Ok(1176));
        assert_eq!(mha(false, 5, Value::Null, false).flops(), Ok(1592));
        assert_eq!(mha(true, 5, Value::Null, false).flops(), Ok(1720));
        assert_eq!(mha(false, 5, Value::Null, true).flops(), Ok(1652));
        assert_eq!(mha(true, 5, json!(15), false).flops(), Ok(1780));
    }

    #[test]
    fn macs_and_dmas() {
        // MACs: 4 x (24 + 40 + 40) + 2*2*3*5*4 + 2*3*4*4 = 416 + 240 + 96 = 752.
        assert_eq!(mha(false, 5, Value::Null, false).macs(), Ok(752));
        // DMAs: inputs 104 + params 4*12 + 16 = 64, 7Q = 168, 4J = 160, 10A = 600, 4R = 48.
        assert_eq!(mha(false, 5, Value::Null, false).dmas(), Ok(104 + 64 + 168 + 160 + 600 + 48));
    }

    #[test]
    fn unsupported_calls_are_errors() {
        let mut bad = mha(false, 5, Value::Null, false);
        if let crate::modules::Module::MultiheadAttention(m) = &mut bad.module {
            m.params.training = true;
        }
        assert!(bad.macs().is_err());
        assert_eq!(bad.flops(), Ok(1592), "dropout 0 adds nothing in training");
    }
}
