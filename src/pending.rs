//! Claimed operator calls between their start and their end, for the outcomes that cannot be
//! taken back (no formula, a formula error, an overflow, a custom formula). A call is priced
//! when it starts (its inputs are at hand then) and counted when it returns: an operator that
//! raises, or that autograd's non-reentrant checkpoint stops early with an exception, did not
//! deliver its work. The common outcomes (a count, an ignored call) are counted at the start and
//! taken back if the call raises (`session::Receipt`), so that their end costs nothing.

use crate::formulas::collective::Traffic;
use crate::formulas::{Category, FormulaError};
use crate::session::Phase;

/// What counting the call will do once it has returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A kernel without a formula: the totals become partial.
    Uncounted,
    /// The formula's count does not fit in 64 bits.
    Overflow(Category),
    Failed(FormulaError),
    /// A caller's formula, priced after the workload from these inputs and the outputs.
    Custom(Vec<i64>),
    /// A collective, priced at its start (`formulas::collective`).
    Collective(Result<Traffic, FormulaError>),
}

/// One claimed call that has started and not yet returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    /// The calling thread's frame (pairs the end with its start).
    pub token: usize,
    pub op: usize,
    pub scope: u32,
    pub phase: Phase,
    pub outcome: Outcome,
}
