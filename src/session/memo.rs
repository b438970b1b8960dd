//! The prices of a formula's calls, by their encoded inputs. A formula is a pure function of
//! the inputs' stream (shapes, dtypes, scalar values: `args.rs`), and a workload calls its
//! operators with the same inputs again and again (the steps of training, the repeated blocks
//! of a network): a call whose stream was priced before skips decoding and pricing. Only
//! successful prices are remembered; errors and overflows go the long way every time.
//!
//! Prices are remembered per formula, so they outlive the session: the registry hands them to
//! the next session of the same slot, and a loop that counts every step finds its operators
//! priced from the second step on.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Streams remembered per formula; a full memo starts afresh (a workload with more distinct
/// calls of one formula than this prices them as if there were no memo, plus the insertion).
const CAPACITY: usize = 4096;

/// Hashes a stream a word at a time (FxHash's multiply-rotate): SipHash, built against
/// adversarial keys, would cost more than pricing most calls; streams are the process's own.
#[derive(Default)]
pub struct StreamHasher(u64);

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl StreamHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for StreamHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            self.add(u64::from_le_bytes(word.try_into().unwrap_or([0; 8])));
        }
        for &byte in words.remainder() {
            self.add(u64::from(byte));
        }
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
}

/// One formula's remembered prices, the last one found in front (a loop of one operator
/// compares one stream and hashes none).
#[derive(Debug, Default)]
pub struct PriceMemo {
    last: Vec<i64>,
    last_flops: Option<u64>,
    prices: HashMap<Box<[i64]>, u64, BuildHasherDefault<StreamHasher>>,
}

impl PriceMemo {
    /// The price of a call whose inputs were `stream`, if it was remembered.
    #[inline]
    pub fn find(&mut self, stream: &[i64]) -> Option<u64> {
        if self.last_flops.is_some() && same(&self.last, stream) {
            return self.last_flops;
        }
        let flops = *self.prices.get(stream)?;
        self.set_last(stream, flops);
        Some(flops)
    }

    /// Remembers `flops` for `stream` (allocates once per new stream).
    pub fn remember(&mut self, stream: &[i64], flops: u64) {
        if self.prices.len() >= CAPACITY {
            self.prices.clear();
        }
        self.prices.insert(stream.into(), flops);
        self.set_last(stream, flops);
    }

    fn set_last(&mut self, stream: &[i64], flops: u64) {
        self.last.clear();
        self.last.extend_from_slice(stream);
        self.last_flops = Some(flops);
    }
}

/// Whether two streams are equal, word by word: streams are a few dozen words that usually
/// differ early if at all, where a call to `memcmp` (what slice equality compiles to) costs
/// more than the comparison.
#[inline]
fn same(a: &[i64], b: &[i64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// The memos of every formula, made on first use.
#[derive(Debug, Default)]
pub struct PriceMemos {
    by_formula: Vec<PriceMemo>,
}

impl PriceMemos {
    /// The memo of formula `index` (into `formulas::FORMULAS`).
    #[inline]
    pub fn of(&mut self, index: usize) -> &mut PriceMemo {
        if index >= self.by_formula.len() {
            self.by_formula.resize_with(crate::formulas::FORMULAS.len().max(index + 1), PriceMemo::default);
        }
        &mut self.by_formula[index]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remembered_stream_is_found_and_a_different_one_is_not() {
        let mut memo = PriceMemo::default();
        memo.remember(&[1, 6, 2, 4, 4], 16);
        assert_eq!(memo.find(&[1, 6, 2, 4, 4]), Some(16));
        // Same length, one size different; a prefix; a longer stream.
        assert_eq!(memo.find(&[1, 6, 2, 4, 5]), None);
        assert_eq!(memo.find(&[1, 6, 2, 4]), None);
        assert_eq!(memo.find(&[1, 6, 2, 4, 4, 0]), None);
    }

    #[test]
    fn a_full_memo_starts_afresh() {
        let mut memo = PriceMemo::default();
        for n in 0..CAPACITY as i64 {
            memo.remember(&[2, n], n as u64);
        }
        assert_eq!(memo.find(&[2, 7]), Some(7));
        memo.remember(&[2, -1], 99);
        assert_eq!(memo.find(&[2, 7]), None);
        assert_eq!(memo.find(&[2, -1]), Some(99));
        assert_eq!(memo.prices.len(), 1);
        // The one found last is in front, and agrees with the map.
        memo.remember(&[2, 5], 5);
        assert_eq!(memo.find(&[2, -1]), Some(99));
        assert_eq!(memo.last, vec![2, -1]);
        assert_eq!(memo.find(&[2, 5]), Some(5));
    }

    #[test]
    fn memos_are_per_formula() {
        let mut memos = PriceMemos::default();
        memos.of(3).remember(&[1, 6, 1, 8], 8);
        assert_eq!(memos.of(3).find(&[1, 6, 1, 8]), Some(8));
        assert_eq!(memos.of(4).find(&[1, 6, 1, 8]), None);
    }

    #[test]
    fn the_hash_reads_every_word() {
        let hash = |words: &[i64]| {
            let mut h = StreamHasher::default();
            std::hash::Hash::hash(words, &mut h);
            h.finish()
        };
        assert_ne!(hash(&[1, 6, 2, 4, 4]), hash(&[1, 6, 2, 4, 5]));
        assert_ne!(hash(&[1, 6, 2, 4, 4]), hash(&[1, 6, 2, 5, 4]));
        assert_ne!(hash(&[0]), hash(&[0, 0]));
    }
}
