//! The formula registry: the one table that says which operators are counted, how, and under
//! which convention, plus the ignore list ([`ignored`]) of operators that do no arithmetic.
//!
//! A new operator is one row. Formulas are pure functions of the operator's argument metadata
//! (shapes, int/bool parameters) that return FLOPs, with checked arithmetic: an overflow or an
//! argument of the wrong kind is an error the session reports, never a wrapped or guessed value.

pub mod attention;
pub mod conv;
pub mod ignored;
pub mod loss;
pub mod matmul;
pub mod norm;
pub mod pointwise;
pub mod pool;
pub mod reduction;
pub mod softmax;

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::args::{Args, TensorMeta};

/// The family a counted operator belongs to (`by_category` in reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Category {
    Matmul,
    Conv,
    Attention,
    Pointwise,
    Reduction,
    Normalization,
    Pooling,
    Softmax,
    Loss,
    /// Counted by a caller-supplied formula (`custom_mapping`).
    Custom,
}

impl Category {
    pub const ALL: [Category; 10] = [
        Category::Matmul,
        Category::Conv,
        Category::Attention,
        Category::Pointwise,
        Category::Reduction,
        Category::Normalization,
        Category::Pooling,
        Category::Softmax,
        Category::Loss,
        Category::Custom,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Category::Matmul => "matmul",
            Category::Conv => "conv",
            Category::Attention => "attention",
            Category::Pointwise => "pointwise",
            Category::Reduction => "reduction",
            Category::Normalization => "normalization",
            Category::Pooling => "pooling",
            Category::Softmax => "softmax",
            Category::Loss => "loss",
            Category::Custom => "custom",
        }
    }
}

/// Why a formula could not give a number for one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FormulaError {
    /// The argument at this index is absent or of another kind than the formula needs.
    MissingArgument(usize),
    /// The tensor argument at this index is absent (or `None`).
    MissingTensor(usize),
    /// Shapes or parameters that this operator cannot have been called with.
    UnexpectedShape,
    /// The count does not fit in 64 bits.
    Overflow,
}

impl FormulaError {
    pub fn describe(self) -> String {
        match self {
            FormulaError::MissingArgument(i) => format!("argument {i} is missing or of an unexpected kind"),
            FormulaError::MissingTensor(i) => format!("tensor argument {i} is missing"),
            FormulaError::UnexpectedShape => "the argument shapes do not fit the formula".to_string(),
            FormulaError::Overflow => "the FLOP count exceeds 2^64".to_string(),
        }
    }
}

pub type FlopFn = fn(&Args) -> Result<u64, FormulaError>;

/// One registry row.
pub struct Formula {
    /// Qualified operator name, as the dispatcher reports it (`aten::mm`); all overloads.
    pub operator: &'static str,
    pub category: Category,
    pub flops: FlopFn,
    /// The counting convention, for people (`docs/formulas.md`).
    pub convention: &'static str,
}

const PYTORCH: &str = "2 FLOPs per multiply-accumulate, bias not counted (PyTorch flop_counter)";
const PER_ELEMENT: &str = "1 FLOP per output element";
const PER_INPUT: &str = "1 FLOP per input element";
const NORM: &str = "per element: train 5 (4 without affine), eval 2 (1); backward 2x (fvcore)";
const WINDOW: &str = "1 FLOP per window element visited";
const ROUTE: &str = "1 FLOP per output gradient element";
const THREE: &str = "3 FLOPs per output element (two multiplies or a subtract, and an add)";
const LOSS: &str = "1 FLOP per target element, 2 with class weights";
const SOFTMAX: &str = "per element: forward 5 FLOPs, backward 4";
const SDPA: &str = "QK^T and AV products, 2 FLOPs per MAC, causal not halved (PyTorch flop_counter)";

macro_rules! row {
    ($op:literal, $cat:ident, $f:expr, $conv:expr) => {
        Formula { operator: $op, category: Category::$cat, flops: $f, convention: $conv }
    };
}

