//! The text table `summary` prints, rendered from an AnalysisReport exactly as torchscan 0.2
//! lays it out: columns Layer / Type / Output Shape / Param # / Trainable (+ receptive field,
//! effective stride and padding on request), then the parameter, size and metric-total lines
//! (`known` before a partial value).

use crate::error::{Error, Result};
use crate::report::{AnalysisReport, Layer, Metric, Status, ValueMeta};

const HEADERS: [&str; 8] = [
    "Layer",
    "Type",
    "Output Shape",
    "Param #",
    "Trainable",
    "Receptive field",
    "Effective stride",
    "Effective padding",
];
// Param # is wider than torchscan 0.2's 15 for a pruned layer's "(N unmasked)".
const MAX_WIDTHS: [usize; 8] = [27, 20, 25, 27, 9, 15, 16, 17];
const MARGIN: &str = "    ";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wrap {
    Mid,
    End,
    None,
}

impl Wrap {
    pub fn parse(mode: Option<&str>) -> Result<Wrap> {
        match mode {
            Some("mid") => Ok(Wrap::Mid),
            Some("end") => Ok(Wrap::End),
            None => Ok(Wrap::None),
            Some(other) => Err(Error::BadArgument(format!("wrap_mode must be 'mid', 'end' or None, got {other:?}"))),
        }
    }
}

pub(crate) fn chars(s: &str) -> usize {
    s.chars().count()
}

/// Python's `s[:n]` (a negative `n` counts from the end).
fn prefix(s: &str, n: isize) -> String {
    let len = chars(s) as isize;
    let end = if n < 0 { (len + n).max(0) } else { n.min(len) };
    s.chars().take(end as usize).collect()
}

pub(crate) fn wrap_string(s: &str, max_len: usize, mode: Wrap) -> String {
    const WRAP: &str = "[...]";
    if chars(s) <= max_len || mode == Wrap::None {
        return s.to_string();
    }
    match mode {
        Wrap::End => prefix(s, max_len as isize - chars(WRAP) as isize) + WRAP,
        _ => {
            let last = s.rsplit('.').next().unwrap_or(s);
            let tail = format!("{WRAP}.{last}");
            prefix(s, max_len as isize - chars(&tail) as isize) + &tail
        }
    }
}

/// Pads to `width` then truncates to it (Python `f"{s:<{w}}"` then `f"{s:.{w}}"`).
fn fit(s: &str, width: Option<usize>) -> String {
    match width {
        Some(w) => format!("{s:<w$}").chars().take(w).collect(),
        None => s.to_string(),
    }
}

fn tree_name(name: &str, depth: u64) -> String {
    match depth {
        0 => name.to_string(),
        1 => format!("├─{name}"),
        d => format!("{}└─{name}", "|    ".repeat(d as usize - 1)),
    }
}

fn shape_text(meta: &ValueMeta) -> String {
    let items = |items: &[ValueMeta]| items.iter().map(shape_text).collect::<Vec<_>>().join(", ");
    match meta {
        ValueMeta::Tensor { shape, .. } if shape.len() == 1 => format!("({},)", shape[0]),
        ValueMeta::Tensor { shape, .. } => {
            format!("({})", shape.iter().map(u64::to_string).collect::<Vec<_>>().join(", "))
        }
        ValueMeta::Tuple { items: values } => format!("({})", items(values)),
        ValueMeta::List { items: values } => format!("[{}]", items(values)),
        ValueMeta::Mapping { items: entries, .. } => {
            format!("{{{}}}", entries.iter().map(|e| shape_text(&e.value)).collect::<Vec<_>>().join(", "))
        }
        ValueMeta::None => "none".into(),
        ValueMeta::Scalar { .. } => "scalar".into(),
        ValueMeta::Object { .. } => "object".into(),
        ValueMeta::Cycle { depth } => format!("<cycle {depth} up>"),
    }
}

pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The number a metric stands for: its value when complete, else its known lower bound.
fn metric_number(metric: &Metric) -> Option<f64> {
    let number = if metric.status == Status::Complete { metric.value } else { metric.known_value };
    number.map(|n| n.as_f64())
}

/// A complete count (parameters, bytes); `None` when it is not (2^64 or more).
fn count(metric: &Metric) -> Option<u64> {
    metric.value.and_then(|n| n.integer()).and_then(|v| u64::try_from(v).ok())
}

/// A total count as the table shows it.
fn count_text(metric: &Metric) -> String {
    count(metric).map_or_else(|| "unavailable (>= 2^64)".to_string(), thousands)
}

