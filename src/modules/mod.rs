//! Module formulas: FLOPs, MACs, DMAs (memory accesses) and the receptive-field triple of one
//! `nn.Module` call, from a plain descriptor that Python extracts (the module's attributes and
//! the shapes of its first input and output tensors). Conventions follow torchscan 0.2's module
//! formulas with its count corrections (dense padded convolutions, exact adaptive windows, ...);
//! each family file states its formulas.
//!
//! A descriptor of a family this crate does not know is `Unsupported`: callers report a partial
//! metric and a diagnostic, never a silent zero.

mod activation;
pub(crate) mod attention;
mod conv;
mod embedding;
pub(crate) mod linear;
pub(crate) mod norm;
mod pool;
mod recurrent;
mod transformer;

use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};

/// One module call, as Python describes it. `input`/`output`: shapes of the first input and
/// output tensors.
#[derive(Clone, Debug, Deserialize)]
pub struct Call {
    #[serde(default)]
    pub input: Option<Vec<i64>>,
    #[serde(default)]
    pub output: Option<Vec<i64>>,
    #[serde(flatten)]
    pub module: Module,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "family", rename_all = "snake_case")]
pub enum Module {
    Identity,
    Flatten,
    Linear(linear::Linear),
    Activation(activation::Activation),
    Conv(conv::Conv),
    ConvTranspose(conv::ConvTranspose),
    BatchNorm(norm::BatchNorm),
    LayerNorm(norm::LayerNorm),
    RmsNorm(norm::RmsNorm),
    GroupNorm(norm::GroupNorm),
    Movement(activation::Movement),
    Softmax(activation::Softmax),
    Interpolate(activation::Interpolate),
    Embedding(embedding::Embedding),
    RotaryEmbedding(embedding::Rotary),
    Recurrent(recurrent::Recurrent),
    MaxPool(pool::Pool),
    AvgPool(pool::Pool),
    AdaptiveMaxPool(pool::Adaptive),
    AdaptiveAvgPool(pool::Adaptive),
    Dropout(activation::Dropout),
    MultiheadAttention(attention::Mha),
    Transformer(transformer::Transformer),
    /// Anything else: `type` is the class name, for the diagnostic.
    Unsupported {
        #[serde(rename = "type")]
        type_name: String,
    },
}

/// Why a formula gave no number.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Failure {
    /// The module type (or this metric of it) has no formula: `Module type not supported: <Type>`.
    Unsupported(String),
    /// The call cannot be priced (arguments the formula does not cover): the message says why.
    Error(String),
    /// The call exposed no input (or output) tensor to price.
    MissingTensor(String),
    /// The metric has no meaning for this module (a receptive field across all positions): not
    /// a gap in the formulas, so no diagnostic; the metric says `not_applicable`, and why.
    NotApplicable(String),
}

pub type Count = Result<u64, Failure>;

/// (input shape, output shape, input elements, output elements) of one call.
type Sizes<'a> = (&'a [i64], &'a [i64], u64, u64);

/// A receptive-field number: an integer where the formula gives one (kernel sizes), a float
/// otherwise (strides of transposed convolutions, adaptive paddings), as torchscan 0.2.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum RfNumber {
    Int(i64),
    Float(f64),
}

pub type Rf = Result<[RfNumber; 3], Failure>;

pub(crate) const POINTWISE_RF: [RfNumber; 3] = [RfNumber::Float(1.0), RfNumber::Float(1.0), RfNumber::Float(0.0)];

/// The four metrics of one call. Each crosses to Python as `{"value": ...}` or as its failure,
/// tagged by kind (`{"unsupported": "MyBlock"}`, `{"error": "..."}`, `{"missing_tensor": "..."}`),
/// not in serde's `Ok`/`Err` layout of a Rust `Result`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Metrics {
    #[serde(serialize_with = "outcome")]
    pub flops: Result<u64, Failure>,
    #[serde(serialize_with = "outcome")]
    pub macs: Result<u64, Failure>,
    #[serde(serialize_with = "outcome")]
    pub dmas: Result<u64, Failure>,
    #[serde(serialize_with = "outcome")]
    pub receptive_field: Rf,
}

/// A metric's wire form (see [`Metrics`]).
fn outcome<T: Serialize, S: Serializer>(result: &Result<T, Failure>, serializer: S) -> Result<S::Ok, S::Error> {
    match result {
        Ok(value) => {
            let mut map = serializer.serialize_map(Some(1))?;
            map.serialize_entry("value", value)?;
            map.end()
        }
        Err(failure) => failure.serialize(serializer),
    }
}

