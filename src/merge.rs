//! One report of a `torch.distributed` job: every rank's FlopReport merged (`MergedReport`).
//! Counts are summed with the status rules of every metric (`MetricResult::sum`): any partial
//! rank makes the merged number partial.

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::report::{
    Communication, Diagnostic, FlopReport, IgnoredCount, MergedContext, MergedReport, MergedThroughput, MetricResult,
    PhaseTraffic, RankFigures, RankTraffic, RateResult, Status, ThroughputReport, Traffic, CONVENTION,
    FLOP_SCHEMA_VERSION, TORCHSCAN_VERSION,
};
use crate::throughput::rate;

/// Merges the ranks' reports; `throughput`, when given, holds each rank's ThroughputReport in
/// the same order as `reports`.
pub fn merge(reports: Vec<FlopReport>, throughput: Option<Vec<ThroughputReport>>) -> Result<MergedReport> {
    if reports.is_empty() {
        return Err(Error::BadArgument("merge_reports needs at least one report".into()));
    }
    if let Some(t) = &throughput {
        if t.len() != reports.len() {
            return Err(Error::BadArgument(format!(
                "got {} FlopReports but {} ThroughputReports: give one of each per rank",
                reports.len(),
                t.len()
            )));
        }
    }
    let (ranks, world_size, backend) = identify(&reports)?;
    let mut order: Vec<usize> = (0..reports.len()).collect();
    order.sort_by_key(|&i| ranks[i]);

    let totals: Vec<&MetricResult> = order.iter().map(|&i| &reports[i].total).collect();
    let total = MetricResult::sum(totals.iter().copied(), "job");
    let mut by_phase: BTreeMap<String, Vec<&MetricResult>> = BTreeMap::new();
    let mut by_module = Sums::default();
    let mut by_operator = Sums::default();
    let mut operator_calls = Sums::default();
    let mut by_category = Sums::default();
    let mut by_module_status: BTreeMap<String, Status> = BTreeMap::new();
    let mut ignored_operators: BTreeMap<String, IgnoredCount> = BTreeMap::new();
    let mut diagnostics = Vec::new();
    for &i in &order {
        let r = &reports[i];
        for (phase, m) in &r.by_phase {
            by_phase.entry(phase.clone()).or_default().push(m);
        }
        by_module.add(&r.by_module);
        by_operator.add(&r.by_operator);
        operator_calls.add(&r.operator_calls);
        by_category.add(&r.by_category);
        for (label, status) in &r.by_module_status {
            let merged = by_module_status.entry(label.clone()).or_insert(Status::Complete);
            *merged = worse(*merged, *status);
        }
        // A module whose count overflowed on a rank is absent from its by_module: the sum is not known.
        for (label, status) in &r.by_module_status {
            if *status == Status::Unavailable || !r.by_module.contains_key(label) {
                by_module.lost.insert(label.clone());
            }
        }
        for (name, ignored) in &r.ignored_operators {
            let entry = ignored_operators
                .entry(name.clone())
                .or_insert(IgnoredCount { calls: 0, reason: ignored.reason.clone() });
            entry.calls = entry.calls.saturating_add(ignored.calls);
        }
        for d in &r.diagnostics {
            diagnostics.push(Diagnostic { message: format!("rank {}: {}", ranks[i], d.message), ..d.clone() });
        }
    }
    let by_phase = by_phase.into_iter().map(|(phase, parts)| (phase, MetricResult::sum(parts, "phase"))).collect();
    for label in &by_module.lost {
        by_module_status.insert(label.clone(), Status::Unavailable);
    }

    let figures = |i: usize| -> RankFigures {
        let r = &reports[i];
        let t = throughput.as_ref().map(|t| &t[i]);
        RankFigures {
            rank: ranks[i],
            flops: r.total.clone(),
            communication: r.communication.as_ref().map(|c| RankTraffic::new(c.status, c.total())),
            seconds: t.map(|t| t.seconds),
            flops_per_second: t.map(|t| t.flops_per_second.clone()),
            mfu: t.map(|t| t.mfu.clone()),
        }
    };
    let rank_figures: Vec<RankFigures> = order.iter().map(|&i| figures(i)).collect();
    let flops_known: Vec<f64> = rank_figures.iter().map(|f| f.flops.known_value.unwrap_or(0) as f64).collect();
    let most_loaded = argmax(&flops_known);
    let seconds: Option<Vec<f64>> = rank_figures.iter().map(|f| f.seconds).collect();

    Ok(MergedReport {
        schema_version: FLOP_SCHEMA_VERSION,
        context: MergedContext {
            torch_version: torch_versions(&reports, &order),
            torchscan_version: TORCHSCAN_VERSION.to_string(),
            method: "merged".into(),
            world_size,
            backend,
        },
        total,
        by_phase,
        by_module: by_module.finish(),
        by_module_status,
        by_operator: by_operator.finish(),
        operator_calls: operator_calls.finish(),
        by_category: by_category.finish(),
        ignored_operators,
        communication: communication(order.iter().map(|&i| &reports[i])),
        most_loaded_rank: rank_figures[most_loaded].rank,
        slowest_rank: seconds.as_ref().map(|s| rank_figures[argmax(s)].rank),
        flops_imbalance: imbalance(&flops_known),
        seconds_imbalance: seconds.as_deref().and_then(imbalance),
        throughput: throughput.as_ref().map(|t| job_rate(&order.iter().map(|&i| &t[i]).collect::<Vec<_>>())),
        ranks: rank_figures,
        diagnostics,
    })
}