/// The Param # cell: parameters and buffers (torchscan 0.2), and for a pruned layer the
/// parameters its masks keep.
fn param_text(elements: Option<u64>, effective: Option<u64>) -> String {
    let elements = elements.map_or_else(|| ">= 2^64".to_string(), thousands);
    match effective {
        Some(kept) => format!("{elements} ({} unmasked)", thousands(kept)),
        None => elements,
    }
}

fn cells(layer: &Layer, widths: &[Option<usize>; 8], wrap: Wrap) -> [String; 8] {
    let name = tree_name(&layer.name, layer.depth);
    let name_limit = widths[0].map_or(100, |w| w + 3);
    let params = &layer.parameters;
    // A count of 2^64 or more (null in the report) is shown as such.
    let owned = params.trainable.zip(params.frozen).and_then(|(t, f)| t.checked_add(f));
    let elements = owned.zip(layer.buffers.elements).and_then(|(p, b)| p.checked_add(b));
    let rf = |metric: &Option<Metric>| match metric.as_ref().and_then(metric_number) {
        Some(v) => format!("{v:.0}"),
        None => "?".to_string(),
    };
    [
        fit(&wrap_string(&name, name_limit, wrap), widths[0]),
        // A lazy module's call materialized its parameters: marked, as torchinfo marks it.
        fit(&if layer.lazy { format!("{} (lazy)", layer.type_name) } else { layer.type_name.clone() }, widths[1]),
        // A submodule inside TorchScript: listed, its calls (and shapes) not seen.
        fit(
            &wrap_string(
                &layer.output.as_ref().map_or_else(|| "?".into(), shape_text),
                widths[2].unwrap_or(100),
                Wrap::End,
            ),
            widths[2],
        ),
        fit(&param_text(elements, params.effective), widths[3]),
        fit(
            if owned == Some(0) {
                "-"
            } else if params.trainable != Some(0) {
                "True"
            } else {
                "False"
            },
            widths[4],
        ),
        fit(&rf(&layer.metrics.receptive_field), widths[5]),
        fit(&rf(&layer.metrics.effective_stride), widths[6]),
        fit(&rf(&layer.metrics.effective_padding), widths[7]),
    ]
}

fn unit_scale(v: f64) -> (f64, &'static str) {
    for (scale, prefix) in [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")] {
        if (v / scale).floor() > 0.0 {
            return (v / scale, prefix);
        }
    }
    (v, "")
}

fn total_line(name: &str, metric: &Metric) -> String {
    let complete = metric.status == Status::Complete;
    match metric_number(metric) {
        None => format!("{name}: unavailable"),
        Some(v) => {
            let (scaled, prefix) = unit_scale(v);
            let unit = metric.unit.name();
            format!("{name}: {}{scaled:.2} {prefix}{unit}", if complete { "" } else { "known " })
        }
    }
}

/// Narrowest the Layer, Type and Output Shape columns become to fit `max_width`.
const MIN_WIDTHS: [usize; 3] = [12, 8, 10];

/// Narrows the Layer, then the Output Shape, then the Type column (never below [`MIN_WIDTHS`])
/// until the row is at most `max_width` characters; other columns keep their width.
fn fit_to(widths: &mut [usize; 8], columns: usize, max_width: usize) {
    let length = widths[..columns].iter().sum::<usize>() + (columns - 1) * MARGIN.len();
    let mut excess = length.saturating_sub(max_width);
    for column in [0, 2, 1] {
        let cut = excess.min(widths[column].saturating_sub(MIN_WIDTHS[column]));
        widths[column] -= cut;
        excess -= cut;
    }
}