pub(crate) fn err(message: impl Into<String>) -> Failure {
    Failure::Error(message.into())
}

pub(crate) fn overflow() -> Failure {
    err("the count exceeds 2^64")
}

/// Checked helpers: module counts are exact integers or an error, never a wrapped number.
pub(crate) fn numel(shape: &[i64]) -> Result<u64, Failure> {
    shape.iter().try_fold(1u64, |acc, &d| {
        let d = u64::try_from(d).map_err(|_| err("a tensor shape has a negative size"))?;
        acc.checked_mul(d).ok_or_else(overflow)
    })
}

pub(crate) fn product(values: &[u64]) -> Result<u64, Failure> {
    values.iter().try_fold(1u64, |acc, &v| acc.checked_mul(v).ok_or_else(overflow))
}

pub(crate) fn sum(values: &[u64]) -> Result<u64, Failure> {
    values.iter().try_fold(0u64, |acc, &v| acc.checked_add(v).ok_or_else(overflow))
}

pub(crate) fn positive(value: i64, what: &str) -> Result<u64, Failure> {
    u64::try_from(value).map_err(|_| err(format!("{what} must not be negative")))
}

fn shape<'a>(shape: &'a Option<Vec<i64>>, which: &str) -> Result<&'a [i64], Failure> {
    shape.as_deref().ok_or_else(|| Failure::MissingTensor(format!("the module call exposed no {which} tensor")))
}

impl Call {
    pub fn metrics(&self) -> Metrics {
        Metrics { flops: self.flops(), macs: self.macs(), dmas: self.dmas(), receptive_field: self.receptive_field() }
    }

    fn shapes(&self) -> Result<(&[i64], &[i64]), Failure> {
        Ok((shape(&self.input, "input")?, shape(&self.output, "output")?))
    }

