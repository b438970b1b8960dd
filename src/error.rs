//! The crate's one error type. Every fallible public function returns [`Error`]; the Python
//! exception each variant becomes is decided in one place, [`Error::kind`]; the bridge sends that
//! kind as a shared enum (`ffi.rs`, `last_error_kind`) and the C++ edge (`cpp/ops.cpp`,
//! `throw_mapped`) turns it into the matching `c10` error class.

use thiserror::Error;

/// How an error surfaces to Python (`ValueError`, `TypeError`, `RuntimeError`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    Value,
    Type,
    Runtime,
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
    /// Module identities and labels handed to a session that do not pair up.
    #[error("invalid module names: {0}")]
    BadModuleNames(String),
    /// What Python records for `crawl_module` and the module formulas (the analysis document,
    /// module descriptors) is malformed: a bug between the package's two halves, or a caller of
    /// the internal operators.
    #[error("invalid analysis input: {0}")]
    BadAnalysisInput(String),
    /// An argument outside its allowed values (`wrap_mode`, say).
    #[error("{0}")]
    BadArgument(String),
    /// A report given to `compare_reports` has a field of the wrong type.
    #[error("{0}")]
    ReportType(String),
    /// A report given to `compare_reports` has an invalid value or an incompatible metric.
    #[error("{0}")]
    ReportValue(String),
    /// libtorch or the C++ shim refused (a profiler holds the slot, the wrong thread, ...).
    #[error("{0}")]
    Native(String),
    /// A bug in the core (a report that cannot be serialized, say).
    #[error("internal error in torchscan's native core: {0} (a bug: please report it)")]
    Internal(String),
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
            | Error::Native(_)
            | Error::Internal(_) => ErrorKind::Runtime,
            Error::BadConfig(_)
            | Error::BadCustomResults(_)
            | Error::BadModuleNames(_)
            | Error::BadAnalysisInput(_)
            | Error::BadArgument(_)
            | Error::ReportValue(_) => ErrorKind::Value,
            Error::ReportType(_) => ErrorKind::Type,
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_messages() {
        assert_eq!(Error::BadConfig("x".into()).kind(), ErrorKind::Value);
        assert_eq!(Error::UnknownSession(7).kind(), ErrorKind::Runtime);
        assert_eq!(
            Error::UnknownSession(7).to_string(),
            "unknown torchscan session handle 7: it was never opened, or is already closed"
        );
        let e = Error::ReportType("a report's 'layers' must be a list".into());
        assert_eq!((e.kind(), e.to_string().as_str()), (ErrorKind::Type, "a report's 'layers' must be a list"));
        assert_eq!(
            Error::BadAnalysisInput("layer 3 names module 9".into()).to_string(),
            "invalid analysis input: layer 3 names module 9"
        );
        assert_eq!(Error::Internal("x".into()).kind(), ErrorKind::Runtime);
    }
}
