//! A closed session into its FlopReport: the custom-formula calls to price, their results, and
//! the report's maps, statuses and diagnostics.

use std::collections::BTreeMap;

use super::{Category, Class, Counter, Phase, Session, Signature, COMPILED_GRAPH_OPERATOR, OPERATOR_DIAGNOSTIC_METRIC};
use crate::args::{index_stream, Args};
use crate::formulas::{self, FormulaError};
use crate::report::{
    packet_name, Diagnostic, FlopContext, FlopReport, IgnoredCount, IntegerOps, MetricResult, Severity, Status,
    FLOP_SCHEMA_VERSION, METHOD_NATIVE, TORCHSCAN_VERSION,
};
use crate::scopes::CALL_PREFIX;

/// The stats of all overloads of one operator name, for the report.
struct Merged {
    class: Class,
    calls: u64,
    flops: u64,
    float_flops: u64,
    overflowed: bool,
    errors: u64,
    first_error: Option<FormulaError>,
}

impl Default for Merged {
    fn default() -> Self {
        Merged {
            class: Class::Transparent,
            calls: 0,
            flops: 0,
            float_flops: 0,
            overflowed: false,
            errors: 0,
            first_error: None,
        }
    }
}

impl Session {
    /// The custom-formula calls to price, as JSON: `[{"operator", "positional_args", "inputs",
    /// "outputs"}]`, inputs and outputs in the `args.rs` encoding. Index = signature id.
    pub fn pending_custom_json(&self) -> String {
        let mut ordered: Vec<(&Signature, usize)> = self.signatures.iter().map(|(s, &i)| (s, i)).collect();
        ordered.sort_by_key(|&(_, id)| id);
        let list: Vec<serde_json::Value> = ordered
            .into_iter()
            .map(|(s, _)| {
                serde_json::json!({
                    "operator": packet_name(&self.ops[s.op].name),
                    "positional_args": self.ops[s.op].positional_args,
                    "inputs": decoded(&s.inputs),
                    "outputs": decoded(&s.outputs),
                })
            })
            .collect();
        serde_json::Value::Array(list).to_string()
    }

    /// Builds the report. `custom` holds one entry per pending signature: its FLOPs per call,
    /// or the name of the exception its formula raised.
    pub fn into_report(mut self, custom: &[CustomResult]) -> crate::error::Result<FlopReport> {
        if custom.len() != self.signatures.len() {
            return Err(crate::error::Error::BadCustomResults(format!(
                "expected {} results, got {}",
                self.signatures.len(),
                custom.len()
            )));
        }
        let mut custom_errors: BTreeMap<usize, (u64, String)> = BTreeMap::new();
        let mut by_signature = vec![0usize; self.signatures.len()];
        for (s, &id) in &self.signatures {
            by_signature[id] = s.op;
        }
        let calls: Vec<((usize, u32, u8), u64)> = std::mem::take(&mut self.custom_calls).into_iter().collect();
        for ((id, scope, phase), n) in calls {
            let op = by_signature[id];
            let phase = if phase == Phase::Backward as u8 { Phase::Backward } else { Phase::Forward };
            let category = self.custom_category(&self.ops[op].name);
            match &custom[id] {
                CustomResult::Flops(per_call) => match per_call.checked_mul(n) {
                    Some(f) => self.count(op, category, scope, phase, f),
                    None => self.overflow(op, category, scope, phase),
                },
                CustomResult::Overflow => self.overflow(op, category, scope, phase),
                CustomResult::Raised(exception) => {
                    let entry = custom_errors.entry(op).or_insert((0, exception.clone()));
                    entry.0 += n;
                    self.mark_incomplete(scope, phase);
                }
            }
        }
        Ok(self.assemble(custom_errors))
    }

