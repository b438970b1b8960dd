//! MergedReport: the FlopReports of every rank of one `torch.distributed` job as one report
//! (`torchscan.merge_reports`, `gather_reports`, `torchscan merge`): sums with the status rules
//! of every metric, each rank's figures, the most loaded and the slowest rank, the imbalance,
//! and, given each rank's ThroughputReport, the job's FLOP rate and MFU.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Communication, Diagnostic, IgnoredCount, MetricResult, RateResult, Status, Traffic};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MergedContext {
    /// The ranks' torch version (when they differ: each, comma-separated).
    #[schemars(length(min = 1))]
    pub torch_version: String,
    #[schemars(length(min = 1))]
    pub torchscan_version: String,
    #[schemars(extend("const" = "merged"))]
    pub method: String,
    #[schemars(range(min = 1))]
    pub world_size: u32,
    /// The ranks' backend; `null` when the reports carry no `context.distributed` (merged by
    /// position).
    pub backend: Option<String>,
}

/// One rank's figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RankFigures {
    pub rank: u32,
    /// The rank's FLOPs (its FlopReport's `total`).
    pub flops: MetricResult,
    /// Its collectives' calls and bytes, and their status; `null` when it ran none.
    pub communication: Option<RankTraffic>,
    /// Given its ThroughputReport: its timed seconds, FLOP rate and MFU.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub flops_per_second: Option<RateResult>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub mfu: Option<RateResult>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RankTraffic {
    pub status: Status,
    pub calls: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
}

impl RankTraffic {
    pub fn new(status: Status, t: Traffic) -> Self {
        RankTraffic { status, calls: t.calls, bytes_sent: t.bytes_sent, bytes_received: t.bytes_received }
    }
}

/// The job's rate: every rank's FLOPs over the slowest rank's seconds (the ranks step
/// together), and over the sum of their peaks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MergedThroughput {
    /// The slowest rank's seconds.
    pub seconds: f64,
    /// Every rank's timed FLOPs, summed.
    pub flops: MetricResult,
    pub flops_per_second: RateResult,
    /// The ranks' peaks, summed; `null` unless every rank gave one.
    pub peak_flops_per_second: Option<f64>,
    pub mfu: RateResult,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MergedReport {
    #[schemars(extend("const" = 2))]
    pub schema_version: u32,
    pub context: MergedContext,
    /// Every rank's FLOPs, summed (any partial rank makes it partial).
    #[schemars(extend("properties" = {"scope": {"const": "job"}}))]
    pub total: MetricResult,
    /// Per phase, summed over the ranks.
    #[schemars(extend(
        "propertyNames" = {"enum": ["forward", "backward", "optimizer"]},
        "additionalProperties" = {"$ref": "#/$defs/MetricResult", "properties": {"scope": {"const": "phase"}}}
    ))]
    pub by_phase: BTreeMap<String, MetricResult>,
    /// Module label -> FLOPs, summed over the ranks that ran it.
    pub by_module: BTreeMap<String, u64>,
    pub by_module_status: BTreeMap<String, Status>,
    pub by_operator: BTreeMap<String, u64>,
    pub operator_calls: BTreeMap<String, u64>,
    pub by_category: BTreeMap<String, u64>,
    pub ignored_operators: BTreeMap<String, IgnoredCount>,
    /// Every rank's collectives, summed (calls are per rank: an all-reduce on 4 ranks is 4
    /// calls); `null` when no rank ran one.
    pub communication: Option<Communication>,
    /// Each rank's figures, by rank.
    pub ranks: Vec<RankFigures>,
    /// The rank with the most FLOPs (known values; the lowest rank on a tie).
    pub most_loaded_rank: u32,
    /// The rank with the most timed seconds; `null` without ThroughputReports.
    pub slowest_rank: Option<u32>,
    /// `max / mean - 1` of the ranks' FLOPs (0: balanced); `null` when no rank counted any.
    pub flops_imbalance: Option<f64>,
    /// `max / mean - 1` of the ranks' timed seconds; `null` without ThroughputReports.
    pub seconds_imbalance: Option<f64>,
    /// The job's FLOP rate and MFU; present with ThroughputReports.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub throughput: Option<MergedThroughput>,
    /// Every rank's diagnostics, each message prefixed with its rank (`rank 3: ...`).
    pub diagnostics: Vec<Diagnostic>,
}
