//! Throughput and MFU of timed, counted steps (`torchscan.Throughput`): the steps' FLOPs summed
//! with the status rules of every metric, divided by their seconds, and by the device's peak.

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::report::{MetricResult, RateResult, Status, StepTiming, ThroughputReport, SCHEMA_VERSION};

/// The sum of the steps' FLOPs: complete when every step's is, partial (a lower bound) when a
/// step's is partial or a step's count is unavailable, unavailable when the sum overflows.
fn summed(steps: &[StepTiming]) -> MetricResult {
    MetricResult::sum(steps.iter().map(|s| &s.flops), "steps")
}

/// The steps' FLOPs by phase: each phase summed over the steps that have it (a phase no step
/// ran is absent), with the status rules of `summed`.
fn summed_phases(steps: &[StepTiming]) -> BTreeMap<String, MetricResult> {
    let mut parts: BTreeMap<&str, Vec<&MetricResult>> = BTreeMap::new();
    for (phase, metric) in steps.iter().flat_map(|s| &s.by_phase) {
        parts.entry(phase.as_str()).or_default().push(metric);
    }
    parts.into_iter().map(|(phase, parts)| (phase.to_owned(), MetricResult::sum(parts, "phase"))).collect()
}

/// `numerator / denominator` with the numerator's status.
pub(crate) fn rate(count: &MetricResult, denominator: Option<f64>, unit: &str) -> RateResult {
    let per = |n: Option<u64>| denominator.filter(|d| *d > 0.0).and_then(|d| n.map(|n| n as f64 / d));
    let (status, value, known_value) = match (count.status, denominator.filter(|d| *d > 0.0)) {
        (_, None) | (Status::Unavailable, _) => (Status::Unavailable, None, None),
        (Status::Complete, _) => (Status::Complete, per(count.value), per(count.value)),
        (Status::Partial, _) => (Status::Partial, None, per(count.known_value)),
    };
    RateResult { status, value, known_value, unit: unit.into() }
}