    fn assemble(self, custom_errors: BTreeMap<usize, (u64, String)>) -> FlopReport {
        let mut operators = self.operators(&custom_errors);
        operators.diagnostics.extend(self.session_diagnostics());
        let (communication, communication_diagnostics) = self.communication();
        operators.diagnostics.extend(communication_diagnostics);
        let (by_module, by_module_status, by_call) = self.module_maps();
        FlopReport {
            schema_version: FLOP_SCHEMA_VERSION,
            context: FlopContext {
                torch_version: self.config.torch_version.clone(),
                torchscan_version: TORCHSCAN_VERSION.to_string(),
                method: METHOD_NATIVE.to_string(),
                distributed: self.config.distributed.clone(),
            },
            total: MetricResult::from_count(self.total.flops, self.total.incomplete, self.total.overflowed, "workload"),
            by_module,
            by_module_status,
            by_call,
            by_operator: operators.by_operator,
            operator_calls: operators.operator_calls,
            by_category: self.by_category(&operators.counted_categories),
            by_phase: self.by_phase(),
            ignored_operators: operators.ignored_operators,
            diagnostics: operators.diagnostics,
            integer_ops: operators.integer_ran.then(|| {
                let i = &self.integer;
                IntegerOps::new(i.flops, i.incomplete, i.overflowed, operators.integer_by_operator)
            }),
            communication,
            uncalled_modules: Vec::new(),
        }
    }

    /// Every operator's stats, overloads merged under their operator's name.
    fn merged_ops(&self) -> BTreeMap<&str, Merged> {
        let mut merged: BTreeMap<&str, Merged> = BTreeMap::new();
        for s in &self.ops {
            let e = merged.entry(s.name.as_str()).or_insert(Merged { class: s.class, ..Merged::default() });
            if s.class == Class::Uncounted {
                e.class = Class::Uncounted;
            }
            e.calls += s.calls;
            e.flops = e.flops.saturating_add(s.flops);
            e.float_flops = e.float_flops.saturating_add(s.float_flops);
            e.overflowed |= s.overflowed;
            e.errors += s.formula_errors;
            e.first_error = e.first_error.or(s.first_error);
        }
        merged
    }

    /// `registered` for an operator priced by its library's flop-counter formula, `custom` for
    /// one the caller priced.
    fn custom_category(&self, name: &str) -> Category {
        if self.config.registered_operators.iter().any(|r| r == name) {
            Category::Registered
        } else {
            Category::Custom
        }
    }

    /// The per-operator maps and diagnostics.
    fn operators(&self, custom_errors: &BTreeMap<usize, (u64, String)>) -> Operators {
        let mut out = Operators::default();
        for (name, m) in self.merged_ops() {
            let packet = packet_name(name);
            let integer = matches!(m.class, Class::Formula(i) if !formulas::FORMULAS[i].category.is_flops());
            out.integer_ran |= integer && (m.calls > 0 || m.overflowed);
            // An integer kernel's diagnostics are about integer_ops, not FLOPs.
            let about = |d: Diagnostic| if integer { Diagnostic { metric: IntegerOps::UNIT.into(), ..d } } else { d };
            match m.class {
                Class::Formula(i) if m.calls > 0 && !m.overflowed => {
                    if m.calls > m.errors {
                        out.count(&packet, m.flops, m.calls - m.errors, formulas::FORMULAS[i].category);
                        // An integer kernel's floating-point work: FLOPs, under the same name.
                        if formulas::FORMULAS[i].float.is_some() {
                            out.by_operator.insert(packet.clone(), m.float_flops);
                            out.counted_categories[Category::Pointwise as usize] = true;
                        }
                    }
                    if let Some(error) = m.first_error {
                        out.diagnostics.push(about(op_diagnostic(
                            "formula_error",
                            Severity::Error,
                            &packet,
                            format!("{packet}: {} call(s) could not be counted: {}", m.errors, error.describe()),
                        )));
                    }
                }
                Class::Formula(_) if m.overflowed => out.diagnostics.push(about(overflow_diagnostic(&packet))),
                Class::Custom if m.calls > 0 => {
                    let failed = custom_errors.get(&self.op_by_name[name]);
                    if let Some((n, exception)) = failed {
                        out.diagnostics.push(op_diagnostic(
                            "custom_formula_error",
                            Severity::Error,
                            &packet,
                            format!("the custom formula for {packet} raised {exception} on {n} call(s); their work is missing from the total"),
                        ));
                    }
                    let counted = m.calls - failed.map_or(0, |e| e.0);
                    if m.overflowed {
                        out.diagnostics.push(overflow_diagnostic(&packet));
                    } else if counted > 0 {
                        out.count(&packet, m.flops, counted, self.custom_category(name));
                    }
                }
                Class::Ignored(i) if m.calls > 0 => {
                    let reason = formulas::ignored::IGNORED[i].reason.name().to_string();
                    out.ignored_operators.insert(packet, IgnoredCount { calls: m.calls, reason });
                }
                Class::Uncounted if m.calls > 0 => out.diagnostics.push(uncounted_diagnostic(name, &packet, m.calls)),
                _ => {}
            }
        }
        out
    }