/// The table for `report` (`format_info` in Python), as torchscan 0.2 draws it; with
/// `max_width` (a terminal's width) the name, shape and type columns narrow to fit it.
pub fn format_info(
    report: &AnalysisReport,
    wrap: Wrap,
    receptive_field: bool,
    effective_rf_stats: bool,
    max_width: Option<usize>,
) -> Result<String> {
    let (layers, totals) = (&report.layers, &report.totals);
    let mut widths: [usize; 8] = HEADERS.map(chars);
    for layer in layers {
        for (w, cell) in widths.iter_mut().zip(cells(layer, &[None; 8], wrap)) {
            *w = (*w).max(chars(&cell));
        }
    }
    for (w, max) in widths.iter_mut().zip(MAX_WIDTHS) {
        *w = (*w).min(max);
    }
    let columns = if !receptive_field {
        5
    } else if !effective_rf_stats {
        6
    } else {
        8
    };
    if let Some(max_width) = max_width {
        fit_to(&mut widths, columns, max_width);
    }
    let length = widths[..columns].iter().sum::<usize>() + (columns - 1) * MARGIN.len();
    let (thin, thick, dots) = ("_".repeat(length), "=".repeat(length), "-".repeat(length));
    let fixed: [Option<usize>; 8] = widths.map(Some);
    let mut lines = vec![thin.clone()];
    lines.push(HEADERS[..columns].iter().zip(widths).map(|(h, w)| format!("{h:<w$}")).collect::<Vec<_>>().join(MARGIN));
    lines.push(thick.clone());
    for layer in layers {
        lines.push(cells(layer, &fixed, wrap)[..columns].join(MARGIN));
    }
    lines.push(thick);
    lines.push(format!("Trainable params: {}", count_text(&totals.trainable_parameters)));
    lines.push(format!("Non-trainable params: {}", count_text(&totals.frozen_parameters)));
    lines.push(format!("Total params: {}", count_text(&totals.parameters)));
    let pruned =
        layers.iter().any(|layer| layer.parameters.effective.is_some() || layer.metrics.effective_macs.is_some());
    if let Some(effective) = totals.effective_parameters.as_ref().filter(|_| pruned) {
        lines.push(format!("Unmasked params (pruning masks applied): {}", count_text(effective)));
    }
    lines.push(dots.clone());
    match count(&totals.parameter_bytes).zip(count(&totals.buffer_bytes)) {
        Some((parameters, buffers)) => {
            let size = (parameters as f64 + buffers as f64) / 1024f64.powi(2);
            lines.push(format!("Model size (params + buffers): {size:.2} Mb"));
        }
        None => lines.push("Model size (params + buffers): unavailable (>= 2^64 bytes)".to_string()),
    }
    lines.push(dots);
    for (label, metric) in [
        ("Module-formula forward FLOPs", &totals.module_flops),
        ("Multiply-Accumulations", &totals.macs),
        ("Direct memory accesses", &totals.dmas),
        ("Operator forward FLOPs", &totals.operator_flops),
    ] {
        lines.push(total_line(label, metric));
        if let Some(effective) = totals.effective_macs.as_ref().filter(|_| pruned && label.starts_with("Multiply")) {
            lines.push(total_line("Unmasked Multiply-Accumulations (pruning masks applied)", effective));
        }
    }
    if !report.diagnostics.is_empty() {
        lines.push(format!("Diagnostics: {} (inspect report['diagnostics'])", report.diagnostics.len()));
    }
    lines.push(thin);
    Ok(lines.join("\n"))
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    fn metric(v: u64, unit: &str) -> Value {
        json!({"status": "complete", "value": v, "known_value": v, "unit": unit, "scope": "s", "method": "m"})
    }

    fn tensor(shape: Value) -> Value {
        json!({"kind": "tensor", "shape": shape, "dtype": "torch.float32", "device": "cpu", "requires_grad": false})
    }

    /// torchscan 0.2's README example: summary(nn.Conv2d(3, 8, 3), (3, 32, 32)).
    fn conv_json() -> Value {
        let flops = json!({
            "schema_version": 1, "context": {"torch_version": "2.13.0", "torchscan_version": "0.3.0", "method": "m"},
            "total": {"status": "complete", "value": 388_800, "known_value": 388_800, "unit": "FLOPs",
                      "scope": "workload", "method": "m"},
            "by_module": {}, "by_module_status": {}, "by_operator": {}, "operator_calls": {}, "by_category": {},
            "by_phase": {}, "ignored_operators": {}, "diagnostics": [],
        });
        json!({
            "schema_version": 1,
            "context": {"torchscan_version": "0.3.0", "torch_version": "2.13.0", "python_version": "3.11.2",
                        "model_type": "torch.nn.modules.conv.Conv2d", "execution_mode": "evaluation_no_grad",
                        "training_before": true, "devices": ["cpu"], "dtypes": ["torch.float32"]},
            "inputs": {"source": "generated", "args": [tensor(json!([1, 3, 32, 32]))], "kwargs": {}},
            "layers": [{"path": "", "call_index": 0, "name": "conv2d", "depth": 0, "type": "Conv2d",
                        "input": {"args": [tensor(json!([1, 3, 32, 32]))], "kwargs": {}},
                        "output": tensor(json!([1, 8, 30, 30])),
                        "parameters": {"trainable": 224, "frozen": 0, "bytes": 896, "shared": false},
                        "buffers": {"elements": 0, "bytes": 0, "shared": false},
                        "metrics": {"calls": metric(1, "calls"), "receptive_field": metric(3, "elements")}}],
            "operator_flops": flops,
            "totals": {"parameters": metric(224, "elements"), "trainable_parameters": metric(224, "elements"),
                       "frozen_parameters": metric(0, "elements"), "parameter_bytes": metric(896, "bytes"),
                       "buffer_bytes": metric(0, "bytes"), "buffer_elements": metric(0, "elements"),
                       "module_flops": metric(388_800, "FLOPs"), "macs": metric(194_400, "MACs"),
                       "dmas": metric(201_824, "DMAs"), "operator_flops": metric(388_800, "FLOPs")},
            "diagnostics": [],
        })
    }

    fn report(value: Value) -> AnalysisReport {
        serde_json::from_value(value).unwrap()
    }

    fn conv_report() -> AnalysisReport {
        report(conv_json())
    }

    #[test]
    fn reproduces_the_reference_table() {
        let table = format_info(&conv_report(), Wrap::Mid, false, false, None).unwrap();
        let trimmed: Vec<&str> = table.lines().map(str::trim_end).collect();
        assert_eq!(
            trimmed,
            vec![
                "__________________________________________________________",
                "Layer     Type      Output Shape      Param #    Trainable",
                "==========================================================",
                "conv2d    Conv2d    (1, 8, 30, 30)    224        True",
                "==========================================================",
                "Trainable params: 224",
                "Non-trainable params: 0",
                "Total params: 224",
                "----------------------------------------------------------",
                "Model size (params + buffers): 0.00 Mb",
                "----------------------------------------------------------",
                "Module-formula forward FLOPs: 388.80 kFLOPs",
                "Multiply-Accumulations: 194.40 kMACs",
                "Direct memory accesses: 201.82 kDMAs",
                "Operator forward FLOPs: 388.80 kFLOPs",
                "__________________________________________________________",
            ]
        );
    }

    #[test]
    fn partial_and_unavailable_totals_and_rf_columns() {
        let mut r = conv_json();
        r["totals"]["macs"] =
            json!({"status": "partial", "value": null, "known_value": 0, "unit": "MACs", "scope": "s", "method": "m"});
        r["totals"]["dmas"] = json!({"status": "unavailable", "value": null, "known_value": null, "unit": "DMAs",
            "scope": "s", "method": "m"});
        r["diagnostics"] = json!([{"code": "x", "severity": "warning", "metric": "macs", "message": "m"}]);
        let r = report(r);
        let table = format_info(&r, Wrap::Mid, true, false, None).unwrap();
        assert!(table.contains("Multiply-Accumulations: known 0.00 MACs"));
        assert!(table.contains("Direct memory accesses: unavailable"));
        assert!(table.contains("Diagnostics: 1 (inspect report['diagnostics'])"));
        assert!(table.lines().nth(1).unwrap().contains("Receptive field"));
        assert!(table.lines().nth(3).unwrap().trim_end().ends_with('3'));
    }

    #[test]
    fn helpers() {
        assert_eq!(thousands(11_689_512), "11,689,512");
        assert_eq!(tree_name("conv1", 2), "|    └─conv1");
        assert_eq!(wrap_string("features.denseblock1.denselayer1", 20, Wrap::Mid), "fea[...].denselayer1");
        assert_eq!(wrap_string("abcdefghij", 8, Wrap::End), "abc[...]");
        let meta = |v: Value| serde_json::from_value::<ValueMeta>(v).unwrap();
        assert_eq!(shape_text(&meta(tensor(json!([4])))), "(4,)");
        assert_eq!(shape_text(&meta(json!({"kind": "tuple", "items": [{"kind": "none"}]}))), "(none)");
        let mapping = json!({"kind": "mapping", "type": "dict", "items": [
            {"key": "a", "key_type": "str", "value": tensor(json!([2, 3]))},
            {"key_type": "tuple", "value": {"kind": "scalar", "type": "int"}}]});
        assert_eq!(shape_text(&meta(json!({"kind": "list", "items": [mapping]}))), "[{(2, 3), scalar}]");
        assert!(Wrap::parse(Some("start")).is_err());
    }

    #[test]
    fn max_width_narrows_the_name_shape_and_type_columns() {
        let r = conv_report();
        let wide = format_info(&r, Wrap::Mid, false, false, None).unwrap();
        let full = wide.lines().next().unwrap().chars().count();
        // Never below the minimum widths: an impossible width gives the narrowest table.
        let tiny = format_info(&r, Wrap::Mid, false, false, Some(10)).unwrap();
        let floor = tiny.lines().next().unwrap().chars().count();
        assert!(floor > 10 && floor < full, "{floor} {full}");
        let target = full - 1;
        let narrow = format_info(&r, Wrap::Mid, false, false, Some(target)).unwrap();
        assert_eq!(narrow.lines().next().unwrap().chars().count(), target);
        assert!(narrow.lines().take(4).all(|l| l.chars().count() <= target), "{narrow}");
        assert_eq!(format_info(&r, Wrap::Mid, false, false, Some(1000)).unwrap(), wide);
    }
}
