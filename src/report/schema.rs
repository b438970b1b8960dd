//! The JSON Schemas of the reports, generated from the report model. The files in
//! `python/torchscan/schemas/` are these, checked in so that users (and the package) can read
//! them without the library; a test fails when they are stale (`make schemas` rewrites them).

use schemars::generate::SchemaSettings;
use schemars::transform::{RecursiveTransform, Transform};
use schemars::{JsonSchema, Schema};

use super::{AnalysisReport, FlopReport, MergedReport, ReportDiff, ThroughputReport};

/// `(file name, schema)` of every report.
pub fn schemas() -> [(&'static str, Schema); 5] {
    [
        (
            "flop_report.json",
            schema_of::<FlopReport>(
                "torchscan FlopReport (schema_version 2; 1 reads as 2 without communication)",
                "The report of torchscan.measure_flops and count_flops(...).report(). See docs/schema.md.",
            ),
        ),
        (
            "analysis_report.json",
            schema_of::<AnalysisReport>(
                "torchscan AnalysisReport (schema_version 1)",
                "The report of torchscan.crawl_module and summary, as `torchscan --json` writes it. See docs/schema.md.",
            ),
        ),
        (
            "report_diff.json",
            schema_of::<ReportDiff>(
                "torchscan ReportDiff (schema_version 1)",
                "The result of torchscan.compare_reports, as `torchscan compare --json` writes it. See docs/schema.md.",
            ),
        ),
        (
            "throughput_report.json",
            schema_of::<ThroughputReport>(
                "torchscan ThroughputReport (schema_version 1)",
                "The report of torchscan.Throughput: FLOP/s and MFU of counted, timed steps. See docs/schema.md.",
            ),
        ),
        (
            "merged_report.json",
            schema_of::<MergedReport>(
                "torchscan MergedReport (schema_version 2)",
                "Every rank's FlopReport as one: torchscan.merge_reports, gather_reports and `torchscan merge`. See docs/distributed.md.",
            ),
        ),
    ]
}

fn schema_of<T: JsonSchema>(title: &str, description: &str) -> Schema {
    let mut schema = SchemaSettings::draft2020_12().into_generator().into_root_schema_for::<T>();
    // `format: uint64` and the like are Rust's storage, not the contract: JSON has one number type.
    RecursiveTransform(|s: &mut Schema| {
        s.remove("format");
    })
    .transform(&mut schema);
    schema.insert("title".into(), title.into());
    schema.insert("description".into(), description.into());
    schema
}

/// The text of a schema file: pretty JSON with a final newline.
pub fn schema_text(schema: &Schema) -> String {
    let mut text = serde_json::to_string_pretty(schema).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checked-in schemas are generated from the model; `TORCHSCAN_BLESS=1` rewrites them.
    #[test]
    fn checked_in_schemas_are_generated_from_the_report_model() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python/torchscan/schemas");
        let mut stale = Vec::new();
        for (name, schema) in schemas() {
            let path = dir.join(name);
            let expected = schema_text(&schema);
            if std::env::var_os("TORCHSCAN_BLESS").is_some() {
                std::fs::write(&path, &expected).expect("the schema directory is writable");
            }
            if std::fs::read_to_string(&path).ok().as_deref() != Some(expected.as_str()) {
                stale.push(name);
            }
        }
        assert!(stale.is_empty(), "{stale:?} are stale: run `make schemas`");
    }
}