    /// Diagnostics about the session rather than one operator: other threads' work, internal
    /// errors, a total past 2^64.
    fn session_diagnostics(&self) -> Vec<Diagnostic> {
        let mut diagnostics = Vec::new();
        if !self.unfollowed.is_empty() {
            let calls: u64 = self.unfollowed.values().sum();
            let mut names: Vec<String> = self.unfollowed.keys().map(|&op| packet_name(&self.ops[op].name)).collect();
            names.sort();
            names.dedup();
            diagnostics.push(session_diagnostic(
                "unfollowed_threads",
                Severity::Warning,
                format!(
                    "{calls} operator call(s) that do arithmetic ({}) ran on threads this session does not \
                     count (a thread pool, a data-parallel helper); their work is missing from the total: \
                     measure with threads=\"all\" to count every thread",
                    names.join(", ")
                ),
            ));
        }
        if self.unlabelled_runs > 0 {
            diagnostics.push(session_diagnostic(
                "unlabelled_compiled_code",
                Severity::Warning,
                format!(
                    "graphs compiled by an AOTAutograd backend (aot_eager) ran {} time(s) without a price \
                     (symbolic sizes, activation checkpointing inside the graph, or a tracing failure): their \
                     operators are counted in the total, but the modules inside the compiled region ran no \
                     call of their own, so by_module gives their work to the module call around the region \
                     (none when the compiled module is the root) and misses the modules inside it; compile \
                     with static shapes, or measure the model uncompiled, for by_module",
                    self.unlabelled_runs
                ),
            ));
        }
        if self.internal_errors > 0 {
            diagnostics.push(session_diagnostic(
                "internal_error",
                Severity::Error,
                format!(
                    "{} operator event(s) could not be processed (an internal error in torchscan's native core: \
                     please report it); the total is a lower bound",
                    self.internal_errors
                ),
            ));
        }
        if self.total.overflowed {
            diagnostics.push(session_diagnostic(
                "flop_overflow",
                Severity::Error,
                "the total FLOP count exceeds 2^64; it is reported as unavailable".into(),
            ));
        }
        diagnostics
    }

    fn by_category(&self, counted: &[bool; Category::ALL.len()]) -> BTreeMap<String, u64> {
        let mut by_category = BTreeMap::new();
        for category in Category::ALL {
            let flops = self.categories[category as usize];
            if flops == u64::MAX {
                continue; // overflowed: the flop_overflow diagnostic says so
            }
            if flops > 0 || counted[category as usize] {
                by_category.insert(category.name().to_string(), flops);
            }
        }
        by_category
    }

    fn by_phase(&self) -> BTreeMap<String, MetricResult> {
        let mut by_phase = BTreeMap::new();
        let phase_metric = |c: &Counter| MetricResult::from_count(c.flops, c.incomplete, c.overflowed, "phase");
        by_phase.insert("forward".to_string(), phase_metric(&self.phases[0]));
        if self.backward_seen {
            by_phase.insert("backward".to_string(), phase_metric(&self.phases[1]));
        }
        if self.optimizer.seen {
            by_phase.insert("optimizer".to_string(), phase_metric(&self.optimizer.counted));
        }
        by_phase
    }

