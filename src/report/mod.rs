//! The report model: every report torchscan writes (FlopReport, AnalysisReport, ReportDiff,
//! ThroughputReport), as
//! owned types that are read and written everywhere (the session, `crawl_module`'s assembly,
//! `compare_reports`, the Rust API). The JSON Schemas shipped in `python/torchscan/schemas/` are
//! generated from these types (`schema.rs`; a test fails when the checked-in files differ).
//!
//! Every map is a `BTreeMap` (or, for a call's keyword arguments, the caller's order) so that
//! identical runs give byte-identical JSON. Field names follow `docs/schema.md`.

mod analysis;
mod communication;
mod diff;
mod flop;
mod merged;
mod metric;
mod ordered;
pub mod schema;
mod throughput;

pub use analysis::{
    AnalysisContext, AnalysisMode, AnalysisReport, Buffers, CallMeta, ExecutionMode, InputSource, Inputs, Layer,
    LayerMetrics, MappingItem, MappingKey, Parameters, Totals, UncalledModule, ValueMeta,
};
pub use communication::{Communication, Distributed, PhaseTraffic, Traffic, CONVENTION};
pub use diff::{ComparedMetric, LayerChanges, LayerDiff, LayerSnapshot, MetricDiff, ReportDiff};
pub use flop::{packet_name, Diagnostic, FlopContext, FlopReport, IgnoredCount, IntegerOps, Severity};
pub use merged::{MergedContext, MergedReport, MergedThroughput, RankFigures, RankTraffic};
pub use metric::{Metric, MetricResult, Number, Status, Unit, METHOD_NATIVE, UNIT_FLOPS};
pub use ordered::OrderedMap;
pub use throughput::{RateResult, StepTiming, ThroughputReport};

/// `schema_version` of every report this version writes but the FlopReport.
pub const SCHEMA_VERSION: u32 = 1;
/// `schema_version` of the FlopReport (and of the MergedReport): 2 added `communication` and
/// `context.distributed` (docs/schema.md, Versions). A version 1 report reads as a version 2
/// one without them.
pub const FLOP_SCHEMA_VERSION: u32 = 2;
pub const TORCHSCAN_VERSION: &str = env!("CARGO_PKG_VERSION");