/// Each report's rank, the world size and the backend: from `context.distributed` when every
/// report has it (each rank exactly once), else by position (none may have it).
fn identify(reports: &[FlopReport]) -> Result<(Vec<u32>, u32, Option<String>)> {
    let places: Vec<_> = reports.iter().map(|r| r.context.distributed.as_ref()).collect();
    let with = places.iter().filter(|p| p.is_some()).count();
    if with == 0 {
        let n = u32::try_from(reports.len()).map_err(|_| Error::BadArgument("too many reports".into()))?;
        return Ok(((0..n).collect(), n, None));
    }
    if with != reports.len() {
        let missing: Vec<String> =
            places.iter().enumerate().filter(|(_, p)| p.is_none()).map(|(i, _)| i.to_string()).collect();
        return Err(Error::BadArgument(format!(
            "reports {} have no context.distributed (measured outside torch.distributed) while the others do: \
             merge the reports of one job",
            missing.join(", ")
        )));
    }
    let places: Vec<_> = places.into_iter().flatten().collect();
    let world_size = places[0].world_size;
    if let Some(other) = places.iter().find(|p| p.world_size != world_size) {
        return Err(Error::BadArgument(format!(
            "the reports come from jobs of different world sizes ({world_size} and {}): merge the reports of one job",
            other.world_size
        )));
    }
    if let Some(bad) = places.iter().find(|p| p.rank >= p.world_size) {
        return Err(Error::BadArgument(format!(
            "a report names rank {} of a job of {} rank(s): not a report torchscan wrote",
            bad.rank, bad.world_size
        )));
    }
    let mut present = std::collections::BTreeSet::new();
    for p in &places {
        if !present.insert(p.rank) {
            return Err(Error::BadArgument(format!("rank {} has more than one report", p.rank)));
        }
    }
    if present.len() != world_size as usize {
        // The first missing ranks lie within the first `present.len() + 8` numbers.
        let missing: Vec<String> =
            (0..world_size).filter(|r| !present.contains(r)).take(8).map(|r| r.to_string()).collect();
        let more = if world_size as usize - present.len() > missing.len() { ", ..." } else { "" };
        return Err(Error::BadArgument(format!(
            "the job has {world_size} ranks but rank(s) {}{more} have no report",
            missing.join(", ")
        )));
    }
    let mut backends: Vec<&str> = places.iter().map(|p| p.backend.as_str()).collect();
    backends.sort_unstable();
    backends.dedup();
    Ok((places.iter().map(|p| p.rank).collect(), world_size, Some(backends.join(","))))
}

fn torch_versions(reports: &[FlopReport], order: &[usize]) -> String {
    let mut versions: Vec<&str> = Vec::new();
    for &i in order {
        let v = reports[i].context.torch_version.as_str();
        if !versions.contains(&v) {
            versions.push(v);
        }
    }
    versions.join(",")
}