    /// `by_module`, `by_module_status` and the per-call counts (`crawl_module`'s layers).
    fn module_maps(&self) -> ModuleMaps {
        let (calls, labels): (BTreeMap<_, _>, BTreeMap<_, _>) =
            self.scopes.by_label().into_iter().partition(|(label, _)| label.starts_with(CALL_PREFIX));
        let by_module_status = labels.iter().map(|(label, c)| (label.clone(), c.status)).collect();
        let by_module = labels.into_iter().filter_map(|(label, c)| Some((label, c.flops?))).collect();
        let by_call = calls
            .into_iter()
            .map(|(label, c)| {
                let metric = match c.flops {
                    Some(v) => MetricResult::from_count(v, c.status == Status::Partial, false, "module_call"),
                    None => MetricResult::unavailable("module_call"),
                };
                (label.trim_start_matches(CALL_PREFIX).to_string(), metric)
            })
            .collect();
        (by_module, by_module_status, by_call)
    }
}

type ModuleMaps = (BTreeMap<String, u64>, BTreeMap<String, Status>, BTreeMap<String, MetricResult>);

/// The per-operator parts of a report, built together.
#[derive(Default)]
struct Operators {
    by_operator: BTreeMap<String, u64>,
    operator_calls: BTreeMap<String, u64>,
    counted_categories: [bool; Category::ALL.len()],
    ignored_operators: BTreeMap<String, IgnoredCount>,
    diagnostics: Vec<Diagnostic>,
    /// Integer kernels: their operations by operator, and whether any ran.
    integer_by_operator: BTreeMap<String, u64>,
    integer_ran: bool,
}

impl Operators {
    fn count(&mut self, packet: &str, flops: u64, calls: u64, category: Category) {
        if !category.is_flops() {
            self.integer_by_operator.insert(packet.to_string(), flops);
            self.operator_calls.insert(packet.to_string(), calls);
            return;
        }
        self.by_operator.insert(packet.to_string(), flops);
        self.operator_calls.insert(packet.to_string(), calls);
        self.counted_categories[category as usize] = true;
    }
}

/// Why an operator without a formula that ran `calls` times is missing from the total.
fn uncounted_diagnostic(name: &str, packet: &str, calls: u64) -> Diagnostic {
    if name == COMPILED_GRAPH_OPERATOR {
        return op_diagnostic(
            "uncounted_compiled_code",
            Severity::Warning,
            packet,
            format!(
                "graphs compiled by torch.compile's inductor backend ran {calls} time(s) without a price (symbolic \
                 sizes, or compiled outside torchscan's reach): their generated kernels run outside the \
                 dispatcher, so their work is missing from the total (the operators they dispatch, such as \
                 matrix products, are counted); compile with static shapes, or measure the model uncompiled, \
                 for an exact total"
            ),
        );
    }
    if let Some(reason) = formulas::quantize::uncounted_reason(name) {
        return op_diagnostic(
            "deliberately_uncounted",
            Severity::Warning,
            packet,
            format!(
                "{packet} ran {calls} time(s): {reason}; its work is not in the total (if your calls' cost is \
                 known, pass custom_mapping={{torch.ops.{packet}: formula}}, a function of the input and output \
                 shapes)"
            ),
        );
    }
    op_diagnostic(
        "uncounted_operator",
        Severity::Warning,
        packet,
        format!(
            "{packet} ran {calls} time(s) and has no FLOP formula; its work is missing from the total (to count it, \
             pass custom_mapping={{torch.ops.{packet}: formula}}, a function of the input and output shapes)"
        ),
    )
}

