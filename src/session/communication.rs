//! A session's collectives: priced when they start (`formulas::collective`), counted when they
//! return, attributed to the phase and module scope they ran in, like FLOPs.

use std::collections::BTreeMap;

use super::{Phase, Session};
use crate::formulas::collective::Traffic as Bytes;
use crate::formulas::FormulaError;
use crate::report::{packet_name, Communication, Diagnostic, PhaseTraffic, Severity, Status, Traffic, CONVENTION};
use crate::scopes::ScopeTree;

/// `metric` of communication diagnostics.
pub const COMMUNICATION_METRIC: &str = "communication";

#[derive(Clone, Debug, Default)]
struct Counter {
    traffic: Traffic,
    incomplete: bool,
    overflowed: bool,
}

impl Counter {
    fn add(&mut self, t: &Traffic) {
        if !self.traffic.add(t) {
            self.overflowed = true;
        }
    }

    fn status(&self) -> Status {
        if self.overflowed {
            Status::Unavailable
        } else if self.incomplete {
            Status::Partial
        } else {
            Status::Complete
        }
    }
}

/// Per operator of the session (index into `Session::ops`).
#[derive(Clone, Debug, Default)]
struct OpTraffic {
    traffic: Traffic,
    errors: u64,
    first_error: Option<FormulaError>,
}

#[derive(Default)]
pub struct Collectives {
    ran: bool,
    total: Counter,
    phases: [Counter; 2],
    by_op: BTreeMap<usize, OpTraffic>,
    by_scope: BTreeMap<u32, Traffic>,
    /// Collectives on threads the session does not count.
    unfollowed: u64,
}

/// A compiled graph's collectives, recorded once (`priced.rs`) and added at each run.
#[derive(Clone, Debug, Default)]
pub struct PricedCollectives {
    /// Operator name -> its calls and bytes, with its failed calls.
    by_op: Vec<(String, Traffic, u64, Option<FormulaError>)>,
    /// The recording's scope node -> the calls and bytes done there.
    by_scope: Vec<(u32, Traffic)>,
    incomplete: bool,
}

impl PricedCollectives {
    pub fn is_empty(&self) -> bool {
        self.by_op.is_empty() && !self.incomplete
    }
}

impl Collectives {
    /// What a recording session's collectives were, for a priced graph.
    pub fn priced(&self, op_name: impl Fn(usize) -> String) -> PricedCollectives {
        PricedCollectives {
            by_op: self.by_op.iter().map(|(&op, t)| (op_name(op), t.traffic, t.errors, t.first_error)).collect(),
            by_scope: self.by_scope.iter().map(|(&scope, &t)| (scope, t)).collect(),
            incomplete: self.total.incomplete,
        }
    }

    /// One run of a priced graph's collectives: `op_index` maps an operator name to this
    /// session's entry, `node` a recording scope to this session's scope node.
    pub fn add_priced(
        &mut self,
        graph: &PricedCollectives,
        phase: Phase,
        mut op_index: impl FnMut(&str) -> usize,
        node: impl Fn(u32) -> u32,
    ) {
        if graph.is_empty() {
            return;
        }
        self.ran = true;
        for (name, traffic, errors, first_error) in &graph.by_op {
            let entry = self.by_op.entry(op_index(name)).or_default();
            entry.traffic.add(traffic);
            entry.errors += errors;
            entry.first_error = entry.first_error.or(*first_error);
            self.total.add(traffic);
            self.phases[phase as usize].add(traffic);
        }
        for (scope, traffic) in &graph.by_scope {
            self.by_scope.entry(node(*scope)).or_default().add(traffic);
        }
        if graph.incomplete || graph.by_op.iter().any(|(_, _, errors, _)| *errors > 0) {
            self.total.incomplete = true;
            self.phases[phase as usize].incomplete = true;
        }
    }

