//! torchscan's native core: operator FLOP counting for PyTorch.
//!
//! The C++ shim (`cpp/`) observes libtorch's dispatcher and forwards each operator event
//! through [`ffi`] (the one `#[cxx::bridge]`) to [`registry`], which routes it to a
//! [`session::Session`]. Sessions apply the counting rule with the [`formulas`] registry and
//! build the [`report`] types. Nothing outside `ffi.rs` knows about C++ or Python.

pub mod analysis;
pub mod args;
pub mod compare;
pub mod error;
pub mod formulas;
pub mod memory;
pub mod modules;
pub mod registry;
pub mod report;
pub mod scopes;
pub mod session;
pub mod summary;

#[cfg(feature = "torch")]
mod ffi;

pub use error::{Error, ErrorKind, Result};
pub use report::FlopReport;