/// The report of `steps`; `peak`: the device's peak FLOP/s, for MFU.
pub fn throughput_report(steps: Vec<StepTiming>, peak: Option<f64>, keep_steps: bool) -> Result<ThroughputReport> {
    if let Some(bad) = steps.iter().find(|s| !s.seconds.is_finite() || s.seconds < 0.0) {
        return Err(Error::BadArgument(format!(
            "a step's seconds must be finite and not negative, got {}",
            bad.seconds
        )));
    }
    if let Some(peak) = peak.filter(|p| !p.is_finite() || *p <= 0.0) {
        return Err(Error::BadArgument(format!("peak_flops must be a positive number of FLOP/s, got {peak}")));
    }
    if steps.iter().any(|s| s.count == 0) {
        return Err(Error::BadArgument("a step record's count must be at least 1".into()));
    }
    let count = steps.iter().try_fold(0u64, |total, s| total.checked_add(s.count));
    let Some(count) = count else {
        return Err(Error::BadArgument("the step records' counts overflow 2^64".into()));
    };
    let flops = summed(&steps);
    let by_phase = summed_phases(&steps);
    let seconds: f64 = steps.iter().map(|s| s.seconds).sum();
    let flops_per_second = rate(&flops, Some(seconds), "FLOP/s");
    // MFU: the FLOP rate over the peak, with the rate's status.
    let mfu = match peak {
        Some(peak) => RateResult {
            status: flops_per_second.status,
            value: flops_per_second.value.map(|v| v / peak),
            known_value: flops_per_second.known_value.map(|v| v / peak),
            unit: "fraction".into(),
        },
        None => RateResult { status: Status::Unavailable, value: None, known_value: None, unit: "fraction".into() },
    };
    Ok(ThroughputReport {
        schema_version: SCHEMA_VERSION,
        steps: count,
        seconds,
        flops,
        by_phase,
        flops_per_second,
        peak_flops_per_second: peak,
        mfu,
        per_step: if keep_steps { steps } else { Vec::new() },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::METHOD_NATIVE;

    fn step(status: Status, value: Option<u64>, known: Option<u64>, seconds: f64) -> StepTiming {
        StepTiming {
            flops: MetricResult {
                status,
                value,
                known_value: known,
                unit: "FLOPs".into(),
                scope: "workload".into(),
                method: METHOD_NATIVE.into(),
            },
            by_phase: BTreeMap::new(),
            seconds,
            count: 1,
        }
    }

    #[test]
    fn rate_and_mfu_of_complete_steps() {
        // Two steps of 3e9 and 5e9 FLOPs in 0.5 s and 1.5 s: 8e9 FLOPs in 2 s = 4e9 FLOP/s;
        // against a 1e10 FLOP/s peak, an MFU of 0.4.
        let steps = vec![
            step(Status::Complete, Some(3_000_000_000), Some(3_000_000_000), 0.5),
            step(Status::Complete, Some(5_000_000_000), Some(5_000_000_000), 1.5),
        ];
        let report = throughput_report(steps, Some(1e10), false).unwrap();
        assert_eq!((report.steps, report.seconds), (2, 2.0));
        assert_eq!((report.flops.status, report.flops.value), (Status::Complete, Some(8_000_000_000)));
        assert_eq!(report.flops_per_second.value, Some(4e9));
        assert_eq!((report.mfu.status, report.mfu.value), (Status::Complete, Some(0.4)));
        assert!(report.per_step.is_empty());
    }

    #[test]
    fn a_partial_step_makes_lower_bounds_and_no_peak_no_mfu() {
        let steps = vec![step(Status::Complete, Some(100), Some(100), 1.0), step(Status::Partial, None, Some(60), 1.0)];
        let report = throughput_report(steps, None, true).unwrap();
        assert_eq!(
            (report.flops.status, report.flops.value, report.flops.known_value),
            (Status::Partial, None, Some(160))
        );
        assert_eq!(
            (report.flops_per_second.status, report.flops_per_second.value, report.flops_per_second.known_value),
            (Status::Partial, None, Some(80.0))
        );
        assert_eq!((report.mfu.status, report.mfu.value), (Status::Unavailable, None));
        assert_eq!(report.per_step.len(), 2);
    }

    #[test]
    fn no_time_no_rate_and_overflow_is_unavailable() {
        let report = throughput_report(vec![step(Status::Complete, Some(5), Some(5), 0.0)], Some(1.0), false).unwrap();
        assert_eq!(report.flops_per_second.status, Status::Unavailable);
        let big = || step(Status::Complete, Some(u64::MAX), Some(u64::MAX), 1.0);
        let report = throughput_report(vec![big(), big()], None, false).unwrap();
        assert_eq!((report.flops.status, report.flops.known_value), (Status::Unavailable, None));
        let report = throughput_report(Vec::new(), None, false).unwrap();
        assert_eq!(
            (report.steps, report.flops.value, report.flops_per_second.status),
            (0, Some(0), Status::Unavailable)
        );
    }

    #[test]
    fn bad_seconds_and_peaks_are_refused_by_value() {
        let error = throughput_report(vec![step(Status::Complete, Some(1), Some(1), -1.0)], None, false).unwrap_err();
        assert!(error.to_string().contains("got -1"), "{error}");
        let error = throughput_report(Vec::new(), Some(0.0), false).unwrap_err();
        assert!(error.to_string().contains("peak_flops must be a positive number of FLOP/s, got 0"), "{error}");
    }

    #[test]
    fn folded_records_count_their_steps() {
        // 3 steps folded (900 FLOPs in 3 s) then one more of 100 in 1 s: 4 steps, 1000 FLOPs
        // in 4 s, 250 FLOP/s, the same as the four records apart.
        let folded = StepTiming { count: 3, ..step(Status::Complete, Some(900), Some(900), 3.0) };
        let report = throughput_report(vec![folded, step(Status::Complete, Some(100), Some(100), 1.0)], None, false);
        let report = report.unwrap();
        assert_eq!((report.steps, report.seconds, report.flops.value), (4, 4.0, Some(1000)));
        assert_eq!(report.flops_per_second.value, Some(250.0));
        let zero = StepTiming { count: 0, ..step(Status::Complete, Some(1), Some(1), 1.0) };
        let error = throughput_report(vec![zero], None, false).unwrap_err();
        assert!(error.to_string().contains("count must be at least 1"), "{error}");
        // A record without a count (every record before folding existed) is one step.
        let parsed: StepTiming = serde_json::from_str(&format!(
            "{{\"flops\": {}, \"seconds\": 1.0}}",
            serde_json::to_string(&step(Status::Complete, Some(1), Some(1), 1.0).flops).unwrap()
        ))
        .unwrap();
        assert_eq!(parsed.count, 1);
    }

    fn phased(phases: &[(&str, MetricResult)], seconds: f64) -> StepTiming {
        let by_phase: BTreeMap<String, MetricResult> =
            phases.iter().map(|(p, m)| ((*p).to_owned(), m.clone())).collect();
        let flops = MetricResult::sum(by_phase.values(), "workload");
        StepTiming { flops, by_phase, seconds, count: 1 }
    }

    #[test]
    fn phases_are_summed_over_the_steps_that_have_them() {
        // Step 1, a training step: forward 60, backward 54, optimizer 15 (the SGD step on a
        // Linear(4, 3) of MIGRATING.md). Step 2: forward 60, a partial backward (50 known), no
        // optimizer step. Step 3, an evaluation step: forward 20 only.
        // forward: 60 + 60 + 20 = 140, complete; backward: 54 + 50 = 104 known, partial (step 2's
        // is); optimizer: 15, step 1's alone, complete.
        let c = |v| MetricResult::complete(v, "phase");
        let steps = vec![
            phased(&[("forward", c(60)), ("backward", c(54)), ("optimizer", c(15))], 1.0),
            phased(&[("forward", c(60)), ("backward", MetricResult::partial(50, "phase"))], 1.0),
            phased(&[("forward", c(20))], 1.0),
        ];
        let report = throughput_report(steps, None, true).unwrap();
        fn phase<'a>(report: &'a ThroughputReport, p: &str) -> (Status, Option<u64>, Option<u64>, &'a str) {
            let m = &report.by_phase[p];
            (m.status, m.value, m.known_value, m.scope.as_str())
        }
        assert_eq!(phase(&report, "forward"), (Status::Complete, Some(140), Some(140), "phase"));
        assert_eq!(phase(&report, "backward"), (Status::Partial, None, Some(104), "phase"));
        assert_eq!(phase(&report, "optimizer"), (Status::Complete, Some(15), Some(15), "phase"));
        assert_eq!(report.by_phase.len(), 3);
        // The total: 129 + 110 + 20 = 259 known (60 + 54 + 15, 60 + 50, 20), partial.
        assert_eq!((report.flops.status, report.flops.known_value), (Status::Partial, Some(259)));
        // Each kept step keeps its own phases.
        assert_eq!(report.per_step[2].by_phase.keys().collect::<Vec<_>>(), ["forward"]);
        assert_eq!(report.per_step[0].by_phase["optimizer"].value, Some(15));
        // Folding (a record summing steps 1 and 2, as Throughput folds) then step 3 gives the
        // same phases as the three records apart.
        let steps = vec![
            phased(&[("forward", c(60)), ("backward", c(54)), ("optimizer", c(15))], 1.0),
            phased(&[("forward", c(60)), ("backward", MetricResult::partial(50, "phase"))], 1.0),
        ];
        let first = throughput_report(steps, None, false).unwrap();
        let folded = StepTiming { flops: first.flops, by_phase: first.by_phase, seconds: first.seconds, count: 2 };
        let report = throughput_report(vec![folded, phased(&[("forward", c(20))], 1.0)], None, false).unwrap();
        assert_eq!(phase(&report, "forward"), (Status::Complete, Some(140), Some(140), "phase"));
        assert_eq!(phase(&report, "backward"), (Status::Partial, None, Some(104), "phase"));
        assert_eq!(phase(&report, "optimizer"), (Status::Complete, Some(15), Some(15), "phase"));
        // Steps without phases (records of torchscan before 0.3) give none.
        let report = throughput_report(vec![step(Status::Complete, Some(5), Some(5), 1.0)], None, false).unwrap();
        assert!(report.by_phase.is_empty());
    }
}