    /// Input and output shapes with their element counts (a family priced by its shapes needs
    /// both tensors: a missing one is an error naming the side).
    fn sizes(&self) -> Result<Sizes<'_>, Failure> {
        let (input, output) = self.shapes()?;
        Ok((input, output, numel(input)?, numel(output)?))
    }

    pub fn flops(&self) -> Count {
        use Module::*;
        let shapes = || self.shapes();
        match &self.module {
            Identity | Flatten => Ok(0),
            Unsupported { type_name } => Err(Failure::Unsupported(type_name.clone())),
            MultiheadAttention(m) => m.flops(),
            Transformer(m) => m.flops(),
            Linear(m) => m.flops(shapes()?.0),
            Activation(m) => m.flops(shapes()?.0),
            Conv(m) => m.flops(shapes()?.1),
            ConvTranspose(m) => shapes().and_then(|(input, output)| m.flops(input, output)),
            BatchNorm(m) => m.flops(shapes()?.0),
            LayerNorm(m) => m.flops(shapes()?.0),
            RmsNorm(m) => m.flops(shapes()?.0),
            GroupNorm(m) => m.flops(shapes()?.0),
            Movement(_) => Ok(0),
            Softmax(m) => m.flops(shapes()?.0),
            Interpolate(m) => m.flops(shapes()?.1),
            Embedding(m) => m.flops(),
            RotaryEmbedding(m) => m.flops(numel(shapes()?.1)?),
            Recurrent(m) => m.flops(shapes()?.0),
            MaxPool(m) => pool::max_flops(m, shapes()?.1),
            AvgPool(m) => pool::avg_flops(m, shapes()?.1),
            AdaptiveMaxPool(m) => shapes().and_then(|(input, output)| pool::adaptive_max_flops(m, input, output)),
            AdaptiveAvgPool(m) => shapes().and_then(|(input, output)| pool::adaptive_avg_flops(m, input, output)),
            Dropout(m) => m.flops(shapes()?.0),
        }
    }

    pub fn macs(&self) -> Count {
        use Module::*;
        let shapes = || self.shapes();
        match &self.module {
            Identity | Flatten | Activation(_) | Dropout(_) | RotaryEmbedding(_) | Movement(_) | Softmax(_) => Ok(0),
            Interpolate(m) => m.flops(shapes()?.1),
            GroupNorm(m) => m.macs(shapes()?.0),
            Embedding(m) => m.flops(),
            RmsNorm(m) => m.macs(shapes()?.0),
            Recurrent(m) => m.macs(shapes()?.0),
            Unsupported { type_name } => Err(Failure::Unsupported(type_name.clone())),
            Transformer(_) => Err(Failure::Unsupported("Transformer".into())),
            MultiheadAttention(m) => m.macs(),
            Linear(m) => m.macs(shapes()?.1),
            Conv(m) => m.macs(shapes()?.1),
            ConvTranspose(m) => m.macs(shapes()?.0),
            BatchNorm(m) => m.macs(shapes()?.0),
            LayerNorm(m) => m.macs(shapes()?.0),
            MaxPool(m) => pool::max_flops(m, shapes()?.1),
            AvgPool(m) => pool::avg_macs(m, shapes()?.1),
            AdaptiveMaxPool(m) => shapes().and_then(|(input, output)| pool::adaptive_max_flops(m, input, output)),
            AdaptiveAvgPool(m) => shapes().and_then(|(input, output)| pool::adaptive_avg_macs(m, input, output)),
        }
    }

    pub fn dmas(&self) -> Count {
        use Module::*;
        let sizes = || self.sizes();
        match &self.module {
            Unsupported { type_name } => Err(Failure::Unsupported(type_name.clone())),
            Transformer(_) => Err(Failure::Unsupported("Transformer".into())),
            MultiheadAttention(m) => m.dmas(),
            Identity => Ok(sizes()?.2),
            Flatten => sizes()?.2.checked_mul(2).ok_or_else(overflow),
            Linear(m) => sizes().and_then(|(_, _, n_in, n_out)| m.dmas(n_in, n_out)),
            Activation(m) => sizes().and_then(|(_, _, n_in, n_out)| m.dmas(n_in, n_out)),
            Conv(m) => m.dmas(sizes()?.3),
            ConvTranspose(m) => m.dmas(sizes()?.3),
            BatchNorm(m) => sizes().and_then(|(_, _, n_in, n_out)| m.dmas(n_in, n_out)),
            LayerNorm(m) => m.dmas(sizes()?.0),
            RmsNorm(m) => m.dmas(sizes()?.0),
            GroupNorm(m) => m.dmas(sizes()?.0),
            Movement(_) | Softmax(_) | Interpolate(_) => sizes().and_then(|(_, _, n_in, n_out)| sum(&[n_in, n_out])),
            Embedding(m) => sizes().and_then(|(_, _, n_in, n_out)| m.dmas(n_in, n_out)),
            RotaryEmbedding(m) => m.dmas(sizes()?.3),
            Recurrent(m) => sizes().and_then(|(_, _, n_in, n_out)| m.dmas(n_in, n_out)),
            MaxPool(m) => pool::max_dmas(m, sizes()?.1),
            AvgPool(m) => pool::avg_dmas(m, sizes()?.1),
            AdaptiveMaxPool(m) => sizes().and_then(|(input, output, _, _)| pool::adaptive_max_dmas(m, input, output)),
            AdaptiveAvgPool(m) => sizes().and_then(|(input, output, _, _)| pool::adaptive_avg_dmas(m, input, output)),
            Dropout(m) => sizes().and_then(|(_, _, n_in, n_out)| m.dmas(n_in, n_out)),
        }
    }

    pub fn receptive_field(&self) -> Rf {
        use Module::*;
        match &self.module {
            Identity | Flatten | Linear(_) | Activation(_) | BatchNorm(_) | Dropout(_) | Embedding(_) => {
                Ok(POINTWISE_RF)
            }
            Conv(m) => m.receptive_field(),
            ConvTranspose(m) => m.receptive_field(),
            MaxPool(m) => pool::windowed_rf(m, true),
            AvgPool(m) => pool::windowed_rf(m, false),
            AdaptiveMaxPool(_) | AdaptiveAvgPool(_) => {
                let (input, output) = self.shapes()?;
                pool::adaptive_rf(input, output)
            }
            // Normalizing a token's (or position's) own features is pointwise; normalizing over
            // several trailing dimensions mixes positions: no receptive field to state.
            LayerNorm(m) if m.normalized_shape.len() == 1 => Ok(POINTWISE_RF),
            LayerNorm(_) => Err(Failure::NotApplicable("it normalizes across positions".into())),
            Recurrent(_) => Err(Failure::NotApplicable("each step depends on every earlier step".into())),
            GroupNorm(_) => Err(Failure::NotApplicable("it normalizes across positions".into())),
            Softmax(_) => Err(Failure::NotApplicable("it normalizes across its dimension".into())),
            Interpolate(_) => Err(Failure::NotApplicable("it resamples positions".into())),
            Movement(m) => match m.padding {
                Some(p) => Ok([RfNumber::Float(1.0), RfNumber::Float(1.0), RfNumber::Float(p as f64)]),
                None => Err(Failure::NotApplicable("it moves positions".into())),
            },
            RmsNorm(_) | RotaryEmbedding(_) => Ok(POINTWISE_RF),
            // No receptive-field formula (as in torchscan 0.2): reported, not guessed.
            MultiheadAttention(_) => Err(Failure::Unsupported("MultiheadAttention".into())),
            Transformer(_) => Err(Failure::Unsupported("Transformer".into())),
            Unsupported { type_name } => Err(Failure::Unsupported(type_name.clone())),
        }
    }
}

