//! The text tables of a FlopReport (`torchscan.utils.format_flops`, the CLI's `--flops-by`):
//! FLOPs by module (the module tree), by operator or by category, each row with its share of
//! the total and, for modules, the status of its number; a header with the total and its
//! status, a footer with the phases. Shares are of the total's counted part, so a partial
//! total's shares say so.

use std::cmp::Ordering;

use crate::error::{Error, Result};
use crate::module_tree::components;
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

/// The worse of two statuses (unavailable, then partial, then complete).
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

/// One row of the module tree: a labelled module, or a module above labelled ones that no call
/// labelled itself (a ModuleList: its FLOPs are its children's).
struct ModuleRow<'a> {
    parts: Vec<&'a str>,
    flops: Option<u64>,
    status: Option<Status>,
    /// Where the module comes in `order` (its first labelled call), or its first child's.
    rank: usize,
}

/// The module tree's rows: every labelled module and the modules above them, each subtree
/// after its root, siblings in call order (their place in `order`; modules `order` lacks after
/// those, in tree order), so that a module is never drawn under the sibling called before it.
fn module_rows(
    report: &FlopReport,
    whole: Option<u64>,
    max_depth: Option<usize>,
    order: &[String],
) -> Vec<Vec<String>> {
    let ranks: std::collections::HashMap<&str, usize> =
        order.iter().enumerate().rev().map(|(i, label)| (label.as_str(), i)).collect();
    let mut rows: std::collections::BTreeMap<String, ModuleRow> = std::collections::BTreeMap::new();
    // The modules never called that hold parameters have rows too (0 FLOPs, as a container's
    // children summed), after their called siblings.
    for label in report.by_module_status.keys().chain(report.by_module.keys()).chain(&report.uncalled_modules) {
        let parts = components(label);
        for depth in 1..=parts.len() {
            let prefix = parts[..depth].join(".");
            let own = depth == parts.len();
            let rank = ranks.get(label.as_str()).copied().unwrap_or(usize::MAX);
            let row = rows.entry(prefix).or_insert_with(|| ModuleRow {
                parts: parts[..depth].to_vec(),
                flops: None,
                status: None,
                rank,
            });
            row.rank = row.rank.min(rank);
            if own {
                row.flops = report.by_module.get(label).copied();
                row.status = report.by_module_status.get(label).copied();
            }
        }
    }
    // A module no call labelled sums its children (deepest first, so theirs are known).
    let mut keys: Vec<String> = rows.keys().cloned().collect();
    keys.sort_by_key(|key| std::cmp::Reverse(components(key).len()));
    for key in &keys {
        let labelled = report.by_module.contains_key(key) || report.by_module_status.contains_key(key);
        if labelled {
            continue;
        }
        let depth = components(key).len();
        let prefix = format!("{key}.");
        let children: Vec<&ModuleRow> =
            rows.iter().filter(|(k, r)| k.starts_with(&prefix) && r.parts.len() == depth + 1).map(|(_, r)| r).collect();
        let flops = children.iter().try_fold(0u64, |sum, child| child.flops.and_then(|f| sum.checked_add(f)));
        let status = children.iter().filter_map(|child| child.status).reduce(worse);
        if let Some(row) = rows.get_mut(key) {
            row.flops = flops;
            // No number (a child's count overflowed): at best unavailable.
            row.status = if flops.is_none() { Some(status.unwrap_or(Status::Unavailable)) } else { status };
        }
    }
    let mut sorted: Vec<&ModuleRow> =
        rows.values().filter(|row| max_depth.is_none_or(|depth| row.parts.len() <= depth + 1)).collect();
    // Depth first: at the first component where two paths part, the earlier-called subtree first.
    let rank_of = |parts: &[&str]| rows.get(&parts.join(".")).map_or(usize::MAX, |row| row.rank);
    sorted.sort_by(|a, b| {
        let common = a.parts.iter().zip(&b.parts).take_while(|(x, y)| x == y).count();
        if common == a.parts.len() || common == b.parts.len() {
            return a.parts.len().cmp(&b.parts.len());
        }
        let (x, y) = (&a.parts[..=common], &b.parts[..=common]);
        rank_of(x).cmp(&rank_of(y)).then_with(|| tree_order(x, y))
    });
    let mut out = Vec::with_capacity(sorted.len() + 1);
    let mut roots = 0u64;
    for row in sorted {
        let depth = row.parts.len() - 1;
        let name = if depth == 0 { row.parts.join(".") } else { row.parts[depth].to_string() };
        let name = format!("{}{}", "  ".repeat(depth), printable(&name));
        let cells = match row.flops {
            Some(flops) => {
                if depth == 0 {
                    roots = roots.saturating_add(flops);
                }
                let status = row.status.map_or("", status_name);
                vec![name, thousands(flops), share(flops, whole), status.to_string()]
            }
            // A count that overflowed has no number.
            None => vec![name, "-".into(), "-".into(), row.status.map_or("unavailable", status_name).to_string()],
        };
        out.push(cells);
    }
    // Work no labelled module call ran (a loss or an optimizer step outside the model).
    if let Some(whole) = whole.filter(|&w| w > roots) {
        let rest = whole - roots;
        out.push(vec!["(outside the modules)".into(), thousands(rest), share(rest, Some(whole)), String::new()]);
    }
    out
}

