//! The Rust API, for libtorch users of the `tch` crate: the FLOPs of the operators a closure
//! dispatches, attributed to scopes, and the peak CPU memory of a closure, as the same report
//! types Python gets ([`FlopReport`], [`MemoryReport`]).
//!
//! ```no_run
//! # fn main() -> torchscan::Result<()> {
//! let x = tch::Tensor::randn([4, 8], (tch::Kind::Float, tch::Device::Cpu));
//! let w = tch::Tensor::randn([8, 16], (tch::Kind::Float, tch::Device::Cpu));
//! let report = torchscan::measure_flops(|| {
//!     let _ = x.mm(&w);
//! })?;
//! assert_eq!(report.by_operator["aten.mm"], 2 * 4 * 8 * 16);
//! # Ok(())
//! # }
//! ```
//!
//! Counting is per thread: a [`Counter`] observes the thread that started it (and the autograd
//! threads running backward work for it), so it is neither `Send` nor `Sync`.

use std::marker::PhantomData;

use crate::error::{Error, Result};
use crate::ffi::native;
use crate::memory::MemoryReport;
use crate::registry;
use crate::report::FlopReport;

/// Counts every operator the current thread dispatches from [`Counter::start`] until
/// [`Counter::finish`]. Dropping an unfinished counter discards its count.
pub struct Counter {
    handle: i64,
    finished: bool,
    /// Sessions belong to the thread that opened them.
    _thread_bound: PhantomData<*const ()>,
}

impl Counter {
    pub fn start() -> Result<Counter> {
        Ok(Counter { handle: native::begin_counting()?, finished: false, _thread_bound: PhantomData })
    }

    /// Attributes the work done while the guard lives to `label` (`by_module`); scopes nest.
    pub fn scope(&self, label: &str) -> Result<Scope<'_>> {
        registry::push_scope(self.handle, label)?;
        Ok(Scope { counter: self })
    }

    /// Stops counting and returns the report.
    pub fn finish(mut self) -> Result<FlopReport> {
        native::end_counting(self.handle)?;
        self.finished = true;
        registry::finish(self.handle, &[])
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        if !self.finished {
            native::discard_counting(self.handle);
        }
    }
}

/// A label in effect while it lives (see [`Counter::scope`]).
pub struct Scope<'a> {
    counter: &'a Counter,
}

impl Drop for Scope<'_> {
    fn drop(&mut self) {
        // Only fails if the counter already finished, which the borrow rules out.
        let _ = registry::pop_scope(self.counter.handle);
    }
}

/// Runs `work` once and returns the FLOPs of every operator it dispatched (forward, backward,
/// optimizer steps). A panic in `work` discards the count and keeps unwinding.
pub fn measure_flops(work: impl FnOnce()) -> Result<FlopReport> {
    let counter = Counter::start()?;
    work();
    counter.finish()
}

/// Runs `work` once and returns the peak of CPU memory held by the PyTorch tensors it allocated
/// (`device` "cpu", metric `pytorch_tensor_bytes`). Refused while a profiler is active on this
/// thread.
pub fn measure_peak_memory(work: impl FnOnce()) -> Result<MemoryReport> {
    struct Measurement(Option<i64>);
    impl Drop for Measurement {
        fn drop(&mut self) {
            // Unwinding out of `work`: stop measuring, the panic is what matters.
            if let Some(id) = self.0.take() {
                let _ = native::end_memory(id);
            }
        }
    }
    let mut measurement = Measurement(Some(native::begin_memory()?));
    work();
    let id = measurement.0.take().ok_or_else(|| Error::Native("measurement already stopped".into()))?;
    let json = native::end_memory(id)?;
    serde_json::from_str(&json).map_err(|e| Error::Native(format!("malformed memory report: {e}")))
}
