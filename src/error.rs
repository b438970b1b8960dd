//! The crate's one error type. Every fallible public function returns [`Error`]; the Python
//! exception each variant becomes is decided in one place, [`Error::kind`], and the C++ edge
//! (`cpp/ops.cpp`, `throw_mapped`) turns that kind into the matching `c10` error class.

use thiserror::Error;

/// How an error surfaces to Python (`ValueError`, `TypeError`, `RuntimeError`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    Value,
    Type,
    Runtime,
}

impl ErrorKind {
    /// The tag that prefixes a message crossing the FFI (`"value|message"`); see `cpp/ops.cpp`.
    pub fn tag(self) -> &'static str {
        match self {
            ErrorKind::Value => "value",
            ErrorKind::Type => "type",
            ErrorKind::Runtime => "runtime",
        }
    }
}

#[derive(Debug, Error)]
pub enum Error {
    #[error("unknown torchscan session handle {0}: it was never opened, or is already closed")]
    UnknownSession(i64),
    #[error("session {0} is closed; call finish_session (or discard_session) next")]
    SessionClosed(i64),
    #[error("session {0} is still open; close_session must come before finish_session")]
    SessionStillOpen(i64),
    #[error("too many torchscan sessions open at once (the limit is {0}); close some first")]
    TooManySessions(usize),
    #[error("pop_scope on session {0} without a matching push_scope")]
    ScopeUnderflow(i64),
    #[error("invalid session configuration: {0}")]
    BadConfig(String),
    #[error("invalid custom FLOP results: {0}")]
    BadCustomResults(String),
    #[error("expected {expected}, got {got}")]
    WrongType { expected: &'static str, got: String },
    /// A report given to `compare_reports` has a field of the wrong type.
    #[error("{0}")]
    ReportType(String),
    /// A report given to `compare_reports` has an invalid value or an incompatible metric.
    #[error("{0}")]
    ReportValue(String),
    /// libtorch or the C++ shim refused (a profiler holds the slot, the wrong thread, ...).
    #[error("{0}")]
    Native(String),
}

impl Error {
    /// The single mapping from error variants to the Python exception they become.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::UnknownSession(_)
            | Error::SessionClosed(_)
            | Error::SessionStillOpen(_)
            | Error::TooManySessions(_)
            | Error::ScopeUnderflow(_)
            | Error::Native(_) => ErrorKind::Runtime,
            Error::BadConfig(_) | Error::BadCustomResults(_) | Error::ReportValue(_) => ErrorKind::Value,
            Error::WrongType { .. } | Error::ReportType(_) => ErrorKind::Type,
        }
    }

    /// `"kind|message"`: how an error crosses the FFI so that C++ can rethrow the right class.
    pub fn to_tagged_string(&self) -> String {
        format!("{}|{}", self.kind().tag(), self)
    }
}

pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_tags() {
        assert_eq!(Error::BadConfig("x".into()).kind(), ErrorKind::Value);
        assert_eq!(Error::UnknownSession(7).kind(), ErrorKind::Runtime);
        assert_eq!(
            Error::UnknownSession(7).to_tagged_string(),
            "runtime|unknown torchscan session handle 7: it was never opened, or is already closed"
        );
        let e = Error::WrongType { expected: "a list", got: "a string".into() };
        assert_eq!(e.to_tagged_string(), "type|expected a list, got a string");
    }
}
