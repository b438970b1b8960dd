//! The report model: every report torchscan writes (FlopReport, AnalysisReport, ReportDiff,
//! ThroughputReport), as
//! owned types that are read and written everywhere (the session, `crawl_module`'s assembly,
//! `compare_reports`, the Rust API). The JSON Schemas shipped in `python/torchscan/schemas/` are
//! generated from these types (`schema.rs`; a test fails when the checked-in files differ).
//!
//! Every map is a `BTreeMap` (or, for a call's keyword arguments, the caller's order) so that
//! identical runs give byte-identical JSON. Field names follow `docs/schema.md`.

mod analysis;
mod diff;
mod flop;
mod metric;
mod ordered;
pub mod schema;
mod throughput;

pub use analysis::{
    AnalysisContext, AnalysisMode, AnalysisReport, Buffers, CallMeta, ExecutionMode, InputSource, Inputs, Layer,
    LayerMetrics, MappingItem, MappingKey, Parameters, Totals, ValueMeta,
};
pub use diff::{ComparedMetric, LayerChanges, LayerDiff, LayerSnapshot, MetricDiff, ReportDiff};
pub use flop::{packet_name, Diagnostic, FlopContext, FlopReport, IgnoredCount, IntegerOps, Severity};
pub use metric::{Metric, MetricResult, Number, Status, Unit, METHOD_NATIVE, UNIT_FLOPS};
pub use ordered::OrderedMap;
pub use throughput::{RateResult, StepTiming, ThroughputReport};

/// `schema_version` of every report this version writes.
pub const SCHEMA_VERSION: u32 = 1;
pub const TORCHSCAN_VERSION: &str = env!("CARGO_PKG_VERSION");
