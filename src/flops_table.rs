//! The text tables of a FlopReport (`torchscan.utils.format_flops`, the CLI's `--flops-by`):
//! FLOPs by module (the module tree), by operator or by category, each row with its share of
//! the total and, for modules, the status of its number; a header with the total and its
//! status, a footer with the phases. Shares are of the total's counted part, so a partial
//! total's shares say so.

use std::cmp::Ordering;

use crate::error::{Error, Result};
use crate::report::{FlopReport, MetricResult, Status};
use crate::summary::{chars, thousands, wrap_string, Wrap};

/// What the rows are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum By {
    Module,
    Operator,
    Category,
}

impl By {
    pub fn parse(by: &str) -> Result<By> {
        match by {
            "module" => Ok(By::Module),
            "operator" => Ok(By::Operator),
            "category" => Ok(By::Category),
            other => Err(Error::BadArgument(format!("by must be 'module', 'operator' or 'category', got {other:?}"))),
        }
    }
}

const MARGIN: &str = "  ";
/// The name column's widest and narrowest (when fitting `max_width`).
const NAME_MAX: usize = 60;
const NAME_MIN: usize = 12;

fn status_name(status: Status) -> &'static str {
    match status {
        Status::Complete => "complete",
        Status::Partial => "partial",
        Status::Unavailable => "unavailable",
    }
}

/// A name as a terminal may print it: control characters (an escape sequence in an attribute
/// name) written as `\xNN` / `\u{...}`, never sent raw.
pub(crate) fn printable(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c.is_control() {
            let code = c as u32;
            if code < 0x100 {
                out.push_str(&format!("\\x{code:02x}"));
            } else {
                out.push_str(&format!("\\u{{{code:x}}}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A module label's components: split at its dots, not at escaped ones (`\.`, see `_names.py`).
fn components(label: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (bytes, mut start, mut i) = (label.as_bytes(), 0, 0);
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'.' => {
                parts.push(&label[start..i]);
                start = i + 1;
                i += 1;
            }
            _ => i += 1,
        }
    }
    parts.push(&label[start.min(label.len())..]);
    parts
}

/// Module tree order: component by component, indices (`layer1.10`) as numbers.
fn tree_order(a: &[&str], b: &[&str]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        let order = match (x.parse::<u64>(), y.parse::<u64>()) {
            (Ok(i), Ok(j)) => i.cmp(&j),
            _ => x.cmp(y),
        };
        if order != Ordering::Equal {
            return order;
        }
    }
    a.len().cmp(&b.len())
}

/// The number a total stands for (its value, or the counted part of a partial one).
fn counted(metric: &MetricResult) -> Option<u64> {
    if metric.status == Status::Complete {
        metric.value
    } else {
        metric.known_value
    }
}

fn share(part: u64, whole: Option<u64>) -> String {
    match whole {
        Some(whole) if whole > 0 => format!("{:.1}%", part as f64 * 100.0 / whole as f64),
        _ => "-".into(),
    }
}

fn total_text(metric: &MetricResult) -> String {
    match (metric.status, counted(metric)) {
        (Status::Complete, Some(v)) => format!("{} FLOPs (complete)", thousands(v)),
        (_, Some(v)) => format!("at least {} FLOPs ({})", thousands(v), status_name(metric.status)),
        (status, None) => status_name(status).to_string(),
    }
}

struct Table {
    headers: Vec<&'static str>,
    /// Right-aligned columns (numbers).
    numeric: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    fn render(&self, max_width: Option<usize>) -> Vec<String> {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| chars(h)).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(chars(cell));
            }
        }
        widths[0] = widths[0].min(NAME_MAX);
        if let Some(max_width) = max_width {
            let length = widths.iter().sum::<usize>() + (widths.len() - 1) * MARGIN.len();
            let excess = length.saturating_sub(max_width);
            widths[0] = widths[0].saturating_sub(excess).max(NAME_MIN.min(widths[0]));
        }
        let line = |cells: Vec<String>| {
            let cells: Vec<String> = cells
                .into_iter()
                .enumerate()
                .map(|(i, cell)| {
                    let w = widths[i];
                    if i == 0 {
                        let cell = wrap_string(&cell, w, Wrap::End);
                        format!("{cell:<w$}")
                    } else if self.numeric[i] {
                        format!("{cell:>w$}")
                    } else {
                        format!("{cell:<w$}")
                    }
                })
                .collect();
            cells.join(MARGIN).trim_end().to_string()
        };
        let length = widths.iter().sum::<usize>() + (widths.len() - 1) * MARGIN.len();
        let mut lines = vec![line(self.headers.iter().map(|h| h.to_string()).collect()), "-".repeat(length)];
        lines.extend(self.rows.iter().map(|row| line(row.clone())));
        lines
    }
}

