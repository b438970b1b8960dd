//! Peak-memory accounting from PyTorch's allocator events. The shim's reporter (`cpp/memory.cpp`)
//! forwards each CPU allocation (+bytes) and free (-bytes) of the measured workload here; the
//! tracker keeps the live total and its peak with atomics (autograd threads report too).
//!
//! PyTorch only reports the free of a block that was allocated while reporting was on, so the
//! live total starts at zero: `delta_bytes` is the exact peak of bytes the workload itself held
//! above the start, and the CPU baseline is 0 (PyTorch has no count of CPU bytes live before).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

#[derive(Default)]
pub struct MemoryTracker {
    live: AtomicI64,
    peak: AtomicI64,
    allocations: AtomicU64,
}

/// What `measure_peak_memory` returns for the CPU (`contract.md`, Peak memory).
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

    /// One allocator event: `bytes > 0` allocated, `bytes < 0` freed.
    pub fn record(&self, bytes: i64) {
        if bytes > 0 {
            self.allocations.fetch_add(1, Ordering::Relaxed);
            let now = self.live.fetch_add(bytes, Ordering::Relaxed).saturating_add(bytes);
            self.peak.fetch_max(now, Ordering::Relaxed);
        } else if bytes < 0 {
            self.live.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    pub fn allocations(&self) -> u64 {
        self.allocations.load(Ordering::Relaxed)
    }

    pub fn report(&self) -> MemoryReport {
        let peak = u64::try_from(self.peak.load(Ordering::Relaxed)).unwrap_or(0);
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
        t.record(4_000_000);
        t.record(2_000_000);
        t.record(-4_000_000);
        t.record(1_000_000);
        let r = t.report();
        assert_eq!((r.peak_bytes, r.delta_bytes, r.baseline_bytes), (6_000_000, 6_000_000, 0));
        assert_eq!(t.allocations(), 3);
        assert_eq!(r.metric, "pytorch_tensor_bytes");
    }

    #[test]
    fn nothing_allocated_is_a_zero_peak() {
        let t = MemoryTracker::new();
        t.record(0);
        assert_eq!(t.report().peak_bytes, 0);
    }

    #[test]
    fn concurrent_reports_keep_an_exact_total() {
        let t = std::sync::Arc::new(MemoryTracker::new());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let t = t.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        t.record(10);
                        t.record(-10);
                    }
                })
            })
            .collect();
        for th in threads {
            th.join().unwrap();
        }
        assert_eq!(t.live.load(Ordering::Relaxed), 0);
        assert!(t.report().peak_bytes >= 10 && t.report().peak_bytes <= 40);
        assert_eq!(t.allocations(), 4000);
    }
}
