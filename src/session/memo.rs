//! The prices of a formula's calls, by their encoded inputs. A formula is a pure function of
//! the inputs' stream (shapes, dtypes, scalar values: `args.rs`), and a workload calls its
//! operators with the same inputs again and again (the steps of training, the repeated blocks
//! of a network): a call whose stream was priced before skips decoding and pricing. Only
//! successful prices are remembered; errors and overflows go the long way every time.
//!
//! Prices are remembered per formula, so they outlive the session: the registry hands them to
//! the next session of the same slot, and a loop that counts every step finds its operators
//! priced from the second step on.

use std::hash::{Hash, Hasher};

/// Streams remembered per formula, in a direct-mapped table (a stream's hash picks its entry;
/// a new stream replaces the one there). Entries keep their storage when replaced: once every
/// entry has held a stream as long as the ones that come, remembering allocates nothing, even
/// for a workload whose shapes never repeat (generation with a growing sequence).
const ENTRIES: usize = 64;
/// An entry is the top bits of a stream's hash (which mix every word: the hash ends with a
/// multiplication).
const ENTRY_SHIFT: u32 = u64::BITS - ENTRIES.trailing_zeros();
const _: () = assert!(ENTRIES.is_power_of_two());

/// Hashes a stream a word at a time (FxHash's multiply-rotate): SipHash, built against
/// adversarial keys, would cost more than pricing most calls; streams are the process's own.
#[derive(Default)]
struct StreamHasher(u64);

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
    /// `ENTRIES` entries once anything was remembered: a stream and its price (`None`: empty).
    table: Vec<(Vec<i64>, Option<u64>)>,
}

fn entry_of(stream: &[i64]) -> usize {
    let mut hasher = StreamHasher::default();
    stream.hash(&mut hasher);
    (hasher.finish() >> ENTRY_SHIFT) as usize
}

impl PriceMemo {
    /// The price of a call whose inputs were `stream`, if it was remembered.
    #[inline]
    pub fn find(&mut self, stream: &[i64]) -> Option<u64> {
        if self.last_flops.is_some() && same(&self.last, stream) {
            return self.last_flops;
        }
        let (remembered, flops) = self.table.get(entry_of(stream))?;
        let flops = (*flops).filter(|_| same(remembered, stream))?;
        self.set_last(stream, flops);
        Some(flops)
    }

    /// Remembers `flops` for `stream`, in place of whatever its entry held.
    pub fn remember(&mut self, stream: &[i64], flops: u64) {
        if self.table.is_empty() {
            self.table.resize_with(ENTRIES, Default::default);
        }
        let (remembered, price) = &mut self.table[entry_of(stream)];
        remembered.clear();
        remembered.extend_from_slice(stream);
        *price = Some(flops);
        self.set_last(stream, flops);
    }

    fn set_last(&mut self, stream: &[i64], flops: u64) {
        self.last.clear();
        self.last.extend_from_slice(stream);
        self.last_flops = Some(flops);
    }
}

/// Whether two streams are equal: streams are a few dozen words, where a call to `memcmp` (what
/// slice equality compiles to) costs more than the comparison. Four words at a time, their
/// differences or-ed together: a hit (the common case, which compares every word) takes a
/// quarter of the branches of a word-by-word loop.
#[inline]
fn same(a: &[i64], b: &[i64]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (a4, b4) = (a.chunks_exact(4), b.chunks_exact(4));
    let (a_rest, b_rest) = (a4.remainder(), b4.remainder());
    for (x, y) in a4.zip(b4) {
        if (x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]) | (x[3] ^ y[3]) != 0 {
            return false;
        }
    }
    a_rest.iter().zip(b_rest).all(|(x, y)| x == y)
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
    fn streams_are_the_same_only_when_every_word_is() {
        for len in 0..11 {
            let a: Vec<i64> = (0..len).map(|i| i * 7 + 1).collect();
            assert!(same(&a, &a.clone()), "length {len}");
            // A difference in any word (in a group of four or in the rest) is found.
            for at in 0..a.len() {
                let mut b = a.clone();
                b[at] ^= 1 << 40;
                assert!(!same(&a, &b), "length {len}, word {at}");
            }
            let mut longer = a.clone();
            longer.push(0);
            assert!(!same(&a, &longer) && !same(&longer, &a), "length {len}");
        }
    }

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
    fn a_new_stream_replaces_the_one_in_its_entry_and_allocates_nothing_once_grown() {
        let mut memo = PriceMemo::default();
        // Streams that share an entry with [2, 0], each longer than the one before at first.
        let colliding: Vec<Vec<i64>> =
            (1..100_000).map(|n| vec![2, n]).filter(|s| entry_of(s) == entry_of(&[2, 0])).take(3).collect();
        memo.remember(&[2, 0], 7);
        assert_eq!(memo.find(&[2, 0]), Some(7));
        memo.remember(&colliding[0], 8);
        // Replaced in the table; and not in front either (the last one found is).
        assert_eq!(memo.find(&[2, 0]), None);
        assert_eq!(memo.find(&colliding[0]), Some(8));
        // Entries keep their storage: replacing with a stream no longer allocates.
        let storage = memo.table[entry_of(&[2, 0])].0.as_ptr();
        memo.remember(&colliding[1], 9);
        assert_eq!(memo.table[entry_of(&[2, 0])].0.as_ptr(), storage);
        assert_eq!(memo.find(&colliding[1]), Some(9));
        // Streams in other entries stay.
        let other = (1..1000).map(|n| vec![3, n]).find(|s| entry_of(s) != entry_of(&[2, 0])).unwrap();
        memo.remember(&other, 10);
        memo.remember(&colliding[2], 11);
        assert_eq!(memo.find(&other), Some(10));
        assert_eq!(memo.table.len(), ENTRIES);
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