fn module_rows(report: &FlopReport, whole: Option<u64>, max_depth: Option<usize>) -> Vec<Vec<String>> {
    let mut labels: Vec<(&String, Vec<&str>)> = report
        .by_module_status
        .keys()
        .chain(report.by_module.keys())
        .map(|label| (label, components(label)))
        .filter(|(_, parts)| max_depth.is_none_or(|depth| parts.len() <= depth + 1))
        .collect();
    labels.sort_by(|a, b| tree_order(&a.1, &b.1));
    labels.dedup_by(|a, b| a.0 == b.0);
    let mut rows = Vec::with_capacity(labels.len() + 1);
    let mut roots = 0u64;
    for (label, parts) in &labels {
        let depth = parts.len() - 1;
        let name = if depth == 0 { label.as_str() } else { parts[depth] };
        let name = format!("{}{}", "  ".repeat(depth), printable(name));
        let status = report.by_module_status.get(*label).copied();
        let row = match report.by_module.get(*label) {
            Some(&flops) => {
                if depth == 0 {
                    roots = roots.saturating_add(flops);
                }
                let status = status.map_or("", status_name);
                vec![name, thousands(flops), share(flops, whole), status.to_string()]
            }
            // A count that overflowed has no number.
            None => vec![name, "-".into(), "-".into(), status.map_or("unavailable", status_name).to_string()],
        };
        rows.push(row);
    }
    // Work no labelled module call ran (a loss or an optimizer step outside the model).
    if let Some(whole) = whole.filter(|&w| w > roots) {
        let rest = whole - roots;
        rows.push(vec!["(outside the modules)".into(), thousands(rest), share(rest, Some(whole)), String::new()]);
    }
    rows
}

fn sorted_by_flops<'a>(map: impl Iterator<Item = (&'a String, &'a u64)>) -> Vec<(&'a String, u64)> {
    let mut items: Vec<(&String, u64)> = map.map(|(k, &v)| (k, v)).collect();
    items.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    items
}

