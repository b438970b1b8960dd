//! `nn.Embedding`: a lookup, no arithmetic. FLOPs and MACs 0; DMAs: the indices read, each
//! looked-up row read and the output written (`in + 2 out`). Its receptive field is a token's
//! own index (1, stride 1, padding 0), as a Linear's on token features. An embedding with
//! `max_norm` renormalizes the rows it reads, in place: no formula (reported, not guessed).
//!
//! Rotary position embeddings (Llama's `LlamaRotaryEmbedding` and its copies, default RoPE):
//! with `D` the rotary width and `O = B L D` the elements of each output (`cos`, `sin`): FLOPs
//! `O / 2` (positions times inverse frequencies) `+ 2O` (cos, sin) `+ 2O` (the attention
//! scaling of each); MACs 0; DMAs `O / D` position ids `+ D / 2` frequencies `+ 2O` written.
//! Receptive field: a position's own (1, 1, 0).

use serde::Deserialize;

use super::{overflow, sum, Count, Failure};

#[derive(Clone, Debug, Deserialize)]
pub struct Embedding {
    pub max_norm: bool,
}

impl Embedding {
    pub fn flops(&self) -> Count {
        if self.max_norm {
            return Err(Failure::Unsupported("Embedding with max_norm".into()));
        }
        Ok(0)
    }

    pub fn dmas(&self, n_in: u64, n_out: u64) -> Count {
        if self.max_norm {
            return Err(Failure::Unsupported("Embedding with max_norm".into()));
        }
        sum(&[n_in, n_out.checked_mul(2).ok_or_else(overflow)?])
    }
}

#[derive(Clone, Debug, Deserialize)]
pub struct Rotary {
    /// The rotary width `D` (twice the inverse frequencies).
    pub dim: u64,
}

impl Rotary {
    fn check(&self, n_out: u64) -> Result<(), Failure> {
        if self.dim == 0 || !self.dim.is_multiple_of(2) || !n_out.is_multiple_of(self.dim) {
            return Err(super::err("the rotary output is not a whole number of rows of the rotary width"));
        }
        Ok(())
    }

    pub fn flops(&self, n_out: u64) -> Count {
        self.check(n_out)?;
        sum(&[n_out / 2, n_out.checked_mul(4).ok_or_else(overflow)?])
    }

    pub fn dmas(&self, n_out: u64) -> Count {
        self.check(n_out)?;
        sum(&[n_out / self.dim, self.dim / 2, n_out.checked_mul(2).ok_or_else(overflow)?])
    }
}

#[cfg(test)]
mod tests {
    use crate::modules::testing::call;
    use serde_json::json;

    #[test]
    fn a_lookup_reads_and_writes() {
        let emb = |max_norm: bool| {
            call(json!({"family": "embedding", "max_norm": max_norm, "input": [2, 5], "output": [2, 5, 8]}))
        };
        assert_eq!((emb(false).flops(), emb(false).macs()), (Ok(0), Ok(0)));
        assert_eq!(emb(false).dmas(), Ok(10 + 160));
        assert!(emb(false).receptive_field().is_ok());
        assert!(emb(true).flops().is_err());
    }

    #[test]
    fn rotary_embedding_reference_values() {
        // cos/sin of [1, 16, 16]: O = 256; FLOPs 128 + 1024 = 1152; DMAs 16 + 8 + 512 = 536.
        let rope = |dim: u64| {
            call(json!({"family": "rotary_embedding", "dim": dim, "input": [1, 16, 32], "output": [1, 16, 16]}))
        };
        assert_eq!(rope(16).flops(), Ok(1152));
        assert_eq!(rope(16).macs(), Ok(0));
        assert_eq!(rope(16).dmas(), Ok(536));
        assert!(rope(16).receptive_field().is_ok());
        assert!(rope(5).flops().is_err());
    }
}