/// Parses a JSON list of calls and returns a JSON list of their metrics (one FFI round trip
/// for a whole analysis). A malformed descriptor is that call's error, not the batch's.
pub fn metrics_json(calls: &str) -> crate::error::Result<String> {
    let values: Vec<serde_json::Value> = serde_json::from_str(calls)
        .map_err(|e| crate::error::Error::BadAnalysisInput(format!("module descriptors are not a JSON list ({e})")))?;
    let results: Vec<serde_json::Value> = values
        .into_iter()
        .map(|value| match serde_json::from_value::<Call>(value) {
            Ok(call) => serde_json::to_value(call.metrics()).unwrap_or(serde_json::Value::Null),
            Err(e) => {
                let failure = err(format!("malformed module descriptor: {e}"));
                let metrics = Metrics {
                    flops: Err(failure.clone()),
                    macs: Err(failure.clone()),
                    dmas: Err(failure.clone()),
                    receptive_field: Err(failure),
                };
                serde_json::to_value(metrics).unwrap_or(serde_json::Value::Null)
            }
        })
        .collect();
    Ok(serde_json::Value::Array(results).to_string())
}

#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// A call from JSON, for the family tests.
    pub fn call(json: serde_json::Value) -> Call {
        serde_json::from_value(json).expect("test descriptor")
    }
}

#[cfg(test)]
mod tests {
    use super::testing::call;
    use super::*;
    use serde_json::json;

    #[test]
    fn metrics_cross_as_values_or_tagged_failures() {
        let calls = json!([
            {"family": "identity", "input": [1, 8], "output": [1, 8]},
            {"family": "unsupported", "type": "MyBlock", "input": [1], "output": [1]},
            {"family": "linear"},
        ]);
        let out: serde_json::Value = serde_json::from_str(&metrics_json(&calls.to_string()).unwrap()).unwrap();
        assert_eq!(out[0]["flops"], json!({"value": 0}));
        assert_eq!(out[0]["dmas"], json!({"value": 8}));
        assert_eq!(out[0]["receptive_field"], json!({"value": [1.0, 1.0, 0.0]}));
        assert_eq!(out[1]["macs"], json!({"unsupported": "MyBlock"}));
        let malformed = out[2]["flops"]["error"].as_str().unwrap();
        assert!(malformed.starts_with("malformed module descriptor: missing field"), "{malformed}");
        assert_eq!(out[2]["receptive_field"], out[2]["flops"]);
        assert!(metrics_json("{").is_err());
    }

    #[test]
    fn identity_flatten_and_unsupported() {
        let id = call(json!({"family": "identity", "input": [1, 8], "output": [1, 8]}));
        assert_eq!(id.metrics(), Metrics { flops: Ok(0), macs: Ok(0), dmas: Ok(8), receptive_field: Ok(POINTWISE_RF) });
        let flat = call(json!({"family": "flatten", "input": [1, 8], "output": [1, 8]}));
        assert_eq!(flat.dmas(), Ok(16));
        let other = call(json!({"family": "unsupported", "type": "MyBlock", "input": [1], "output": [1]}));
        assert_eq!(other.flops(), Err(Failure::Unsupported("MyBlock".into())));
        assert_eq!(other.receptive_field(), Err(Failure::Unsupported("MyBlock".into())));
    }

    #[test]
    fn missing_tensors_are_errors_naming_the_side() {
        let l = call(json!({"family": "linear", "in_features": 8, "out_features": 4, "bias": true, "num_params": 36}));
        assert_eq!(l.flops(), Err(Failure::MissingTensor("the module call exposed no input tensor".into())));
    }
}