    /// A collective returned: `priced` is what its formula said at its start.
    pub fn record(&mut self, op: usize, scope: u32, phase: Phase, priced: Result<Bytes, FormulaError>) {
        self.ran = true;
        let entry = self.by_op.entry(op).or_default();
        match priced {
            Ok(bytes) => {
                let t = Traffic { calls: 1, bytes_sent: bytes.sent, bytes_received: bytes.received };
                entry.traffic.add(&t);
                self.total.add(&t);
                self.phases[phase as usize].add(&t);
                self.by_scope.entry(scope).or_default().add(&t);
            }
            Err(error) => {
                entry.errors += 1;
                entry.first_error.get_or_insert(error);
                let call = Traffic { calls: 1, ..Traffic::default() };
                entry.traffic.add(&call);
                self.total.add(&call);
                self.phases[phase as usize].add(&call);
                self.by_scope.entry(scope).or_default().add(&call);
                self.total.incomplete = true;
                self.phases[phase as usize].incomplete = true;
            }
        }
    }

    /// A collective ran on a thread the session does not count.
    pub fn record_unfollowed(&mut self) {
        self.ran = true;
        self.unfollowed += 1;
        self.total.incomplete = true;
    }
}

impl Session {
    /// The report's `communication` section and its diagnostics; `None` when no collective ran.
    pub(super) fn communication(&self) -> (Option<Communication>, Vec<Diagnostic>) {
        let c = &self.collectives;
        if !c.ran {
            return (None, Vec::new());
        }
        let mut diagnostics = Vec::new();
        let mut by_operator: BTreeMap<String, Traffic> = BTreeMap::new();
        for (&op, t) in &c.by_op {
            let packet = packet_name(&self.ops[op].name);
            by_operator.entry(packet.clone()).or_default().add(&t.traffic);
            if let Some(error) = t.first_error {
                diagnostics.push(diagnostic(
                    "collective_error",
                    Severity::Error,
                    Some(&packet),
                    format!(
                        "{packet}: the bytes of {} call(s) could not be counted: {}; the communication totals are \
                         lower bounds",
                        t.errors,
                        error.describe()
                    ),
                ));
            }
        }
        if c.unfollowed > 0 {
            diagnostics.push(diagnostic(
                "unfollowed_threads",
                Severity::Warning,
                None,
                format!(
                    "{} collective call(s) ran on threads this session does not count; their bytes are missing \
                     (measure with threads=\"all\")",
                    c.unfollowed
                ),
            ));
        }
        if c.total.overflowed {
            diagnostics.push(diagnostic(
                "communication_overflow",
                Severity::Error,
                None,
                "the bytes of this rank's collectives exceed 2^64; they are reported as unavailable".into(),
            ));
        }
        let by_phase = [Phase::Forward, Phase::Backward]
            .into_iter()
            .filter_map(|phase| {
                let counter = &c.phases[phase as usize];
                (counter.traffic.calls > 0 || counter.incomplete)
                    .then(|| (phase.name().to_string(), PhaseTraffic::new(counter.status(), counter.traffic)))
            })
            .collect();
        let total = c.total.traffic;
        let section = Communication {
            status: c.total.status(),
            convention: CONVENTION.to_string(),
            calls: total.calls,
            bytes_sent: total.bytes_sent,
            bytes_received: total.bytes_received,
            by_operator,
            by_phase,
            by_module: by_module(&self.scopes, &c.by_scope),
        };
        (Some(section), diagnostics)
    }
}

/// Module label -> the traffic of its calls, children included; a label twice on one stack
/// (recursion) counts once.
fn by_module(scopes: &ScopeTree, by_scope: &BTreeMap<u32, Traffic>) -> BTreeMap<String, Traffic> {
    let mut out: BTreeMap<String, Traffic> = BTreeMap::new();
    for (&scope, t) in by_scope {
        for label in scopes.module_labels_of(scope) {
            out.entry(label.to_string()).or_default().add(t);
        }
    }
    out
}

fn diagnostic(code: &str, severity: Severity, operator: Option<&str>, message: String) -> Diagnostic {
    Diagnostic {
        code: code.into(),
        severity,
        metric: COMMUNICATION_METRIC.into(),
        message,
        path: None,
        operator: operator.map(str::to_string),
    }
}