/// Sums of plain-number maps; a key whose sum overflows is dropped (and reported unavailable
/// where the map has statuses).
#[derive(Default)]
struct Sums {
    values: BTreeMap<String, Option<u64>>,
    lost: std::collections::BTreeSet<String>,
}

impl Sums {
    fn add(&mut self, map: &BTreeMap<String, u64>) {
        for (key, &v) in map {
            let entry = self.values.entry(key.clone()).or_insert(Some(0));
            *entry = entry.and_then(|e| e.checked_add(v));
            if entry.is_none() {
                self.lost.insert(key.clone());
            }
        }
    }

    fn finish(self) -> BTreeMap<String, u64> {
        let lost = self.lost;
        self.values.into_iter().filter(|(k, _)| !lost.contains(k)).filter_map(|(k, v)| Some((k, v?))).collect()
    }
}

fn worse(a: Status, b: Status) -> Status {
    let rank = |s: Status| match s {
        Status::Complete => 0,
        Status::Partial => 1,
        Status::Unavailable => 2,
    };
    if rank(b) > rank(a) {
        b
    } else {
        a
    }
}

/// Every rank's collectives, summed; `None` when no rank ran one.
fn communication<'a>(reports: impl Iterator<Item = &'a FlopReport>) -> Option<Communication> {
    let mut merged: Option<Communication> = None;
    let mut overflowed = false;
    for c in reports.filter_map(|r| r.communication.as_ref()) {
        let m = merged.get_or_insert_with(|| Communication {
            status: Status::Complete,
            convention: CONVENTION.to_string(),
            calls: 0,
            bytes_sent: 0,
            bytes_received: 0,
            by_operator: BTreeMap::new(),
            by_phase: BTreeMap::new(),
            by_module: BTreeMap::new(),
        });
        // An unavailable rank leaves a lower bound, as in MetricResult::sum.
        let status = if c.status == Status::Complete { Status::Complete } else { Status::Partial };
        m.status = worse(m.status, status);
        let mut total = m.total();
        overflowed |= !total.add(&c.total());
        (m.calls, m.bytes_sent, m.bytes_received) = (total.calls, total.bytes_sent, total.bytes_received);
        for (k, t) in &c.by_operator {
            overflowed |= !m.by_operator.entry(k.clone()).or_default().add(t);
        }
        for (k, t) in &c.by_module {
            overflowed |= !m.by_module.entry(k.clone()).or_default().add(t);
        }
        for (phase, p) in &c.by_phase {
            let entry =
                m.by_phase.entry(phase.clone()).or_insert(PhaseTraffic::new(Status::Complete, Traffic::default()));
            let mut t = entry.traffic();
            overflowed |= !t.add(&p.traffic());
            let status =
                worse(entry.status, if p.status == Status::Complete { Status::Complete } else { Status::Partial });
            *entry = PhaseTraffic::new(status, t);
        }
    }
    if let Some(m) = merged.as_mut() {
        if overflowed {
            m.status = Status::Unavailable;
        }
    }
    merged
}

/// The index of the largest value (the first on a tie).
fn argmax(values: &[f64]) -> usize {
    let mut best = 0;
    for (i, &v) in values.iter().enumerate() {
        if v > values[best] {
            best = i;
        }
    }
    best
}

/// `max / mean - 1`; `None` when the mean is 0.
fn imbalance(values: &[f64]) -> Option<f64> {
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    let max = values.iter().copied().fold(f64::MIN, f64::max);
    (mean > 0.0).then(|| max / mean - 1.0)
}

/// The job's rate: every rank's FLOPs over the slowest rank's seconds, and its MFU over the sum
/// of the ranks' peaks (when every rank gave one).
fn job_rate(reports: &[&ThroughputReport]) -> MergedThroughput {
    let seconds = reports.iter().map(|t| t.seconds).fold(0.0, f64::max);
    let flops = MetricResult::sum(reports.iter().map(|t| &t.flops), "steps");
    let flops_per_second = rate(&flops, Some(seconds), "FLOP/s");
    let peak: Option<f64> = reports.iter().map(|t| t.peak_flops_per_second).sum();
    let mfu = match peak {
        Some(peak) if peak > 0.0 => RateResult {
            status: flops_per_second.status,
            value: flops_per_second.value.map(|v| v / peak),
            known_value: flops_per_second.known_value.map(|v| v / peak),
            unit: "fraction".into(),
        },
        _ => RateResult { status: Status::Unavailable, value: None, known_value: None, unit: "fraction".into() },
    };
    MergedThroughput { seconds, flops, flops_per_second, peak_flops_per_second: peak, mfu }
}

