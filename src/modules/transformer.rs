//! A root `nn.Transformer` (torchscan 0.2 prices it as one metric leaf), FLOPs only: its MACs,
//! DMAs and receptive field are not defined (reported as unsupported, never as zero).
//!
//! With `N` the elements of the sequence a block runs on:
//! - encoder layer: self-attention + residual add `N` + LayerNorm + feed-forward + residual
//!   add `N` + LayerNorm (+ dropout while training);
//! - decoder layer: self-attention, cross-attention over the memory, feed-forward, each followed
//!   by a residual add and a LayerNorm;
//! - feed-forward: `linear1`, the activation (ReLU 1, exact GELU 5 per hidden element),
//!   dropout while training, `linear2`;
//! - stacks add their final LayerNorm; the decoder's memory has the source's shape, as
//!   torchscan 0.2 counts it.

use serde::Deserialize;

use super::attention::{Mha, Params as Attention};
use super::{err, linear::Linear, norm::LayerNorm, numel, product, sum, Count};

#[derive(Clone, Debug, Deserialize)]
pub struct Dropout {
    pub p: f64,
    pub training: bool,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Layer {
    pub self_attn: Attention,
    /// Decoder layers only.
    #[serde(default)]
    pub multihead_attn: Option<Attention>,
    pub linear1: Linear,
    pub linear2: Linear,
    /// `relu`, `gelu`, or anything else (not priced).
    pub activation: String,
    pub norms: Vec<LayerNorm>,
    pub dropout: Dropout,
    /// dropout1, dropout2 (and dropout3 for decoders).
    pub residual_dropouts: Vec<Dropout>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Transformer {
    pub encoder_layers: Vec<Layer>,
    pub encoder_norm: Option<LayerNorm>,
    pub decoder_layers: Vec<Layer>,
    pub decoder_norm: Option<LayerNorm>,
    pub src: Vec<i64>,
    pub tgt: Vec<i64>,
    /// Which of src_mask, tgt_mask, memory_mask, src_key_padding_mask, tgt_key_padding_mask,
    /// memory_key_padding_mask were passed.
    pub masks: [bool; 6],
}

fn dropout(d: &Dropout, elements: u64) -> Count {
    Ok(match (d.training, d.p) {
        (true, p) if p > 0.0 && p < 1.0 => product(&[2, elements])?,
        (true, p) if p >= 1.0 => elements,
        _ => 0,
    })
}

fn attention(a: &Attention, query: &[i64], memory: &[i64], padding_mask: bool, attn_mask: bool) -> Count {
    Mha {
        params: a.clone(),
        query: query.to_vec(),
        key: memory.to_vec(),
        value: memory.to_vec(),
        key_padding_mask: padding_mask.then_some(1),
        attn_mask: attn_mask.then_some(1),
        need_weights: false,
        average_attn_weights: false,
        averaged_weights_returned: false,
    }
    .flops()
}

fn feed_forward(layer: &Layer, x: &[i64]) -> Count {
    let rows = numel(&x[..x.len().saturating_sub(1)])?;
    let hidden = product(&[rows, u64::try_from(layer.linear1.out_features).map_err(|_| err("negative width"))?])?;
    let activation = match layer.activation.as_str() {
        "relu" => hidden,
        "gelu" => product(&[5, hidden])?,
        _ => return Err(err("Transformer FLOPs support only native ReLU or GELU (exact) activations.")),
    };
    sum(&[layer.linear1.flops(x)?, activation, dropout(&layer.dropout, hidden)?, layer.linear2.flops(x)?])
}

/// `(attention, residual dropout, norm)` blocks, then the feed-forward block.
fn layer(layer: &Layer, x: &[i64], attentions: &[Count]) -> Count {
    let n = numel(x)?;
    let blocks = attentions.len() + 1;
    if layer.norms.len() != blocks || layer.residual_dropouts.len() != blocks {
        return Err(err("Transformer FLOPs require one LayerNorm and one dropout per block."));
    }
    let mut terms = Vec::with_capacity(blocks * 4);
    for (i, block) in attentions.iter().cloned().chain(std::iter::once(feed_forward(layer, x))).enumerate() {
        terms.push(block?);
        terms.push(dropout(&layer.residual_dropouts[i], n)?);
        terms.push(n);
        terms.push(layer.norms[i].flops(x)?);
    }
    sum(&terms)
}

impl Transformer {
    pub fn flops(&self) -> Count {
        let [src_mask, tgt_mask, memory_mask, src_kpm, tgt_kpm, memory_kpm] = self.masks;
        let (src, tgt) = (self.src.as_slice(), self.tgt.as_slice());
        let mut terms = Vec::new();
        for l in &self.encoder_layers {
            terms.push(layer(l, src, &[attention(&l.self_attn, src, src, src_kpm, src_mask)])?);
        }
        if let Some(norm) = &self.encoder_norm {
            terms.push(norm.flops(src)?);
        }
        for l in &self.decoder_layers {
            let cross = l.multihead_attn.as_ref().ok_or_else(|| err("a decoder layer needs its cross-attention"))?;
            let blocks = [
                attention(&l.self_attn, tgt, tgt, tgt_kpm, tgt_mask),
                attention(cross, tgt, src, memory_kpm, memory_mask),
            ];
            terms.push(layer(l, tgt, &blocks)?);
        }
        if let Some(norm) = &self.decoder_norm {
            terms.push(norm.flops(tgt)?);
        }
        sum(&terms)
    }
}

#[cfg(test)]
mod tests {
    use crate::modules::testing::call;
    use serde_json::{json, Value};

    fn attention() -> Value {
        json!({"embed_dim": 4, "num_heads": 2, "head_dim": 2, "batch_first": true, "in_proj_bias": true,
               "out_proj_in_features": 4, "out_proj_bias": true, "bias_kv": false, "add_zero_attn": false,
               "dropout": 0.0, "training": false})
    }

    fn layer(decoder: bool) -> Value {
        let blocks = if decoder { 3 } else { 2 };
        let norm = json!({"normalized_shape": [4], "weight": 4, "bias": 4, "exact_type": true});
        let drop = json!({"p": 0.0, "training": false});
        json!({
            "self_attn": attention(), "multihead_attn": if decoder { attention() } else { Value::Null },
            "linear1": {"in_features": 4, "out_features": 8, "bias": true, "num_params": 40},
            "linear2": {"in_features": 8, "out_features": 4, "bias": true, "num_params": 36},
            "activation": "relu", "norms": vec![norm; blocks], "dropout": drop, "residual_dropouts": vec![drop; blocks],
        })
    }

    fn transformer(masks: [bool; 6]) -> crate::modules::Call {
        let norm = json!({"normalized_shape": [4], "weight": 4, "bias": 4, "exact_type": true});
        call(json!({"family": "transformer", "encoder_layers": [layer(false)], "encoder_norm": norm,
                    "decoder_layers": [layer(true)], "decoder_norm": norm, "src": [1, 3, 4], "tgt": [1, 2, 4],
                    "masks": masks, "input": [1, 3, 4], "output": [1, 2, 4]}))
    }

    #[test]
    fn torchscan_reference_values() {
        // Transformer(d_model=4, nhead=2, 1+1 layers, dim_feedforward=8, dropout=0), src (1,3,4),
        // tgt (1,2,4): encoder layer 1224 + its norm 102 + decoder layer 1300 + its norm 68.
        assert_eq!(transformer([false; 6]).flops(), Ok(2694));
        // Six masks add one add per attention score: 18 + 4 + 6 per mask pair... = 2770.
        assert_eq!(transformer([true; 6]).flops(), Ok(2770));
        assert!(matches!(transformer([false; 6]).macs(), Err(crate::modules::Failure::Unsupported(_))));
    }
}
