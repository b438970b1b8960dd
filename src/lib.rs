//! torchscan's native core: operator FLOP counting for PyTorch.
//!
//! The C++ shim (`cpp/`) observes libtorch's dispatcher and forwards each operator event
//! through [`ffi`] (the one `#[cxx::bridge]`) to [`registry`], which routes it to a
//! [`session::Session`]. Sessions apply the counting rule with the [`formulas`] registry and
//! build the [`report`] types. Nothing outside `ffi.rs` knows about C++ or Python.
//!
//! With the `torch` feature (the default) the crate is also a library for libtorch programs:
//! [`measure_flops`], [`measure_peak_memory`] and [`Counter`] for Rust (`tch`) users, and, as a
//! static library, the C++ API of `cpp/include/torchscan/torchscan.h`.

pub mod analysis;
pub mod args;
pub mod compare;
pub mod error;
pub mod flops_table;
pub mod formulas;
pub mod host_frames;
pub mod memory;
pub mod merge;
pub mod module_tree;
pub mod modules;
pub mod pending;
pub mod registry;
pub mod report;
pub mod scopes;
pub mod session;
mod slot_lock;
pub mod summary;
pub mod throughput;

#[cfg(feature = "torch")]
mod api;
#[cfg(feature = "torch")]
mod ffi;

#[cfg(feature = "torch")]
pub use api::{measure_flops, measure_peak_memory, Counter, Scope};
pub use error::{Error, ErrorKind, Result};
pub use memory::MemoryReport;
pub use report::FlopReport;
/// The `tch` this crate is built with: use it for models and tensors, so that they and the
/// counters share one libtorch.
#[cfg(feature = "tch")]
pub use tch;