fn sorted_by_flops<'a>(map: impl Iterator<Item = (&'a String, &'a u64)>) -> Vec<(&'a String, u64)> {
    let mut items: Vec<(&String, u64)> = map.map(|(k, &v)| (k, v)).collect();
    items.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    items
}

/// The table of `report` by `by`; `max_depth` limits the module tree (0: the roots alone),
/// `max_width` (a terminal's width) narrows the name column to fit. `order`: module labels in
/// call order (an AnalysisReport's layers), which the module tree's siblings follow; without
/// it they are in tree order (indices as numbers).
pub fn format_flops(
    report: &FlopReport,
    by: By,
    max_depth: Option<usize>,
    max_width: Option<usize>,
    order: &[String],
) -> Result<String> {
    let whole = counted(&report.total);
    let table = match by {
        By::Module => Table {
            headers: vec!["Module", "FLOPs", "Share", "Status"],
            numeric: vec![false, true, true, false],
            rows: module_rows(report, whole, max_depth, order),
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
        let text = format_flops(&complete(), By::Module, None, None, &[]).unwrap();
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
    fn an_uncalled_module_gets_a_row_with_no_flops_after_its_called_siblings() {
        // `Sequential.3`, never called, holds parameters: a row of 0 FLOPs (0.0% of 1,976), no
        // status (a container's convention), after the called siblings 0, 1, 2.
        let mut r = complete();
        r.uncalled_modules = vec!["Sequential.3".into()];
        let order: Vec<String> =
            ["Sequential", "Sequential.0", "Sequential.1", "Sequential.2"].map(String::from).into();
        let text = format_flops(&r, By::Module, Some(1), None, &order).unwrap();
        let rows: Vec<&str> = text.lines().skip(3).take(6).collect();
        assert_eq!(
            rows,
            vec![
                "Sequential             1,968  99.6%  complete",
                "  0                    1,056  53.4%  complete",
                "  1                       64   3.2%  complete",
                "  2                      848  42.9%  complete",
                "  3                        0   0.0%",
                "(outside the modules)      8   0.4%",
            ]
        );
    }

    #[test]
    fn siblings_follow_the_call_order_and_an_unlabelled_container_gets_a_row() {
        // Sequential.2 called first; and, its label removed, a module no call labelled (a
        // ModuleList): its row sums its children, 776 + 72 = 848 (42.9% of 1,976).
        let mut r = complete();
        r.by_module.remove("Sequential.2");
        r.by_module_status.remove("Sequential.2");
        let order: Vec<String> =
            ["Sequential", "Sequential.2.0", "Sequential.2.1", "Sequential.0", "Sequential.1"].map(String::from).into();
        let text = format_flops(&r, By::Module, None, None, &order).unwrap();
        let rows: Vec<&str> = text.lines().skip(3).take(6).collect();
        assert_eq!(
            rows,
            vec![
                "Sequential             1,968  99.6%  complete",
                "  2                      848  42.9%  complete",
                "    0                    776  39.3%  complete",
                "    1                     72   3.6%  complete",
                "  0                    1,056  53.4%  complete",
                "  1                       64   3.2%  complete",
            ]
        );
        // Without an order: tree order, the container still there.
        let text = format_flops(&r, By::Module, None, None, &[]).unwrap();
        assert!(text
            .contains("  1                       64   3.2%  complete\n  2                      848  42.9%  complete"));
        // A child without a number (an overflowed count): the container has none either.
        r.by_module.remove("Sequential.2.1");
        r.by_module_status.insert("Sequential.2.1".into(), Status::Partial);
        let text = format_flops(&r, By::Module, None, None, &order).unwrap();
        assert!(text.contains("\n  2                        -      -  partial\n"), "{text}");
    }

    #[test]
    fn max_depth_keeps_the_upper_levels() {
        let text = format_flops(&complete(), By::Module, Some(0), None, &[]).unwrap();
        assert!(text.contains("Sequential             1,968  99.6%  complete\n(outside"), "{text}");
        let text = format_flops(&complete(), By::Module, Some(1), None, &[]).unwrap();
        assert_eq!(text.lines().filter(|l| l.starts_with("    ")).count(), 0);
        assert_eq!(text.lines().filter(|l| l.starts_with("  ") && !l.starts_with("   ")).count(), 3);
    }

    #[test]
    fn operators_by_flops_with_calls_and_categories() {
        let text = format_flops(&complete(), By::Operator, None, None, &[]).unwrap();
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
        let text = format_flops(&complete(), By::Category, None, None, &[]).unwrap();
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
            format_flops(&report(metric("partial", None, Some(1976), "workload")), By::Category, None, None, &[])
                .unwrap();
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
        let text = format_flops(&complete(), By::Module, None, Some(36), &[]).unwrap();
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
        let text = format_flops(&r, By::Operator, None, None, &[]).unwrap();
        assert!(
            text.ends_with(
                "Collectives (ring convention, this rank): 3 call(s), at least 17,792 bytes sent, at least 8,896 received (partial)"
            ),
            "{text}"
        );
        assert!(!format_flops(&complete(), By::Operator, None, None, &[]).unwrap().contains("Collectives"));
    }

    #[test]
    fn bad_by_is_refused_by_name() {
        let error = By::parse("layer").unwrap_err().to_string();
        assert!(error.contains("by must be 'module', 'operator' or 'category', got \"layer\""), "{error}");
    }
}