/// Every counted operator. Keep rows grouped by family; `registry_has_no_duplicates` guards keys.
pub static FORMULAS: &[Formula] = &[
    // Matrix products. matmul/linear/einsum are composites that reach these.
    row!("aten::mm", Matmul, matmul::mm, PYTORCH),
    row!("aten::addmm", Matmul, matmul::addmm, PYTORCH),
    row!("aten::bmm", Matmul, matmul::bmm, PYTORCH),
    row!("aten::baddbmm", Matmul, matmul::baddbmm, PYTORCH),
    row!("aten::addbmm", Matmul, matmul::addbmm, PYTORCH),
    row!("aten::mv", Matmul, matmul::mv, PYTORCH),
    row!("aten::addmv", Matmul, matmul::addmv, PYTORCH),
    row!("aten::dot", Matmul, matmul::dot, PYTORCH),
    row!("aten::vdot", Matmul, matmul::dot, PYTORCH),
    // Convolutions: the outermost claims the call, so backend variants below never double count.
    row!("aten::convolution", Conv, conv::convolution, PYTORCH),
    row!("aten::_convolution", Conv, conv::convolution, PYTORCH),
    // Weight gradient of grouped convolutions: the work done, not PyTorch's x groups.
    row!("aten::convolution_backward", Conv, conv::convolution_backward, PYTORCH),
    // Attention kernels (forward: q, k, v first; backward: grad_out, q, k, v first).
    row!("aten::_scaled_dot_product_flash_attention_for_cpu", Attention, attention::sdpa_forward, SDPA),
    row!("aten::_scaled_dot_product_flash_attention", Attention, attention::sdpa_forward, SDPA),
    row!("aten::_scaled_dot_product_efficient_attention", Attention, attention::sdpa_forward, SDPA),
    row!("aten::_scaled_dot_product_cudnn_attention", Attention, attention::sdpa_forward, SDPA),
    row!("aten::_flash_attention_forward", Attention, attention::sdpa_forward, SDPA),
    row!("aten::_efficient_attention_forward", Attention, attention::sdpa_forward, SDPA),
    row!("aten::_scaled_dot_product_flash_attention_for_cpu_backward", Attention, attention::sdpa_backward, SDPA),
    row!("aten::_scaled_dot_product_flash_attention_backward", Attention, attention::sdpa_backward, SDPA),
    row!("aten::_scaled_dot_product_efficient_attention_backward", Attention, attention::sdpa_backward, SDPA),
    row!("aten::_scaled_dot_product_cudnn_attention_backward", Attention, attention::sdpa_backward, SDPA),
    row!("aten::_flash_attention_backward", Attention, attention::sdpa_backward, SDPA),
    row!("aten::_efficient_attention_backward", Attention, attention::sdpa_backward, SDPA),
    // Elementwise arithmetic: one operation per output element.
    row!("aten::add", Pointwise, pointwise::one_per_element, PER_ELEMENT),
    row!("aten::add_", Pointwise, pointwise::one_per_element, PER_ELEMENT),
    row!("aten::sub", Pointwise, pointwise::one_per_element, PER_ELEMENT),
    row!("aten::sub_", Pointwise, pointwise::one_per_element, PER_ELEMENT),
    row!("aten::mul", Pointwise, pointwise::one_per_element, PER_ELEMENT),
    row!("aten::mul_", Pointwise, pointwise::one_per_element, PER_ELEMENT),
    row!("aten::div", Pointwise, pointwise::one_per_element, PER_ELEMENT),
    row!("aten::div_", Pointwise, pointwise::one_per_element, PER_ELEMENT),
    row!("aten::relu", Pointwise, pointwise::one_per_element, PER_ELEMENT),
    row!("aten::relu_", Pointwise, pointwise::one_per_element, PER_ELEMENT),
    row!("aten::clamp_min", Pointwise, pointwise::one_per_element, PER_ELEMENT),
    row!("aten::clamp_min_", Pointwise, pointwise::one_per_element, PER_ELEMENT),
    row!("aten::threshold", Pointwise, pointwise::one_per_element, PER_ELEMENT),
    row!("aten::threshold_", Pointwise, pointwise::one_per_element, PER_ELEMENT),
    row!("aten::threshold_backward", Pointwise, pointwise::one_per_element, PER_ELEMENT),
    row!("aten::sqrt", Pointwise, pointwise::one_per_element, PER_ELEMENT),
    row!("aten::sqrt_", Pointwise, pointwise::one_per_element, PER_ELEMENT),
    // Optimizer arithmetic: self + value * t1 * t2, self + value * t1 / t2, self + w * (end - self).
    row!("aten::addcmul", Pointwise, pointwise::per_element::<3>, THREE),
    row!("aten::addcmul_", Pointwise, pointwise::per_element::<3>, THREE),
    row!("aten::addcdiv", Pointwise, pointwise::per_element::<3>, THREE),
    row!("aten::addcdiv_", Pointwise, pointwise::per_element::<3>, THREE),
    row!("aten::lerp", Pointwise, pointwise::per_element::<3>, THREE),
    row!("aten::lerp_", Pointwise, pointwise::per_element::<3>, THREE),
    // Tests and comparisons: one compare per element.
    row!("aten::isneginf", Pointwise, pointwise::one_per_element, PER_ELEMENT),
    row!("aten::isposinf", Pointwise, pointwise::one_per_element, PER_ELEMENT),
    row!("aten::isinf", Pointwise, pointwise::one_per_element, PER_ELEMENT),
    row!("aten::isnan", Pointwise, pointwise::one_per_element, PER_ELEMENT),
    // Reductions.
    row!("aten::sum", Reduction, reduction::one_per_input_element, PER_INPUT),
    row!("aten::mean", Reduction, reduction::one_per_input_element, PER_INPUT),
    row!("aten::all", Reduction, reduction::one_per_input_element, PER_INPUT),
    row!("aten::any", Reduction, reduction::one_per_input_element, PER_INPUT),
    // Losses.
    row!("aten::nll_loss_forward", Loss, loss::nll_loss_forward, LOSS),
    row!("aten::nll_loss2d_forward", Loss, loss::nll_loss_forward, LOSS),
    row!("aten::nll_loss_backward", Loss, loss::nll_loss_backward, LOSS),
    row!("aten::nll_loss2d_backward", Loss, loss::nll_loss_backward, LOSS),
    // Softmax.
    row!("aten::_softmax", Softmax, softmax::forward, SOFTMAX),
    row!("aten::_log_softmax", Softmax, softmax::forward, SOFTMAX),
    row!("aten::_softmax_backward_data", Softmax, softmax::backward, SOFTMAX),
    row!("aten::_log_softmax_backward_data", Softmax, softmax::backward, SOFTMAX),
    // Normalization.
    row!("aten::native_batch_norm", Normalization, norm::batch_norm, NORM),
    row!("aten::_native_batch_norm_legit", Normalization, norm::batch_norm, NORM),
    row!("aten::_native_batch_norm_legit_no_training", Normalization, norm::batch_norm_no_training, NORM),
    row!("aten::native_batch_norm_backward", Normalization, norm::batch_norm_backward, NORM),
    // Pooling.
    row!("aten::max_pool1d", Pooling, pool::max_pool::<1>, WINDOW),
    row!("aten::max_pool2d", Pooling, pool::max_pool::<2>, WINDOW),
    row!("aten::max_pool3d", Pooling, pool::max_pool::<3>, WINDOW),
    row!("aten::max_pool2d_with_indices", Pooling, pool::max_pool::<2>, WINDOW),
    row!("aten::max_pool3d_with_indices", Pooling, pool::max_pool::<3>, WINDOW),
    row!("aten::max_pool2d_with_indices_backward", Pooling, pool::max_pool_backward, ROUTE),
    row!("aten::max_pool3d_with_indices_backward", Pooling, pool::max_pool_backward, ROUTE),
    row!("aten::avg_pool1d", Pooling, pool::avg_pool::<1>, WINDOW),
    row!("aten::avg_pool2d", Pooling, pool::avg_pool::<2>, WINDOW),
    row!("aten::avg_pool3d", Pooling, pool::avg_pool::<3>, WINDOW),
    row!("aten::avg_pool2d_backward", Pooling, pool::avg_pool_backward::<2>, WINDOW),
    row!("aten::avg_pool3d_backward", Pooling, pool::avg_pool_backward::<3>, WINDOW),
    row!("aten::_adaptive_avg_pool2d", Pooling, pool::adaptive_pool::<2>, WINDOW),
    row!("aten::_adaptive_avg_pool3d", Pooling, pool::adaptive_pool::<3>, WINDOW),
    row!("aten::adaptive_max_pool2d", Pooling, pool::adaptive_pool::<2>, WINDOW),
    row!("aten::adaptive_max_pool3d", Pooling, pool::adaptive_pool::<3>, WINDOW),
    row!("aten::_adaptive_avg_pool2d_backward", Pooling, pool::adaptive_avg_pool_backward::<2>, WINDOW),
    row!("aten::_adaptive_avg_pool3d_backward", Pooling, pool::adaptive_avg_pool_backward::<3>, WINDOW),
    row!("aten::adaptive_max_pool2d_backward", Pooling, pool::max_pool_backward, ROUTE),
    row!("aten::adaptive_max_pool3d_backward", Pooling, pool::max_pool_backward, ROUTE),
];