/// The table of `report` by `by`; `max_depth` limits the module tree (0: the roots alone),
/// `max_width` (a terminal's width) narrows the name column to fit.
pub fn format_flops(report: &FlopReport, by: By, max_depth: Option<usize>, max_width: Option<usize>) -> Result<String> {
    let whole = counted(&report.total);
    let table = match by {
        By::Module => Table {
            headers: vec!["Module", "FLOPs", "Share", "Status"],
            numeric: vec![false, true, true, false],
            rows: module_rows(report, whole, max_depth),
        },
        By::Operator => Table {
            headers: vec!["Operator", "Calls", "FLOPs", "Share"],
            numeric: vec![false, true, true, true],
            rows: sorted_by_flops(report.by_operator.iter())
                .into_iter()
                .map(|(op, flops)| {
                    let calls = report.operator_calls.get(op).copied().unwrap_or(0);
                    vec![printable(op), thousands(calls), thousands(flops), share(flops, whole)]
                })
                .collect(),
        },
        By::Category => Table {
            headers: vec!["Category", "FLOPs", "Share"],
            numeric: vec![false, true, true],
            rows: sorted_by_flops(report.by_category.iter())
                .into_iter()
                .map(|(category, flops)| vec![printable(category), thousands(flops), share(flops, whole)])
                .collect(),
        },
    };
    let mut lines = vec![format!("Total: {}", total_text(&report.total))];
    if table.rows.is_empty() {
        let what = match by {
            By::Module => "no module call was labelled",
            By::Operator => "no operator was counted",
            By::Category => "no operator was counted",
        };
        lines.push(format!("({what})"));
    } else {
        lines.extend(table.render(max_width));
    }
    let phases: Vec<String> = ["forward", "backward", "optimizer"]
        .iter()
        .filter_map(|phase| report.by_phase.get(*phase).map(|metric| (phase, metric)))
        .map(|(phase, metric)| match counted(metric) {
            Some(v) if metric.status == Status::Complete => format!("{phase} {} ({})", thousands(v), share(v, whole)),
            Some(v) => format!("{phase} at least {} ({})", thousands(v), status_name(metric.status)),
            None => format!("{phase} {}", status_name(metric.status)),
        })
        .collect();
    if !phases.is_empty() {
        lines.push(format!("Phases: {}", phases.join(", ")));
    }
    if let Some(c) = &report.communication {
        let bound = if c.status == Status::Complete { "" } else { "at least " };
        lines.push(format!(
            "Collectives ({} convention, this rank): {} call(s), {bound}{} bytes sent, {bound}{} received ({})",
            c.convention,
            thousands(c.calls),
            thousands(c.bytes_sent),
            thousands(c.bytes_received),
            status_name(c.status)
        ));
    }
    if report.total.status != Status::Complete {
        lines.push(format!(
            "Not complete: {} diagnostic(s) in the report say what was not counted",
            report.diagnostics.len()
        ));
    }
    Ok(lines.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metric(status: &str, value: Option<u64>, known: Option<u64>, scope: &str) -> serde_json::Value {
        serde_json::json!({"status": status, "value": value, "known_value": known, "unit": "FLOPs",
                           "scope": scope, "method": "torchscan_native_dispatch"})
    }

    /// A training step of Sequential(Linear(8, 16), ReLU, Sequential(Linear(16, 4), Softmax))
    /// on 2 rows with `.sum().backward()` outside the model, as measure_flops reports it (the sum,
    /// 8 FLOPs, runs outside the modules).
    fn report(total: serde_json::Value) -> FlopReport {
        let by_module: serde_json::Value = serde_json::json!({"Sequential": 1968, "Sequential.0": 1056,
            "Sequential.1": 64, "Sequential.2": 848, "Sequential.2.0": 776, "Sequential.2.1": 72});
        let status: serde_json::Map<String, serde_json::Value> =
            by_module.as_object().unwrap().keys().map(|k| (k.clone(), "complete".into())).collect();
        serde_json::from_value(serde_json::json!({
            "schema_version": 1,
            "context": {"torch_version": "2.13.0", "torchscan_version": "0.3.0", "method": "torchscan_native_dispatch"},
            "total": total,
            "by_module": by_module,
            "by_module_status": status,
            "by_operator": {"aten._softmax": 40, "aten._softmax_backward_data": 32, "aten.addmm": 768,
                            "aten.mm": 1024, "aten.relu": 32, "aten.sum": 48, "aten.threshold_backward": 32},
            "operator_calls": {"aten._softmax": 1, "aten._softmax_backward_data": 1, "aten.addmm": 2,
                               "aten.mm": 3, "aten.relu": 1, "aten.sum": 3, "aten.threshold_backward": 1},
            "by_category": {"matmul": 1792, "pointwise": 64, "reduction": 48, "softmax": 72},
            "by_phase": {"backward": metric("complete", Some(1128), Some(1128), "phase"),
                         "forward": metric("complete", Some(848), Some(848), "phase")},
            "ignored_operators": {},
            "diagnostics": []
        }))
        .unwrap()
    }

    fn complete() -> FlopReport {
        report(metric("complete", Some(1976), Some(1976), "workload"))
    }

    #[test]
    fn the_module_tree_with_shares_statuses_and_the_work_outside_it() {
        let text = format_flops(&complete(), By::Module, None, None).unwrap();
        // Shares of 1,976: 1,968 / 1,976 = 99.6%, 1,056 -> 53.4%, 64 -> 3.2%, 848 -> 42.9%,
        // 776 -> 39.3%, 72 -> 3.6%; outside the modules 1,976 - 1,968 = 8 -> 0.4%.
        let expected = "\
Total: 1,976 FLOPs (complete)
Module                 FLOPs  Share  Status
---------------------------------------------
Sequential             1,968  99.6%  complete
  0                    1,056  53.4%  complete
  1                       64   3.2%  complete
  2                      848  42.9%  complete
    0                    776  39.3%  complete
    1                     72   3.6%  complete
(outside the modules)      8   0.4%
Phases: forward 848 (42.9%), backward 1,128 (57.1%)";
        assert_eq!(text, expected);
    }

    #[test]
    fn max_depth_keeps_the_upper_levels() {
        let text = format_flops(&complete(), By::Module, Some(0), None).unwrap();
        assert!(text.contains("Sequential             1,968  99.6%  complete\n(outside"), "{text}");
        let text = format_flops(&complete(), By::Module, Some(1), None).unwrap();
        assert_eq!(text.lines().filter(|l| l.starts_with("    ")).count(), 0);
        assert_eq!(text.lines().filter(|l| l.starts_with("  ") && !l.starts_with("   ")).count(), 3);
    }

    #[test]
    fn operators_by_flops_with_calls_and_categories() {
        let text = format_flops(&complete(), By::Operator, None, None).unwrap();
        let rows: Vec<&str> = text.lines().skip(3).take(3).collect();
        // 1,024 / 1,976 = 51.8%, 768 -> 38.9%, 48 -> 2.4%.
        assert_eq!(
            rows,
            [
                "aten.mm                          3  1,024  51.8%",
                "aten.addmm                       2    768  38.9%",
                "aten.sum                         3     48   2.4%"
            ]
        );
        let text = format_flops(&complete(), By::Category, None, None).unwrap();
        assert!(
            text.contains(
                "matmul     1,792  90.7%\nsoftmax       72   3.6%\npointwise     64   3.2%\nreduction     48   2.4%"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_partial_total_says_so_and_shares_its_counted_part() {
        let text =
            format_flops(&report(metric("partial", None, Some(1976), "workload")), By::Category, None, None).unwrap();
        assert!(text.starts_with("Total: at least 1,976 FLOPs (partial)\n"), "{text}");
        assert!(text.ends_with("Not complete: 0 diagnostic(s) in the report say what was not counted"), "{text}");
    }

    #[test]
    fn names_are_split_at_unescaped_dots_ordered_by_index_and_printable() {
        assert_eq!(components(r"Net.a\.b.0"), vec!["Net", r"a\.b", "0"]);
        let mut labels = vec![vec!["Net", "layer", "10"], vec!["Net", "layer", "2"], vec!["Net"]];
        labels.sort_by(|a, b| tree_order(a, b));
        assert_eq!(labels, vec![vec!["Net"], vec!["Net", "layer", "2"], vec!["Net", "layer", "10"]]);
        assert_eq!(printable("a\u{1b}[31mb\u{9b}"), r"a\x1b[31mb\x9b");
    }

    #[test]
    fn a_narrow_terminal_shortens_the_names() {
        let text = format_flops(&complete(), By::Module, None, Some(36)).unwrap();
        // 45 columns wide, 9 too many: the name column goes from 21 to 12.
        assert!(text.contains("(outsid[...]      8   0.4%"), "{text}");
        let table = text.lines().filter(|l| !l.starts_with("Total") && !l.starts_with("Phases"));
        assert!(table.clone().all(|l| l.chars().count() <= 36), "{text}");
    }

    #[test]
    fn a_report_with_collectives_says_what_they_moved() {
        let mut r = complete();
        r.communication = Some(crate::report::Communication {
            status: Status::Partial,
            convention: "ring".into(),
            calls: 3,
            bytes_sent: 17_792,
            bytes_received: 8_896,
            by_operator: Default::default(),
            by_phase: Default::default(),
            by_module: Default::default(),
        });
        let text = format_flops(&r, By::Operator, None, None).unwrap();
        assert!(
            text.ends_with(
                "Collectives (ring convention, this rank): 3 call(s), at least 17,792 bytes sent, at least 8,896 received (partial)"
            ),
            "{text}"
        );
        assert!(!format_flops(&complete(), By::Operator, None, None).unwrap().contains("Collectives"));
    }

    #[test]
    fn bad_by_is_refused_by_name() {
        let error = By::parse("layer").unwrap_err().to_string();
        assert!(error.contains("by must be 'module', 'operator' or 'category', got \"layer\""), "{error}");
    }
}
