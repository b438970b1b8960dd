//! What a session is opened with: the caller's options, parsed from the JSON the Python layer and
//! the native APIs send.

use std::sync::Mutex;

use crate::report::Distributed;

/// The last configuration text parsed and its result: a loop that opens a session per step
/// (`count_flops` around each training step) sends the same text every time, and parsing it
/// (a JSON document into a map, then the fields) was a tenth of an empty session's cost.
static LAST_PARSED: Mutex<Option<(String, Config)>> = Mutex::new(None);

/// The torch version the native library was compiled against (`none` for the pure core).
pub const BUILT_AGAINST_TORCH: &str = env!("TORCHSCAN_TORCH_VERSION");

/// Options fixed when a session opens.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    pub torch_version: String,
    /// Qualified names of operators the caller counts with its own formulas.
    pub custom_operators: Vec<String>,
    /// Those of `custom_operators` priced by formulas their libraries registered with PyTorch's
    /// flop counter, not by the caller (reported under the `registered` category).
    pub registered_operators: Vec<String>,
    /// Count the operators of every thread, not only the session's own (and autograd's).
    pub all_threads: bool,
    /// Which module calls of the opening thread the session labels (`modules.rs`).
    pub modules: Labelling,
    /// This process's place in a `torch.distributed` job, for the report's context.
    pub distributed: Option<Distributed>,
}

/// Which module calls a session labels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Labelling {
    /// None: the caller pushes its own scopes, if any.
    #[default]
    Off,
    /// The modules the caller named (its roots and their submodules).
    Named,
    /// Every module called: one nobody named is named when first called.
    All,
}

impl Config {
    /// [`Config::from_json`], answered from the last text parsed when `text` is the same.
    /// Errors are not remembered; a poisoned lock only skips the memo.
    pub fn from_json_cached(text: &str) -> crate::error::Result<Config> {
        if let Ok(last) = LAST_PARSED.lock() {
            if let Some((_, config)) = last.as_ref().filter(|(seen, _)| seen == text) {
                return Ok(config.clone());
            }
        }
        let config = Config::from_json(text)?;
        if let Ok(mut last) = LAST_PARSED.lock() {
            *last = Some((text.to_string(), config.clone()));
        }
        Ok(config)
    }

    /// Parses `{"torch_version": str, "custom_operators": [str, ...], "registered_operators":
    /// [str, ...] (a subset of the custom ones), "threads": "current" |
    /// "all", "modules": "named" | "all", "distributed": {"rank", "world_size", "backend"}}` (all optional; the torch version defaults to the one
    /// the library was built against, threads to "current", and no module call is labelled).
    pub fn from_json(text: &str) -> crate::error::Result<Config> {
        use crate::error::Error;
        let mut config = Config { torch_version: BUILT_AGAINST_TORCH.to_string(), ..Config::default() };
        if text.trim().is_empty() {
            return Ok(config);
        }
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| Error::BadConfig(format!("not JSON ({e})")))?;
        let object = value.as_object().ok_or_else(|| Error::BadConfig("expected a JSON object".into()))?;
        for (key, v) in object {
            match key.as_str() {
                "torch_version" => {
                    config.torch_version =
                        v.as_str().ok_or_else(|| Error::BadConfig("torch_version must be a string".into()))?.to_string()
                }
                "custom_operators" => config.custom_operators = qualified_names(key, v)?,
                "registered_operators" => config.registered_operators = qualified_names(key, v)?,
                "threads" => {
                    config.all_threads = match v.as_str() {
                        Some("current") => false,
                        Some("all") => true,
                        _ => return Err(Error::BadConfig(format!("threads must be \"current\" or \"all\", got {v}"))),
                    }
                }
                "modules" => {
                    config.modules = match v.as_str() {
                        Some("named") => Labelling::Named,
                        Some("all") => Labelling::All,
                        _ => return Err(Error::BadConfig(format!("modules must be \"named\" or \"all\", got {v}"))),
                    }
                }
                "distributed" => config.distributed = Some(distributed(v)?),
                other => return Err(Error::BadConfig(format!("unknown key {other:?}"))),
            }
        }
        if let Some(name) = config.registered_operators.iter().find(|n| !config.custom_operators.contains(n)) {
            return Err(Error::BadConfig(format!("registered operator {name} is not among the custom_operators")));
        }
        Ok(config)
    }
}

/// `{"rank": int, "world_size": int, "backend": str}`, with `0 <= rank < world_size`.
fn distributed(value: &serde_json::Value) -> crate::error::Result<Distributed> {
    use crate::error::Error;
    let bad = || {
        Error::BadConfig(format!(
            "distributed must be {{rank, world_size, backend}} with 0 <= rank < world_size, got {value}"
        ))
    };
    let number = |key: &str| value.get(key).and_then(serde_json::Value::as_u64).and_then(|v| u32::try_from(v).ok());
    let (Some(rank), Some(world_size)) = (number("rank"), number("world_size")) else { return Err(bad()) };
    let backend = value.get("backend").and_then(serde_json::Value::as_str).filter(|b| !b.is_empty()).ok_or_else(bad)?;
    if rank >= world_size || value.as_object().is_some_and(|o| o.len() != 3) {
        return Err(bad());
    }
    Ok(Distributed { rank, world_size, backend: backend.to_string() })
}

/// A JSON list of qualified operator names (`aten::sin`, never an overload).
fn qualified_names(key: &str, value: &serde_json::Value) -> crate::error::Result<Vec<String>> {
    use crate::error::Error;
    let list = value.as_array().ok_or_else(|| Error::BadConfig(format!("{key} must be a list")))?;
    list.iter()
        .map(|item| {
            item.as_str()
                .filter(|n| n.contains("::") && !n.contains('.'))
                .map(str::to_string)
                .ok_or_else(|| Error::BadConfig(format!("{key} holds qualified names like aten::sin")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_labelling_is_off_unless_asked_for() {
        assert_eq!(Config::from_json("").unwrap().modules, Labelling::Off);
        assert_eq!(Config::from_json(r#"{"modules": "all"}"#).unwrap().modules, Labelling::All);
        assert_eq!(Config::from_json(r#"{"modules": "named"}"#).unwrap().modules, Labelling::Named);
        let error = Config::from_json(r#"{"modules": "some"}"#).unwrap_err().to_string();
        assert!(error.contains(r#"modules must be "named" or "all", got "some""#), "{error}");
    }

    #[test]
    fn a_remembered_parse_answers_only_its_own_text() {
        let a = r#"{"threads": "all", "modules": "all"}"#;
        let b = r#"{"custom_operators": ["mylib::f"], "modules": "named"}"#;
        for text in [a, a, b, a, b, b] {
            assert_eq!(Config::from_json_cached(text).unwrap(), Config::from_json(text).unwrap(), "{text}");
        }
        // An error is not remembered, and does not replace the last good parse.
        assert!(Config::from_json_cached(r#"{"threads": "some"}"#).is_err());
        assert!(Config::from_json_cached(r#"{"threads": "some"}"#).is_err());
        assert!(Config::from_json_cached(b).unwrap().custom_operators == vec!["mylib::f".to_string()]);
    }
}