/// What the registry says about one operator name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// Index into [`FORMULAS`].
    Formula(usize),
    /// Index into [`ignored::IGNORED`].
    Ignored(usize),
}

/// Looks an operator up by qualified name (`aten::mm`); built once, read-only afterwards.
pub fn lookup(operator: &str) -> Option<Rule> {
    static TABLE: OnceLock<HashMap<&'static str, Rule>> = OnceLock::new();
    TABLE
        .get_or_init(|| {
            let mut table = HashMap::with_capacity(FORMULAS.len() + ignored::IGNORED.len());
            for (i, f) in FORMULAS.iter().enumerate() {
                table.insert(f.operator, Rule::Formula(i));
            }
            for (i, ig) in ignored::IGNORED.iter().enumerate() {
                table.entry(ig.operator).or_insert(Rule::Ignored(i));
            }
            table
        })
        .get(operator)
        .copied()
}

// ---- checked arithmetic shared by the families ----

pub(crate) fn mul(a: u64, b: u64) -> Result<u64, FormulaError> {
    a.checked_mul(b).ok_or(FormulaError::Overflow)
}

pub(crate) fn add(a: u64, b: u64) -> Result<u64, FormulaError> {
    a.checked_add(b).ok_or(FormulaError::Overflow)
}

pub(crate) fn mul_all(factors: &[u64]) -> Result<u64, FormulaError> {
    factors.iter().try_fold(1u64, |acc, &f| mul(acc, f))
}