/// `merge` from JSON: `{"reports": [FlopReport, ...], "throughput": [ThroughputReport, ...] |
/// null}`. A FlopReport of schema version 1 reads as version 2 without communication.
pub fn merge_json(text: &str) -> Result<String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| Error::ReportValue(format!("not JSON ({e})")))?;
    let reports = value
        .get("reports")
        .and_then(|r| r.as_array())
        .ok_or_else(|| Error::ReportType("expected {\"reports\": [FlopReport, ...]}".into()))?;
    let reports = reports
        .iter()
        .enumerate()
        .map(|(i, r)| {
            if r.get("layers").is_some() {
                return Err(Error::ReportType(format!(
                    "reports[{i}] is an AnalysisReport: merge its 'operator_flops' (a FlopReport)"
                )));
            }
            serde_json::from_value::<FlopReport>(r.clone())
                .map_err(|e| Error::ReportValue(format!("reports[{i}] is not a FlopReport: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let throughput = match value.get("throughput") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::Array(list)) => Some(
            list.iter()
                .enumerate()
                .map(|(i, t)| {
                    serde_json::from_value::<ThroughputReport>(t.clone())
                        .map_err(|e| Error::ReportValue(format!("throughput[{i}] is not a ThroughputReport: {e}")))
                })
                .collect::<Result<Vec<_>>>()?,
        ),
        Some(_) => return Err(Error::ReportType("'throughput' must be a list of ThroughputReports".into())),
    };
    let merged = merge(reports, throughput)?;
    serde_json::to_string(&merged).map_err(|e| Error::Internal(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A rank's report: `flops` (status, value, known), `bytes` sent = received, and its place.
    fn rank(rank: Option<(u32, u32)>, status: &str, value: Option<u64>, known: Option<u64>, bytes: u64) -> FlopReport {
        let metric = |scope: &str| {
            json!({"status": status, "value": value, "known_value": known, "unit": "FLOPs", "scope": scope,
                   "method": "torchscan_native_dispatch"})
        };
        let mut context =
            json!({"torch_version": "2.13.0", "torchscan_version": "0.3.0", "method": "torchscan_native_dispatch"});
        if let Some((r, n)) = rank {
            context["distributed"] = json!({"rank": r, "world_size": n, "backend": "gloo"});
        }
        let traffic = json!({"calls": 1, "bytes_sent": bytes, "bytes_received": bytes});
        serde_json::from_value(json!({
            "schema_version": 2, "context": context, "total": metric("workload"),
            "by_module": {"Net": known.unwrap_or(0)}, "by_module_status": {"Net": status},
            "by_operator": {"aten.mm": known.unwrap_or(0)}, "operator_calls": {"aten.mm": 1},
            "by_category": {"matmul": known.unwrap_or(0)}, "by_phase": {"forward": metric("phase")},
            "ignored_operators": {}, "diagnostics": [],
            "communication": {"status": "complete", "convention": "ring", "calls": 1, "bytes_sent": bytes,
                "bytes_received": bytes, "by_operator": {"c10d.allreduce_": traffic},
                "by_phase": {"backward": {"status": "complete", "calls": 1, "bytes_sent": bytes, "bytes_received": bytes}},
                "by_module": {}},
        }))
        .unwrap()
    }

    #[test]
    fn sums_by_rank_with_the_status_rules() {
        // Given out of order; rank 2 is partial: the job's total is partial, its known value the sum.
        let reports = vec![
            rank(Some((2, 3)), "partial", None, Some(50), 8),
            rank(Some((0, 3)), "complete", Some(100), Some(100), 8),
            rank(Some((1, 3)), "complete", Some(300), Some(300), 8),
        ];
        let m = merge(reports, None).unwrap();
        assert_eq!((m.total.status, m.total.value, m.total.known_value), (Status::Partial, None, Some(450)));
        assert_eq!(m.total.scope, "job");
        assert_eq!(m.ranks.iter().map(|r| r.rank).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(m.most_loaded_rank, 1);
        // max 300 over a mean of 150.
        assert_eq!(m.flops_imbalance, Some(1.0));
        assert_eq!((m.slowest_rank, m.seconds_imbalance), (None, None));
        assert_eq!(m.by_module["Net"], 450);
        assert_eq!(m.by_module_status["Net"], Status::Partial);
        let c = m.communication.unwrap();
        assert_eq!((c.status, c.calls, c.bytes_sent), (Status::Complete, 3, 24));
        assert_eq!(m.context.backend.as_deref(), Some("gloo"));
    }

    #[test]
    fn reports_outside_a_job_merge_by_position() {
        let m =
            merge(vec![rank(None, "complete", Some(1), Some(1), 0), rank(None, "complete", Some(3), Some(3), 0)], None)
                .unwrap();
        assert_eq!((m.context.world_size, m.context.backend.clone(), m.most_loaded_rank), (2, None, 1));
        assert_eq!(m.total.value, Some(4));
    }

    #[test]
    fn the_job_must_be_whole_and_one() {
        let ok = |r, n| rank(Some((r, n)), "complete", Some(1), Some(1), 0);
        let error = |reports| merge(reports, None).unwrap_err().to_string();
        assert!(error(vec![ok(0, 3), ok(2, 3)]).contains("rank(s) 1 have no report"));
        assert!(error(vec![ok(0, 2), ok(0, 2)]).contains("rank 0 has more than one report"));
        assert!(error(vec![ok(0, 2), ok(1, 4)]).contains("different world sizes"));
        assert!(error(vec![ok(0, 2), rank(None, "complete", Some(1), Some(1), 0)]).contains("reports 1 have no"));
        assert!(error(vec![]).contains("at least one report"));
        // Hand-edited places: a rank past the world, a world of 0 or of 2^32 - 1 ranks.
        assert!(error(vec![ok(2, 2)]).contains("rank 2 of a job of 2 rank(s)"));
        assert!(error(vec![ok(0, 0)]).contains("rank 0 of a job of 0 rank(s)"));
        let huge = error(vec![ok(0, u32::MAX)]);
        assert!(huge.contains("rank(s) 1, 2, 3, 4, 5, 6, 7, 8, ... have no report"), "{huge}");
        let bad = merge_json(r#"{"reports": [{"layers": []}]}"#).unwrap_err().to_string();
        assert!(bad.contains("AnalysisReport"), "{bad}");
        let bad = merge_json(r#"{"reports": [{"schema_version": 2}]}"#).unwrap_err().to_string();
        assert!(bad.contains("reports[0] is not a FlopReport"), "{bad}");
    }

    #[test]
    fn throughput_gives_the_slowest_rank_and_the_jobs_rate() {
        let timed = |flops: u64, seconds: f64| ThroughputReport {
            schema_version: 1,
            steps: 1,
            seconds,
            flops: MetricResult::complete(flops, "steps"),
            by_phase: BTreeMap::new(),
            flops_per_second: rate(&MetricResult::complete(flops, "steps"), Some(seconds), "FLOP/s"),
            peak_flops_per_second: Some(1000.0),
            mfu: RateResult { status: Status::Complete, value: None, known_value: None, unit: "fraction".into() },
            per_step: Vec::new(),
        };
        let reports = vec![
            rank(Some((0, 2)), "complete", Some(100), Some(100), 0),
            rank(Some((1, 2)), "complete", Some(300), Some(300), 0),
        ];
        // 400 FLOPs over the slowest rank's 2 s: 200 FLOP/s; over 2 x 1000 FLOP/s of peak: 0.1.
        let m = merge(reports, Some(vec![timed(100, 2.0), timed(300, 1.0)])).unwrap();
        assert_eq!(m.slowest_rank, Some(0));
        assert_eq!(m.seconds_imbalance, Some(2.0 / 1.5 - 1.0));
        let t = m.throughput.unwrap();
        assert_eq!((t.seconds, t.flops_per_second.value, t.mfu.value), (2.0, Some(200.0), Some(0.1)));
        assert_eq!(t.peak_flops_per_second, Some(2000.0));
        let mismatch = merge(vec![rank(None, "complete", Some(1), Some(1), 0)], Some(vec![])).unwrap_err();
        assert!(mismatch.to_string().contains("1 FlopReports but 0 ThroughputReports"));
    }
}