fn session_diagnostic(code: &str, severity: Severity, message: String) -> Diagnostic {
    Diagnostic {
        code: code.into(),
        severity,
        metric: OPERATOR_DIAGNOSTIC_METRIC.into(),
        message,
        path: None,
        operator: None,
    }
}

/// An encoded argument stream as JSON for a custom formula: tensors as `{"shape": [...]}`,
/// numbers and booleans as themselves, lists as lists, anything else as `null`.
fn decoded(stream: &[i64]) -> serde_json::Value {
    use crate::args::Arg;
    use serde_json::{json, Value};
    let mut offsets = Vec::new();
    if !index_stream(stream, &mut offsets) {
        return Value::Array(Vec::new());
    }
    let args = Args::new(stream, &offsets);
    let shape = |dims: &[i64]| json!({ "shape": dims });
    let values = (0..args.len()).map(|i| match args.get(i) {
        Some(Arg::Tensor(t)) => shape(t.dims),
        Some(Arg::Sparse(t)) => shape(t.tensor.dims),
        Some(Arg::Int(v)) => json!(v),
        Some(Arg::Double(v)) => json!(v),
        Some(Arg::Bool(v)) => json!(v),
        Some(Arg::IntList(v)) => json!(v),
        Some(Arg::BoolList(v)) => json!(v.iter().map(|&b| b != 0).collect::<Vec<_>>()),
        Some(Arg::TensorList(n, mut rest)) => {
            let mut list = Vec::with_capacity(n);
            while list.len() < n && rest.len() >= 2 {
                let ndim = rest[1].max(0) as usize;
                list.push(shape(&rest[2..(2 + ndim).min(rest.len())]));
                rest = &rest[(2 + ndim).min(rest.len())..];
            }
            Value::Array(list)
        }
        _ => Value::Null,
    });
    Value::Array(values.collect())
}

/// What a custom formula said of one call signature.
#[derive(Clone, Debug, PartialEq)]
pub enum CustomResult {
    /// FLOPs per call.
    Flops(u64),
    /// 2^64 FLOPs or more per call: an overflow, reported as a built-in formula's is.
    Overflow,
    /// The formula raised this exception (its type's name).
    Raised(String),
}

/// Parses the custom-formula results Python sends back: one entry per pending signature, a
/// non-negative integer (FLOPs per call; 2^64 or more is an overflow) or
/// `{"error": "ExceptionName"}`.
pub fn parse_custom_results(text: &str) -> crate::error::Result<Vec<CustomResult>> {
    use crate::error::Error;
    let value: serde_json::Value = serde_json::from_str(if text.trim().is_empty() { "[]" } else { text })
        .map_err(|e| Error::BadCustomResults(format!("not JSON ({e})")))?;
    let list = value.as_array().ok_or_else(|| Error::BadCustomResults("expected a JSON list".into()))?;
    list.iter()
        .enumerate()
        .map(|(i, item)| {
            if let Some(n) = item.as_u64() {
                return Ok(CustomResult::Flops(n));
            }
            // An integer beyond u64 is read as the nearest float: 2^64 or more.
            if item.as_f64().is_some_and(|v| v >= 18_446_744_073_709_551_616.0) {
                return Ok(CustomResult::Overflow);
            }
            match item.get("error").and_then(|e| e.as_str()) {
                Some(name) => Ok(CustomResult::Raised(name.to_string())),
                None => Err(Error::BadCustomResults(format!(
                    "entry {i} is neither a non-negative integer nor {{\"error\": name}}"
                ))),
            }
        })
        .collect()
}

fn op_diagnostic(code: &str, severity: Severity, packet: &str, message: String) -> Diagnostic {
    Diagnostic { operator: Some(packet.to_string()), ..session_diagnostic(code, severity, message) }
}

fn overflow_diagnostic(packet: &str) -> Diagnostic {
    op_diagnostic(
        "flop_overflow",
        Severity::Error,
        packet,
        format!("the FLOPs of {packet} exceed 2^64; the totals that include them are unavailable"),
    )
}