/// Product of sizes; a negative size is a shape no tensor has.
pub(crate) fn product(dims: &[i64]) -> Result<u64, FormulaError> {
    dims.iter().try_fold(1u64, |acc, &d| mul(acc, u64::try_from(d).map_err(|_| FormulaError::UnexpectedShape)?))
}

pub(crate) fn dim(t: &TensorMeta, i: usize) -> Result<u64, FormulaError> {
    t.dims.get(i).and_then(|&d| u64::try_from(d).ok()).ok_or(FormulaError::UnexpectedShape)
}

pub(crate) fn require_tensor<'a>(args: &Args<'a>, index: usize) -> Result<TensorMeta<'a>, FormulaError> {
    args.tensor(index).ok_or(FormulaError::MissingTensor(index))
}

#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use crate::args::index_stream;

    /// Builds an argument stream with `build`, then applies `formula` to it.
    pub fn with_args(build: impl FnOnce(&mut Vec<i64>), formula: FlopFn) -> Result<u64, FormulaError> {
        let mut stream = Vec::new();
        build(&mut stream);
        let mut offsets = Vec::new();
        assert!(index_stream(&stream, &mut offsets), "test built a malformed stream");
        formula(&Args::new(&stream, &offsets))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn registry_has_no_duplicates() {
        let mut seen = HashSet::new();
        for f in FORMULAS {
            assert!(seen.insert(f.operator), "{} has two formulas", f.operator);
            assert!(f.operator.contains("::"), "{} is not a qualified name", f.operator);
        }
        for ig in ignored::IGNORED {
            assert!(seen.insert(ig.operator), "{} is both counted and ignored, or ignored twice", ig.operator);
        }
    }

    #[test]
    fn lookup_finds_formulas_and_ignored_ops() {
        assert!(matches!(lookup("aten::mm"), Some(Rule::Formula(_))));
        assert!(matches!(lookup("aten::view"), Some(Rule::Ignored(_))));
        assert_eq!(lookup("aten::not_an_op"), None);
        assert_eq!(lookup("mm"), None);
    }

    #[test]
    fn checked_helpers() {
        assert_eq!(mul_all(&[2, 3, 4]), Ok(24));
        assert_eq!(mul(u64::MAX, 2), Err(FormulaError::Overflow));
        assert_eq!(add(u64::MAX, 1), Err(FormulaError::Overflow));
        assert_eq!(product(&[3, -1]), Err(FormulaError::UnexpectedShape));
        assert_eq!(product(&[]), Ok(1));
    }
}
