//! The `communication` section of a FlopReport: what this rank's `torch.distributed`
//! collectives moved (calls, bytes sent and received by the conventions of
//! `docs/distributed.md`), by operator, phase and module, as FLOPs are; and the rank's identity
//! in its job (`FlopContext::distributed`), which merging needs.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::metric::Status;

/// The convention the byte counts follow (`docs/distributed.md`, Conventions).
pub const CONVENTION: &str = "ring";

/// Calls and bytes of some collectives: plain numbers, like `by_module`'s FLOPs (the section's
/// `status` says whether they are exact).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Traffic {
    pub calls: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
}

impl Traffic {
    /// Adds `other`; `false` when a sum does not fit in 64 bits (nothing is changed then).
    pub fn add(&mut self, other: &Traffic) -> bool {
        match (
            self.calls.checked_add(other.calls),
            self.bytes_sent.checked_add(other.bytes_sent),
            self.bytes_received.checked_add(other.bytes_received),
        ) {
            (Some(calls), Some(sent), Some(received)) => {
                *self = Traffic { calls, bytes_sent: sent, bytes_received: received };
                true
            }
            _ => false,
        }
    }
}

/// A phase's collectives, with their status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PhaseTraffic {
    pub status: Status,
    pub calls: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
}

impl PhaseTraffic {
    pub fn new(status: Status, t: Traffic) -> Self {
        PhaseTraffic { status, calls: t.calls, bytes_sent: t.bytes_sent, bytes_received: t.bytes_received }
    }

    pub fn traffic(&self) -> Traffic {
        Traffic { calls: self.calls, bytes_sent: self.bytes_sent, bytes_received: self.bytes_received }
    }
}

/// What this rank's collectives moved. complete: every collective that ran was priced, and
/// the numbers are exact; partial: some could not be (a diagnostic with metric
/// `communication` names them), the numbers are lower bounds; unavailable: a sum exceeded 2^64.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Communication {
    pub status: Status,
    /// How bytes are counted: `ring` (all-reduce moves `2 (n-1)/n` of its buffer each way, ...;
    /// see docs/distributed.md).
    #[schemars(extend("const" = "ring"))]
    pub convention: String,
    /// Collective calls, and this rank's bytes (lower bounds when partial).
    pub calls: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Operator packet (`c10d.allreduce_`) -> its calls and bytes.
    pub by_operator: BTreeMap<String, Traffic>,
    /// `forward` / `backward` -> the collectives of that phase.
    #[schemars(extend("propertyNames" = {"enum": ["forward", "backward"]}))]
    pub by_phase: BTreeMap<String, PhaseTraffic>,
    /// Module label -> the collectives of its calls, children included (as `by_module`).
    pub by_module: BTreeMap<String, Traffic>,
}

impl Communication {
    pub fn total(&self) -> Traffic {
        Traffic { calls: self.calls, bytes_sent: self.bytes_sent, bytes_received: self.bytes_received }
    }
}

/// This process's place in a `torch.distributed` job, when one was initialized.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Distributed {
    #[schemars(range(min = 0))]
    pub rank: u32,
    #[schemars(range(min = 1))]
    pub world_size: u32,
    /// The default group's backend (`gloo`, `nccl`, ...).
    #[schemars(length(min = 1))]
    pub backend: String,
}
