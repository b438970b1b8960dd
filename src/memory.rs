//! Peak-memory accounting from PyTorch's allocator events. The shim's reporter (`cpp/memory.cpp`)
//! forwards each CPU allocation (+bytes) and free (-bytes) of the measured workload here, with the
//! block's address; the tracker keeps the blocks the workload allocated, their live total and its
//! peak (autograd threads report too, hence the lock).
//!
//! PyTorch reports the free of any block it allocated while memory reporting was on, including
//! blocks allocated during an *earlier* measurement and still alive (a gradient, an optimizer
//! state). Such a free is not the workload's: only blocks allocated during this measurement are
//! followed, so `delta_bytes` is the exact peak of bytes the workload itself allocated and held,
//! whatever earlier measurements left behind, and the CPU baseline is 0 (PyTorch has no count of
//! the CPU bytes live before).

use std::collections::HashMap;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

#[derive(Default)]
struct Blocks {
    /// Address -> bytes of each block allocated during the measurement and not yet freed.
    live_blocks: HashMap<usize, u64>,
    live: u64,
    peak: u64,
    allocations: u64,
}

#[derive(Default)]
pub struct MemoryTracker {
    blocks: Mutex<Blocks>,
}

/// What `measure_peak_memory` returns for the CPU (`docs/methodology.md`, Peak memory).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryReport {
    pub device: String,
    pub metric: String,
    pub baseline_bytes: u64,
    pub peak_bytes: u64,
    pub delta_bytes: u64,
}

pub const CPU_METRIC: &str = "pytorch_tensor_bytes";

impl MemoryTracker {
    pub fn new() -> Self {
        Self::default()
    }

    fn blocks(&self) -> std::sync::MutexGuard<'_, Blocks> {
        // Nothing below panics while holding the lock; a poisoned lock still holds exact data.
        self.blocks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One allocator event for the block at `address`: `bytes > 0` allocated, `bytes < 0`
    /// freed. A free of a block allocated before the measurement is not the workload's.
    pub fn record(&self, address: usize, bytes: i64) {
        let mut b = self.blocks();
        if bytes > 0 {
            let size = bytes.unsigned_abs();
            b.allocations += 1;
            // A block reported twice without a free in between (not expected) is replaced.
            if let Some(old) = b.live_blocks.insert(address, size) {
                b.live = b.live.saturating_sub(old);
            }
            b.live = b.live.saturating_add(size);
            b.peak = b.peak.max(b.live);
        } else if bytes < 0 {
            if let Some(size) = b.live_blocks.remove(&address) {
                b.live = b.live.saturating_sub(size);
            }
        }
    }

    pub fn allocations(&self) -> u64 {
        self.blocks().allocations
    }

    pub fn report(&self) -> MemoryReport {
        let peak = self.blocks().peak;
        MemoryReport {
            device: "cpu".to_string(),
            metric: CPU_METRIC.to_string(),
            baseline_bytes: 0,
            peak_bytes: peak,
            delta_bytes: peak,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_of_a_hand_computed_sequence() {
        // allocate 4 MB, 2 MB, free the 4 MB, allocate 1 MB: the peak is 6 MB.
        let t = MemoryTracker::new();
        t.record(0x1000, 4_000_000);
        t.record(0x2000, 2_000_000);
        t.record(0x1000, -4_000_000);
        t.record(0x1000, 1_000_000);
        let r = t.report();
        assert_eq!((r.peak_bytes, r.delta_bytes, r.baseline_bytes), (6_000_000, 6_000_000, 0));
        assert_eq!(t.allocations(), 3);
        assert_eq!(r.metric, "pytorch_tensor_bytes");
    }

    #[test]
    fn nothing_allocated_is_a_zero_peak() {
        let t = MemoryTracker::new();
        t.record(0x1000, 0);
        assert_eq!(t.report().peak_bytes, 0);
    }

    #[test]
    fn frees_of_blocks_from_before_the_measurement_are_not_the_workloads() {
        // An earlier measurement's 4 MB gradient is freed, then the workload allocates 2 MB
        // and a new 4 MB gradient: its own peak is 6 MB, not 2 MB.
        let t = MemoryTracker::new();
        t.record(0x9000, -4_000_000);
        t.record(0x1000, 2_000_000);
        t.record(0x2000, 4_000_000);
        t.record(0x1000, -2_000_000);
        let r = t.report();
        assert_eq!((r.peak_bytes, r.delta_bytes), (6_000_000, 6_000_000));
        assert_eq!(t.blocks().live, 4_000_000);
    }

    #[test]
    fn concurrent_reports_keep_an_exact_total() {
        let t = std::sync::Arc::new(MemoryTracker::new());
        let threads: Vec<_> = (0..4)
            .map(|k: usize| {
                let t = t.clone();
                std::thread::spawn(move || {
                    for i in 0..1000 {
                        // Each thread its own addresses, as the allocator would give them.
                        let address = (i << 8) | k;
                        t.record(address, 10);
                        t.record(address, -10);
                    }
                })
            })
            .collect();
        for th in threads {
            th.join().unwrap();
        }
        assert_eq!(t.blocks().live, 0);
        assert!(t.report().peak_bytes >= 10 && t.report().peak_bytes <= 40);
        assert_eq!(t.allocations(), 4000);
    }
}
