//! The formula registry: the one table that says which operators are counted, how, and under
//! which convention, plus the ignore list ([`ignored`]) of operators that do no arithmetic.
//!
//! A new operator is one row. Formulas are pure functions of the operator's argument metadata
//! (shapes, int/bool parameters) that return FLOPs, with checked arithmetic: an overflow or an
//! argument of the wrong kind is an error the session reports, never a wrapped or guessed value.

pub mod attention;
pub mod collective;
pub mod conv;
pub mod conv_backends;
pub mod detection;
pub mod docs;
pub mod fft;
pub mod ignored;
pub mod interpolate;
pub mod linalg;
pub mod loss;
pub mod matmul;
pub mod norm;
pub mod pointwise;
pub mod pool;
pub mod quantize;
pub mod reduction;
pub mod rnn;
pub mod select;
pub mod softmax;
pub mod sparse;

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
    Interpolation,
    /// Factorizations and solves (`torch.linalg`).
    LinearAlgebra,
    /// Fourier transforms (`torch.fft`, `torch.stft`).
    Spectral,
    /// Counted by a caller-supplied formula (`custom_mapping`).
    Custom,
    /// Counted by a formula its library registered with PyTorch's flop counter
    /// (`torch.utils.flop_counter.register_flop_formula`), for an operator this registry lacks.
    Registered,
    /// Integer arithmetic of quantized kernels: integer operations, not FLOPs. The session
    /// keeps them apart (the report's `integer_ops`); no FLOP total or `by_category` holds them.
    Integer,
}

impl Category {
    pub const ALL: [Category; 15] = [
        Category::Matmul,
        Category::Conv,
        Category::Attention,
        Category::Pointwise,
        Category::Reduction,
        Category::Normalization,
        Category::Pooling,
        Category::Softmax,
        Category::Loss,
        Category::Interpolation,
        Category::LinearAlgebra,
        Category::Spectral,
        Category::Custom,
        Category::Registered,
        Category::Integer,
    ];

    /// The categories whose counts are FLOPs (all but `Integer`).
    pub fn is_flops(self) -> bool {
        self != Category::Integer
    }

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
            Category::Interpolation => "interpolation",
            Category::LinearAlgebra => "linalg",
            Category::Spectral => "spectral",
            Category::Custom => "custom",
            Category::Registered => "registered",
            Category::Integer => "integer",
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
    /// Not this call's to price: a composite overload (`upsample_bilinear2d.vec` with scale
    /// factors) whose nested operators carry the work. The session descends into it.
    Descend,
    /// A tensor of this sparse layout (`c10::Layout` code) where the formula has no sparse
    /// form: its work depends on where the non-zeros are, and is never priced as dense.
    SparseLayout(i64),
    /// Complex operands where the formula has no count of real operations.
    Complex,
    /// The work depends on the data in a way the arguments' shapes do not show (RoI Align with
    /// an adaptive sampling ratio).
    DataDependent,
}

impl FormulaError {
    pub fn describe(self) -> String {
        match self {
            FormulaError::MissingArgument(i) => format!("argument {i} is missing or of an unexpected kind"),
            FormulaError::MissingTensor(i) => format!("tensor argument {i} is missing"),
            FormulaError::UnexpectedShape => "the argument shapes do not fit the formula".to_string(),
            FormulaError::Overflow => "the FLOP count exceeds 2^64".to_string(),
            FormulaError::Descend => "a composite call, counted through its nested operators".to_string(),
            FormulaError::SparseLayout(layout) => format!(
                "a {} tensor: no formula prices this operator on that layout (its work depends on where the \
                 non-zeros are), and a dense price would be wrong",
                crate::args::layout_name(layout)
            ),
            FormulaError::DataDependent => {
                "the work depends on the data (not only on the shapes), which the formula does not see".to_string()
            }
            FormulaError::Complex => {
                "complex operands: this formula counts real arithmetic on real tensors only".to_string()
            }
        }
    }
}

pub type FlopFn = fn(&Args) -> Result<u64, FormulaError>;

/// A counting convention: the rule, and where it comes from.
pub struct Convention {
    pub rule: &'static str,
    pub source: &'static str,
}

/// One registry row.
pub struct Formula {
    /// Qualified operator name, as the dispatcher reports it (`aten::mm`); all overloads.
    pub operator: &'static str,
    pub category: Category,
    pub flops: FlopFn,
    /// The formula's name in this crate (`matmul::mm`), for `docs/formulas.md`.
    pub formula: &'static str,
    pub convention: &'static Convention,
    /// The formula for calls with a sparse operand (`sparse::mm`); without one, such a call is
    /// a `SparseLayout` error (partial, with the layout named), never a dense price.
    pub sparse: Option<FlopFn>,
    /// For a family without a complex form of its own (pointwise, reductions): the real FLOPs of
    /// the operation on one complex element, which multiplies the real count (a complex add 2, a
    /// multiply 6, ...: the convention at the row). Without one, a complex call is a
    /// `Complex` error (partial), never a real-valued price.
    pub complex: Option<u64>,
    /// For an integer kernel (`Category::Integer`) that also computes in floating point (a
    /// dynamic quantized Linear: quantizing its input, dequantizing its output, the bias): that
    /// work's FLOPs, counted in `pointwise` beside the kernel's integer operations.
    pub float: Option<FlopFn>,
}

impl Formula {
    /// The FLOPs of one call. Complex operands: a complex multiply-accumulate is 4 real
    /// multiplies and 4 real adds, 8 FLOPs against a real one's 2, so the multiply-accumulate
    /// families (matmul, conv, attention) count 4x; pointwise and reduction rows that state a
    /// complex cost (`complex: xK`) count K real FLOPs per complex operation; the others have no
    /// complex form.
    pub fn price(&self, args: &Args) -> Result<u64, FormulaError> {
        let flops = match args.sparse_layout() {
            Some(layout) => self.sparse.ok_or(FormulaError::SparseLayout(layout))?(args)?,
            None => (self.flops)(args)?,
        };
        if !args.has_complex() {
            return Ok(flops);
        }
        match self.category {
            Category::Matmul | Category::Conv | Category::Attention | Category::LinearAlgebra => {
                flops.checked_mul(4).ok_or(FormulaError::Overflow)
            }
            // The transforms count complex arithmetic themselves, in real FLOPs.
            Category::Spectral => Ok(flops),
            _ => match self.complex {
                Some(per_complex) => flops.checked_mul(per_complex).ok_or(FormulaError::Overflow),
                None => Err(FormulaError::Complex),
            },
        }
    }
}

const FLOP_COUNTER: &str = "PyTorch `torch/utils/flop_counter.py`";
const FVCORE: &str = "fvcore `fvcore/nn/jit_handles.py`";
const TORCHSCAN: &str = "torchscan (stated here)";

const PYTORCH: &Convention = &Convention { rule: "2 FLOPs per multiply-accumulate", source: FLOP_COUNTER };
/// The bias convention (`matmul.rs`): a fused kernel's added input costs what the separate
/// operators would (an ordinary `add` cannot be told from a bias add). PyTorch's counter drops it.
const ADDED_INPUT: &Convention = &Convention {
    rule: "2 FLOPs per multiply-accumulate; the added input as the separate operators: 1 per output element \
           for the add (none when beta = 0), 1 per input element for beta's multiply (beta not 0 or 1), 1 per \
           output element for alpha's (alpha not 1)",
    source: TORCHSCAN,
};
const BIASED_PRODUCT: &Convention = &Convention {
    rule: "2 FLOPs per multiply-accumulate; a bias, when given, 1 per output element (the separate add's cost)",
    source: TORCHSCAN,
};
const SPARSE_MACS: &Convention = &Convention {
    rule: "2 FLOPs per multiply-accumulate; with a sparse operand, 2 per stored value times the dense \
           operand's other dimension (sparse @ sparse is not priced)",
    source: TORCHSCAN,
};
const SPARSE_ADDED_INPUT: &Convention = &Convention {
    rule: "2 FLOPs per multiply-accumulate (a sparse operand: 2 per stored value times the dense operand's \
           other dimension; sparse @ sparse not priced); the added input as the separate operators: 1 per \
           output element for the add (a sparse result: 1 per stored value added), beta's and alpha's \
           multiplies unless 1 (beta = 0: no add)",
    source: TORCHSCAN,
};
const CONV_BIAS: &Convention = &Convention {
    rule: "2 FLOPs per multiply-accumulate; a bias, when given, 1 per output element (the separate add's cost)",
    source: TORCHSCAN,
};
const GROUPED_WGRAD: &Convention = &Convention {
    rule: "2 FLOPs per multiply-accumulate; a grouped weight gradient is the work done, not PyTorch's x groups; \
           the bias gradient 1 per grad_output element (the separate sum's cost)",
    source: TORCHSCAN,
};
const PER_ELEMENT: &Convention = &Convention { rule: "1 FLOP per output element", source: TORCHSCAN };
const SPARSE_ADD: &Convention = &Convention {
    rule: "1 FLOP per output element; with one sparse operand, 1 per stored value (two sparse operands are not \
           priced)",
    source: TORCHSCAN,
};
const PER_INPUT: &Convention = &Convention { rule: "1 FLOP per input element", source: TORCHSCAN };
const ACCUMULATE: &Convention = &Convention { rule: "1 FLOP per element accumulated", source: TORCHSCAN };
const NORM: &Convention = &Convention {
    rule: "per element: statistics computed 5 (4 without affine), stored statistics 2 (1); backward 2x",
    source: FVCORE,
};
const WINDOW: &Convention = &Convention { rule: "1 FLOP per window element visited", source: TORCHSCAN };
const ROUTE: &Convention = &Convention { rule: "1 FLOP per output gradient element", source: TORCHSCAN };
const THREE: &Convention =
    &Convention { rule: "3 FLOPs per output element (two multiplies or a subtract, and an add)", source: TORCHSCAN };
const FOREACH: &Convention =
    &Convention { rule: "the single-tensor operator's cost, summed over the list", source: TORCHSCAN };
const LOSS: &Convention = &Convention { rule: "1 FLOP per target element, 2 with class weights", source: TORCHSCAN };
const ELEMENTWISE_LOSS: &Convention = &Convention {
    rule: "per input element, the arithmetic of the loss's definition (mse 2, huber and smooth L1 5, binary cross \
           entropy 8; backward: 3, 4, 6), +1 to accumulate when reduced, +1 with a weight tensor",
    source: TORCHSCAN,
};
const LSTM: &Convention = &Convention {
    rule: "per time step and batch row: 2 G (I + P) for the input and hidden products (2 FLOPs per \
           multiply-accumulate), G for their sum and 9H for the gates (G = 4H), 2G for the two biases; backward \
           2x the products and gates, 2G for the bias gradients",
    source: TORCHSCAN,
};
const SORTING: &Convention = &Convention {
    rule: "comparisons from the input shape: sort n ceil(log2 n) per row (the worst case), unique that + n, \
           topk n ceil(log2(k + 1)) per row, kthvalue and median n per row, histc 3 per element (+2 when min == max), \
           isin by PyTorch's own choice (n m pairs, or a sort of both)",
    source: TORCHSCAN,
};
const SCATTER: &Convention = &Convention {
    rule: "1 FLOP per element accumulated (+1 per element for alpha or per-sample weights); a plain scatter is a \
           copy (0)",
    source: TORCHSCAN,
};
const AMP_UNSCALE: &Convention =
    &Convention { rule: "2 FLOPs per gradient element (a finiteness test and a multiply)", source: TORCHSCAN };
const ADD_RELU: &Convention =
    &Convention { rule: "2 FLOPs per output element (an add and a compare)", source: TORCHSCAN };
const MASKED_SCALE: &Convention =
    &Convention { rule: "2 FLOPs per output element (the mask's and the scale's multiplies)", source: TORCHSCAN };
const CROSS: &Convention =
    &Convention { rule: "3 FLOPs per output element (two multiplies and a subtract)", source: TORCHSCAN };
const DISTANCE: &Convention =
    &Convention { rule: "per pair and feature: 3 (difference, power, accumulate); backward 4", source: TORCHSCAN };
const RMS_NORM: &Convention = &Convention {
    rule: "per element: 3 (square, the mean's add, scale), 4 with a weight, and 2 per normalized row (epsilon, \
           reciprocal square root): its CPU decomposition's count; backward as the decomposition's autograd \
           backward: the input's gradient 8 per element (9 with a weight) and 3 per row, the weight's 2 per \
           element; weight norm 3 per element of v, backward 2x per element",
    source: TORCHSCAN,
};
const FUSED_OPTIMIZER: &Convention = &Convention {
    rule: "per parameter element, the arithmetic of the same step with foreach=True (Adam 13, Adagrad 9, SGD 1-3, \
           + weight decay, amsgrad, Nesterov, maximize, gradient scale: 1 each)",
    source: TORCHSCAN,
};
const GRID: &Convention = &Convention {
    rule: "1 FLOP per interpolation tap per output element (bilinear 4, nearest 1, bicubic 16); backward 2x",
    source: TORCHSCAN,
};
/// A p-norm, whichever kernel computes it (`linalg_vector_norm`, `norm`, `linalg__powsum` without
/// the root, `_foreach_norm` and `_foreach_powsum` per list element; `clip_grad_norm_` with
/// foreach=True or False): the power or absolute value and the accumulate, the root per result
/// within the accumulate's count (as `mean`'s division is).
const P_NORM: &Convention = &Convention {
    rule: "2 FLOPs per input element, any p (a power or absolute value, and an accumulate; the root per result \
           within the accumulate's count)",
    source: TORCHSCAN,
};
const LAPACK: &Convention = &Convention {
    rule: "leading-order counts of the standard LAPACK algorithms per matrix (inv 2n^3, solve 2/3 n^3 + 2n^2 k, \
           det 2/3 n^3, Cholesky 1/3 n^3, triangular solve n^2 k, eigh 4/3 n^3 or 9n^3 with vectors, eig 25n^3, \
           SVD by R-SVD); complex 4x",
    source: "LAPACK Working Note 41; Golub & Van Loan, Matrix Computations",
};
const FFT: &Convention = &Convention {
    rule: "5 n log2 n per complex transform of length n, half for real input or output; +2 per complex (1 per \
           real) output element when normalized",
    source: "Cooley-Tukey radix-2 count (FFTW's benchmark convention)",
};
const NMS: &Convention = &Convention {
    rule: "the worst case: N ceil(log2 N) to sort, 3 per box, 13 per pair of boxes (IoU and threshold)",
    source: TORCHSCAN,
};
const ROI_ALIGN: &Convention = &Convention {
    rule: "per output element, s^2 samples of 4 bilinear taps and an accumulate, and an average (5 s^2 + 1); \
           backward 4 s^2 + 1; an adaptive sampling ratio is data-dependent (not priced)",
    source: TORCHSCAN,
};
const MARGIN_LOSS: &Convention = &Convention {
    rule: "per score: multi-margin 4 (+1 for p = 2, +1 with a weight), backward 2 (+1, +1); multilabel: the worst \
           case of floor(C^2 / 4) label pairs per sample, 4 each (backward 2) and 1 per class",
    source: TORCHSCAN,
};
const CTC: &Convention = &Convention {
    rule: "13 FLOPs per alignment-lattice cell (sum over the batch of input length x (2 target length + 1)); \
           backward 26 per cell + 3 per log-probability; lengths given as tensors are data-dependent",
    source: TORCHSCAN,
};
const ADDMM_ACTIVATION: &Convention = &Convention {
    rule: "addmm's count (2 FLOPs per multiply-accumulate, the added input as the separate operators: 1 per \
           output element with beta = alpha = 1), and 1 per output element for the fused activation",
    source: TORCHSCAN,
};
const COMPOSITE_KERNEL: &Convention = &Convention {
    rule: "none of its own: its nested operators are counted (the kernel dispatches them)",
    source: TORCHSCAN,
};
const BACKEND_CONV: &Convention = &Convention {
    rule: "priced only when called directly (aten::convolution claims it when it dispatches it): 2 FLOPs per \
           multiply-accumulate, a bias 1 per output element (its gradient 1 per grad_output element); a fused \
           ReLU adds 1 per output element, an add-ReLU 3",
    source: FLOP_COUNTER,
};
const SYNC_BATCH_NORM: &Convention = &Convention {
    rule: "SyncBatchNorm's pieces split the training counts per element: statistics 2, normalization 2 (+1 \
           affine); backward reductions 4, elementwise gradient 4 (+2 affine); 4 per gathered statistic",
    source: TORCHSCAN,
};
const RNN_CELLS: &Convention = &Convention {
    rule: "the gate arithmetic per hidden unit and batch row after the two gate products: LSTM 13 (4 sums + 9), \
           GRU 11; biases 1 per gate element each (LSTM +8, GRU +6); backward 2x the gates, and the bias \
           gradients' sums (LSTM +4, GRU +6)",
    source: TORCHSCAN,
};
const WHOLE_RNN: &Convention = &Convention {
    rule: "per time step and batch row and layer-direction: 2 G (I + P) for the products, the gates (LSTM G + 9H, \
           GRU 11H, tanh/ReLU G + H), a projection 2 H P, biases 2G; backward 2x, the biases' gradients 2G",
    source: TORCHSCAN,
};
const WEIGHT_ONLY_QUANTIZED: &Convention = &Convention {
    rule: "2 FLOPs per multiply-accumulate: the activations are floating point, the low-bit weight is unpacked \
           and scaled in the kernel (not counted); a bias, when given, 1 per output element",
    source: TORCHSCAN,
};
const SEMI_STRUCTURED: &Convention = &Convention {
    rule: "2 FLOPs per multiply-accumulate of the kept (stored) values of a 2:4 sparse operand: half the dense \
           count; a bias or added input as the separate operators (1 per output element with alpha = beta = 1)",
    source: TORCHSCAN,
};
const OUTER_PRODUCT: &Convention = &Convention {
    rule: "1 multiply per output element, and the added input as the separate operators: 2 FLOPs per output \
           element with beta = alpha = 1 (a multiply-accumulate), 1 with beta = 0",
    source: TORCHSCAN,
};
const LINEAR_COMBINATION: &Convention =
    &Convention { rule: "2 FLOPs per multiply-accumulate: 2 numel(input) n", source: TORCHSCAN };
const QKV_RESCALE: &Convention = &Convention {
    rule: "1 FLOP per element for the bias, 1 per query element for its 1/sqrt(head_dim) scale",
    source: TORCHSCAN,
};
const PAD_BACKWARD: &Convention = &Convention {
    rule: "1 add per gradient of a padded position (numel(grad_output) - numel(input))",
    source: TORCHSCAN,
};
const ANTIALIAS: &Convention = &Convention {
    rule: "1 FLOP per filter tap per output element of each separable pass (width, then height), the filter \
           window widened by the scale when downsampling and clipped at the borders, as PyTorch's kernel",
    source: TORCHSCAN,
};
const LAPACK_FACTORIZATIONS: &Convention = &Convention {
    rule: "LAPACK Working Note 41 counts per matrix: QR 2mn^2 - 2/3 n^3, forming Q 4mnk - 2(m+n)k^2 + 4/3 k^3, \
           applying Q 4mnk - 2nk^2, LU mn^2 - n^3/3, LDL 1/3 n^3, a factored solve 2 n^2 k, the inverse from \
           Cholesky 2/3 n^3, eigenvalues only 10 n^3",
    source: "LAPACK Working Note 41; Golub & Van Loan, Matrix Computations",
};
const QR: &Convention = &Convention {
    rule: "LAPACK Working Note 41 counts per matrix: Householder QR 2mn^2 - 2/3 n^3 (m >= n; m and n swapped \
           otherwise), then Q formed from its k = min(m, n) reflectors, 4mqk - 2(m+q)k^2 + 4/3 k^3: mode reduced \
           q = k, complete q = m, r no Q; complex 4x",
    source: "LAPACK Working Note 41; Golub & Van Loan, Matrix Computations",
};
const LEAST_SQUARES: &Convention = &Convention {
    rule: "per matrix, M >= N the larger and smaller of m and n, k right-hand sides: gels QR 2MN^2 - 2/3 N^3, \
           Q^T B 4MNk - 2N^2 k, triangular solve N^2 k; gelsy the same for a full-rank matrix, + 2m^2(n - m) to \
           reduce the trapezoid when m < n; gelsd and gelss an estimate (the SVD is iterative): 4MN^2 + 8N^3 + \
           4MNk; no driver: the device's default (gelsy on the CPU, gels elsewhere); complex 4x",
    source: "LAPACK Working Note 41; Golub & Van Loan, Matrix Computations",
};
const SEARCHING: &Convention = &Convention {
    rule: "ceil(log2(n + 1)) comparisons per value searched among n; mode a sort and a pass; unique_consecutive \
           1 per element; unique_dim r ceil(log2 r) + r slice comparisons of w elements; histogram as histc (+ a \
           search per value given edges, + 2 per bin for density)",
    source: TORCHSCAN,
};
const DEFORMABLE: &Convention = &Convention {
    rule: "the convolution's 2 FLOPs per multiply-accumulate, and 4 bilinear taps (+1 with a mask) per sampled \
           column value, the bias 1 per output element; backward 2x, the bias gradient 1 per output element",
    source: TORCHSCAN,
};
const AFFINE_GRID: &Convention = &Convention {
    rule: "per grid point, each of its 2 coordinates a 3-term product with theta: 8 FLOPs; backward 12 (the \
           gradient's outer product)",
    source: TORCHSCAN,
};
const SOFTMAX: &Convention = &Convention { rule: "per element: forward 5 FLOPs, backward 4", source: TORCHSCAN };
const SDPA: &Convention = &Convention {
    rule: "QK^T and AV products at 2 FLOPs per multiply-accumulate; causal not halved",
    source: FLOP_COUNTER,
};
const MHA: &Convention = &Convention {
    rule: "Q/K/V and output projections plus the QK^T and AV products, 2 FLOPs per multiply-accumulate; the \
           projections' biases 1 per output element",
    source: FLOP_COUNTER,
};
const QUANTIZE: &Convention = &Convention {
    rule: "4 FLOPs per element: divide by the scale, add the zero point, round, clamp",
    source: TORCHSCAN,
};
const DEQUANTIZE: &Convention =
    &Convention { rule: "2 FLOPs per element: subtract the zero point, multiply by the scale", source: TORCHSCAN };
const FAKE_QUANTIZE: &Convention =
    &Convention { rule: "6 FLOPs per element: quantize (4) then dequantize (2), in floating point", source: TORCHSCAN };
const OBSERVE_FAKE_QUANTIZE: &Convention = &Convention {
    rule: "8 FLOPs per element: the observer's minimum and maximum (2) and fake quantization (6)",
    source: TORCHSCAN,
};
const INTEGER_PRODUCT: &Convention = &Convention {
    rule: "integer operations, not FLOPs: 2 per multiply-accumulate (int8 x int8 into int32); requantization and a fused ReLU not counted",
    source: TORCHSCAN,
};
/// A dynamic quantized Linear (`quantized::linear_dynamic`, fbgemm or qnnpack): the integer
/// product as `INTEGER_PRODUCT`, and the floating-point work around it counted as FLOPs, as the
/// separate operators would count it: the input's dynamic quantization (`quantize_per_tensor_dynamic`,
/// 6 per element: its minimum and maximum, 2; divide, zero point, round, clamp, 4; the scale and
/// zero point, per tensor, nothing per element), the output's dequantization (1 per element: the
/// multiply by the input's and the weight's scales; the zero points' corrections are integer
/// work, in the product), the bias when the packed weight has one and the fused ReLU's clamp on
/// the floating-point output (1 per output element each).
const DYNAMIC_INTEGER_PRODUCT: &Convention = &Convention {
    rule: "integer operations: 2 per multiply-accumulate (int8 x int8 into int32); and FLOPs (pointwise) for the \
           floating-point work around it: the input's dynamic quantization 6 per input element (minimum and maximum \
           2, quantize 4), the output's dequantization 1 per output element (the scales' multiply), the bias and a \
           fused ReLU 1 per output element each",
    source: TORCHSCAN,
};
const DYNAMIC_QUANTIZE: &Convention = &Convention {
    rule: "6 FLOPs per element: the minimum and maximum (2), then divide by the scale, add the zero point, round, \
           clamp (4)",
    source: TORCHSCAN,
};
const PACKED_FP16_PRODUCT: &Convention = &Convention {
    rule: "2 FLOPs per multiply-accumulate (fp16 weight, float activations); the bias, when the packed weight has \
           one, and a fused ReLU 1 per output element each (the bias convention); the weight's shape read from its \
           packed object",
    source: TORCHSCAN,
};
const INTEGER_ELEMENTWISE: &Convention = &Convention {
    rule: "integer operations, not FLOPs: 1 per output element; requantization and a fused ReLU not counted",
    source: TORCHSCAN,
};
const MIN_MAX: &Convention =
    &Convention { rule: "2 FLOPs per input element: a minimum and a maximum", source: TORCHSCAN };
const PRELU_BACKWARD: &Convention = &Convention {
    rule: "2 FLOPs per input element: the input gradient and the weight gradient's accumulation",
    source: TORCHSCAN,
};
const GLU: &Convention = &Convention {
    rule: "2 FLOPs per output element (a sigmoid and a multiply): 1 per input element",
    source: TORCHSCAN,
};
const GLU_BACKWARD: &Convention =
    &Convention { rule: "1 FLOP per input-gradient element (the activation-backward convention)", source: TORCHSCAN };
const TAPS: &Convention = &Convention { rule: "1 FLOP per interpolation tap per output element", source: FVCORE };

macro_rules! row {
    ($op:literal, $cat:ident, $f:expr, $conv:expr) => {
        Formula {
            operator: $op,
            category: Category::$cat,
            flops: $f,
            formula: stringify!($f),
            convention: $conv,
            sparse: None,
            complex: None,
            float: None,
        }
    };
    ($op:literal, $cat:ident, $f:expr, $conv:expr, sparse: $s:expr) => {
        Formula {
            operator: $op,
            category: Category::$cat,
            flops: $f,
            formula: concat!(stringify!($f), "`, sparse: `", stringify!($s)),
            convention: $conv,
            sparse: Some($s),
            complex: None,
            float: None,
        }
    };
    ($op:literal, $cat:ident, $f:expr, $conv:expr, sparse: $s:expr, complex: $k:literal) => {
        Formula {
            operator: $op,
            category: Category::$cat,
            flops: $f,
            formula: concat!(stringify!($f), "`, sparse: `", stringify!($s), "`, complex: `x", stringify!($k)),
            convention: $conv,
            sparse: Some($s),
            complex: Some($k),
            float: None,
        }
    };
    ($op:literal, $cat:ident, $f:expr, $conv:expr, complex: $k:literal) => {
        Formula {
            operator: $op,
            category: Category::$cat,
            flops: $f,
            formula: concat!(stringify!($f), "`, complex: `x", stringify!($k)),
            convention: $conv,
            sparse: None,
            complex: Some($k),
            float: None,
        }
    };
    ($op:literal, Integer, $f:expr, $conv:expr, float: $g:expr) => {
        Formula {
            operator: $op,
            category: Category::Integer,
            flops: $f,
            formula: concat!(stringify!($f), "`, FLOPs: `", stringify!($g)),
            convention: $conv,
            sparse: None,
            complex: None,
            float: Some($g),
        }
    };
}

/// A pointwise operator at one FLOP per output element (functional, in-place and backward
/// kernels alike).
macro_rules! pointwise {
    ($op:literal) => {
        row!($op, Pointwise, pointwise::one_per_element, PER_ELEMENT)
    };
    ($op:literal, complex: $k:literal) => {
        row!($op, Pointwise, pointwise::one_per_element, PER_ELEMENT, complex: $k)
    };
}

/// A `_foreach_*` kernel costing `$k` FLOPs per element of its first list.
macro_rules! foreach {
    ($op:literal, $k:literal) => {
        row!($op, Pointwise, pointwise::foreach::<$k>, FOREACH)
    };
}

/// Every counted operator. Keep rows grouped by family; `registry_has_no_duplicates` guards keys.
pub static FORMULAS: &[Formula] = &[
    // Matrix products. matmul/linear/einsum are composites that reach these.
    row!("aten::mm", Matmul, matmul::mm, SPARSE_MACS, sparse: sparse::mm),
    // The bias convention (`matmul.rs`): an added input costs what the separate operators would.
    row!("aten::addmm", Matmul, matmul::addmm, SPARSE_ADDED_INPUT, sparse: sparse::addmm),
    row!("aten::bmm", Matmul, matmul::bmm, SPARSE_MACS, sparse: sparse::bmm),
    row!("aten::baddbmm", Matmul, matmul::baddbmm, ADDED_INPUT),
    row!("aten::addbmm", Matmul, matmul::addbmm, ADDED_INPUT),
    row!("aten::mv", Matmul, matmul::mv, SPARSE_MACS, sparse: sparse::mv),
    row!("aten::addmv", Matmul, matmul::addmv, SPARSE_ADDED_INPUT, sparse: sparse::addmv),
    row!("aten::dot", Matmul, matmul::dot, PYTORCH),
    row!("aten::vdot", Matmul, matmul::dot, PYTORCH),
    // PyTorch rejects a bias to the grouped products ("Bias not supported yet").
    row!("aten::_grouped_mm", Matmul, matmul::grouped_mm, PYTORCH),
    row!("aten::_addmm_activation", Matmul, matmul::addmm_activation, ADDMM_ACTIVATION),
    // Low-precision (fp8) products: the scales are per tensor, row or block, not counted; a bias is
    // (the bias convention).
    row!("aten::_scaled_mm", Matmul, matmul::scaled_mm, BIASED_PRODUCT),
    row!("aten::_scaled_mm_v2", Matmul, matmul::scaled_mm_v2, BIASED_PRODUCT),
    row!("aten::_scaled_grouped_mm", Matmul, matmul::grouped_mm, PYTORCH),
    row!("aten::_scaled_grouped_mm_v2", Matmul, matmul::grouped_mm, PYTORCH),
    // Convolutions: the outermost claims the call, so backend variants below never double count.
    // A bias costs its add, 1 per output element, and its gradient its sum (the bias convention).
    row!("aten::convolution", Conv, conv::convolution, CONV_BIAS),
    row!("aten::_convolution", Conv, conv::convolution, CONV_BIAS),
    row!("aten::convolution_backward", Conv, conv::convolution_backward, GROUPED_WGRAD),
    row!("aten::_slow_conv2d_forward", Conv, conv_backends::slow, BACKEND_CONV),
    row!("aten::slow_conv3d_forward", Conv, conv_backends::slow, BACKEND_CONV),
    row!("aten::slow_conv_dilated2d", Conv, conv_backends::slow, BACKEND_CONV),
    row!("aten::slow_conv_dilated3d", Conv, conv_backends::slow, BACKEND_CONV),
    row!("aten::_conv_depthwise2d", Conv, conv_backends::slow, BACKEND_CONV),
    row!("aten::conv_depthwise3d", Conv, conv_backends::slow, BACKEND_CONV),
    row!("aten::slow_conv_transpose2d", Conv, conv_backends::slow_transpose, BACKEND_CONV),
    row!("aten::slow_conv_transpose3d", Conv, conv_backends::slow_transpose, BACKEND_CONV),
    row!("aten::_slow_conv2d_backward", Conv, conv_backends::slow_backward, BACKEND_CONV),
    row!("aten::cudnn_convolution", Conv, conv_backends::cudnn, BACKEND_CONV),
    row!("aten::cudnn_convolution_transpose", Conv, conv_backends::cudnn_transpose, BACKEND_CONV),
    row!("aten::cudnn_convolution_relu", Conv, conv_backends::relu, BACKEND_CONV),
    row!("aten::cudnn_convolution_add_relu", Conv, conv_backends::add_relu, BACKEND_CONV),
    row!("aten::miopen_convolution", Conv, conv_backends::miopen, BACKEND_CONV),
    row!("aten::miopen_depthwise_convolution", Conv, conv_backends::miopen, BACKEND_CONV),
    row!("aten::miopen_convolution_transpose", Conv, conv_backends::miopen_transpose, BACKEND_CONV),
    row!("aten::miopen_convolution_relu", Conv, conv_backends::relu, BACKEND_CONV),
    row!("aten::miopen_convolution_add_relu", Conv, conv_backends::add_relu, BACKEND_CONV),
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
    // nn.TransformerEncoderLayer's inference fast path: a kernel made of dispatched operators
    // (attention, linear layers, norms, activations), which are counted.
    row!("aten::_transformer_encoder_layer_fwd", Attention, descend, COMPOSITE_KERNEL),
    // nn.MultiheadAttention's inference fast path (torchvision ViT): projections included.
    row!("aten::_native_multi_head_attention", Attention, attention::native_multi_head_attention, MHA),
    // Elementwise arithmetic. `complex: xK`: on complex operands (the kernel computes in the
    // complex dtype, a real operand promoted), K real FLOPs per element, the textbook count of
    // the operation on (a + bi): an add, subtract or negate 2 (one per part); a multiply 6
    // (ac - bd, ad + bc: 4 multiplies, 2 adds); a division 11 ((ac + bd) / (c^2 + d^2),
    // (bc - ad) / (c^2 + d^2): 6 multiplies, 3 adds, 2 divisions); abs 4 (2 squares, an add, a
    // square root); exp 5 (e^a, cos b, sin b, 2 multiplies); reciprocal 6 (2 squares, an add,
    // 2 divisions, a negation); sgn 6 (abs, then 2 divisions); angle 1 (an atan2); conj_physical
    // 1 (the imaginary part negated). Other pointwise operators have no complex count stated:
    // such a call is partial, not guessed.
    row!("aten::add", Pointwise, pointwise::one_per_element, SPARSE_ADD, sparse: sparse::add, complex: 2),
    row!("aten::add_", Pointwise, pointwise::one_per_element, SPARSE_ADD, sparse: sparse::add, complex: 2),
    row!("aten::sub", Pointwise, pointwise::one_per_element, SPARSE_ADD, sparse: sparse::add, complex: 2),
    row!("aten::sub_", Pointwise, pointwise::one_per_element, SPARSE_ADD, sparse: sparse::add, complex: 2),
    pointwise!("aten::rsub", complex: 2),
    pointwise!("aten::mul", complex: 6),
    pointwise!("aten::mul_", complex: 6),
    pointwise!("aten::div", complex: 11),
    pointwise!("aten::div_", complex: 11),
    pointwise!("aten::neg", complex: 2),
    pointwise!("aten::neg_", complex: 2),
    pointwise!("aten::abs", complex: 4),
    pointwise!("aten::abs_"),
    pointwise!("aten::sign"),
    pointwise!("aten::reciprocal", complex: 6),
    pointwise!("aten::reciprocal_", complex: 6),
    pointwise!("aten::pow"),
    pointwise!("aten::pow_"),
    pointwise!("aten::sqrt"),
    pointwise!("aten::sqrt_"),
    pointwise!("aten::rsqrt"),
    pointwise!("aten::rsqrt_"),
    pointwise!("aten::exp", complex: 5),
    pointwise!("aten::exp_", complex: 5),
    pointwise!("aten::expm1"),
    pointwise!("aten::log"),
    pointwise!("aten::log_"),
    pointwise!("aten::log1p"),
    pointwise!("aten::log2"),
    pointwise!("aten::sin"),
    pointwise!("aten::cos"),
    pointwise!("aten::erf"),
    pointwise!("aten::floor"),
    pointwise!("aten::ceil"),
    pointwise!("aten::round"),
    pointwise!("aten::trunc"),
    pointwise!("aten::remainder"),
    pointwise!("aten::fmod"),
    pointwise!("aten::clamp"),
    pointwise!("aten::clamp_"),
    pointwise!("aten::clamp_min"),
    pointwise!("aten::clamp_min_"),
    pointwise!("aten::clamp_max"),
    pointwise!("aten::clamp_max_"),
    pointwise!("aten::maximum"),
    pointwise!("aten::minimum"),
    // Further elementwise math: one FLOP per element, whatever the function (as activations).
    pointwise!("aten::atan2"),
    pointwise!("aten::hypot"),
    pointwise!("aten::sinh"),
    pointwise!("aten::cosh"),
    pointwise!("aten::tan"),
    pointwise!("aten::asin"),
    pointwise!("aten::acos"),
    pointwise!("aten::atan"),
    pointwise!("aten::asinh"),
    pointwise!("aten::acosh"),
    pointwise!("aten::atanh"),
    pointwise!("aten::lgamma"),
    pointwise!("aten::digamma"),
    pointwise!("aten::polygamma"),
    pointwise!("aten::erfc"),
    pointwise!("aten::erfinv"),
    pointwise!("aten::exp2"),
    pointwise!("aten::log10"),
    pointwise!("aten::xlogy"),
    pointwise!("aten::special_xlog1py"),
    pointwise!("aten::logit"),
    pointwise!("aten::logit_backward"),
    pointwise!("aten::nan_to_num"),
    pointwise!("aten::sgn", complex: 6),
    pointwise!("aten::frac"),
    pointwise!("aten::copysign"),
    pointwise!("aten::logaddexp"),
    pointwise!("aten::logaddexp2"),
    pointwise!("aten::fmin"),
    pointwise!("aten::fmax"),
    pointwise!("aten::sinc"),
    pointwise!("aten::i0"),
    pointwise!("aten::special_i0e"),
    pointwise!("aten::special_i1"),
    pointwise!("aten::special_i1e"),
    pointwise!("aten::special_entr"),
    pointwise!("aten::special_erfcx"),
    pointwise!("aten::special_ndtri"),
    pointwise!("aten::special_log_ndtr"),
    pointwise!("aten::floor_divide"),
    pointwise!("aten::heaviside"),
    pointwise!("aten::nextafter"),
    pointwise!("aten::signbit"),
    pointwise!("aten::logical_xor"),
    pointwise!("aten::bitwise_left_shift"),
    pointwise!("aten::bitwise_right_shift"),
    pointwise!("aten::angle", complex: 1),
    pointwise!("aten::conj_physical", complex: 1),
    pointwise!("aten::frexp"),
    pointwise!("aten::igamma"),
    pointwise!("aten::igammac"),
    pointwise!("aten::special_airy_ai"),
    pointwise!("aten::special_bessel_j0"),
    pointwise!("aten::special_bessel_j1"),
    pointwise!("aten::special_bessel_y0"),
    pointwise!("aten::special_bessel_y1"),
    pointwise!("aten::special_modified_bessel_i0"),
    pointwise!("aten::special_modified_bessel_i1"),
    pointwise!("aten::special_modified_bessel_k0"),
    pointwise!("aten::special_modified_bessel_k1"),
    pointwise!("aten::special_scaled_modified_bessel_k0"),
    pointwise!("aten::special_scaled_modified_bessel_k1"),
    pointwise!("aten::special_spherical_bessel_j0"),
    pointwise!("aten::special_zeta"),
    pointwise!("aten::special_chebyshev_polynomial_t"),
    pointwise!("aten::special_chebyshev_polynomial_u"),
    pointwise!("aten::special_chebyshev_polynomial_v"),
    pointwise!("aten::special_chebyshev_polynomial_w"),
    pointwise!("aten::special_shifted_chebyshev_polynomial_t"),
    pointwise!("aten::special_shifted_chebyshev_polynomial_u"),
    pointwise!("aten::special_shifted_chebyshev_polynomial_v"),
    pointwise!("aten::special_shifted_chebyshev_polynomial_w"),
    pointwise!("aten::special_hermite_polynomial_h"),
    pointwise!("aten::special_hermite_polynomial_he"),
    pointwise!("aten::special_laguerre_polynomial_l"),
    pointwise!("aten::special_legendre_polynomial_p"),
    pointwise!("aten::_fused_dropout"),
    row!("aten::_add_relu", Pointwise, pointwise::per_element::<2>, ADD_RELU),
    row!("aten::_masked_scale", Pointwise, pointwise::per_element::<2>, MASKED_SCALE),
    // Activations and their gradient kernels: one FLOP per element, whatever the function.
    pointwise!("aten::relu"),
    pointwise!("aten::relu_"),
    pointwise!("aten::threshold"),
    pointwise!("aten::threshold_"),
    pointwise!("aten::threshold_backward"),
    pointwise!("aten::hardtanh"),
    pointwise!("aten::hardtanh_"),
    pointwise!("aten::hardtanh_backward"),
    pointwise!("aten::leaky_relu"),
    pointwise!("aten::leaky_relu_"),
    pointwise!("aten::leaky_relu_backward"),
    pointwise!("aten::elu"),
    pointwise!("aten::elu_"),
    pointwise!("aten::elu_backward"),
    pointwise!("aten::gelu"),
    pointwise!("aten::gelu_"),
    pointwise!("aten::gelu_backward"),
    pointwise!("aten::silu"),
    pointwise!("aten::silu_"),
    pointwise!("aten::silu_backward"),
    pointwise!("aten::mish"),
    pointwise!("aten::mish_"),
    pointwise!("aten::mish_backward"),
    pointwise!("aten::sigmoid"),
    pointwise!("aten::sigmoid_"),
    pointwise!("aten::sigmoid_backward"),
    pointwise!("aten::tanh"),
    pointwise!("aten::tanh_"),
    pointwise!("aten::tanh_backward"),
    pointwise!("aten::hardsigmoid"),
    pointwise!("aten::hardsigmoid_"),
    pointwise!("aten::hardsigmoid_backward"),
    pointwise!("aten::hardswish"),
    pointwise!("aten::hardswish_"),
    pointwise!("aten::hardswish_backward"),
    pointwise!("aten::softplus"),
    pointwise!("aten::softplus_backward"),
    pointwise!("aten::log_sigmoid_forward"),
    pointwise!("aten::log_sigmoid_backward"),
    pointwise!("aten::hardshrink"),
    pointwise!("aten::hardshrink_backward"),
    pointwise!("aten::softshrink"),
    pointwise!("aten::softshrink_backward"),
    pointwise!("aten::rrelu_with_noise"),
    pointwise!("aten::rrelu_with_noise_backward"),
    // PReLU's weight is per channel and GLU's output is half its input: priced by one tensor.
    row!("aten::_prelu_kernel", Pointwise, pointwise::per_tensor_element::<0, 1>, PER_ELEMENT),
    row!("aten::_prelu_kernel_backward", Pointwise, pointwise::per_tensor_element::<1, 2>, PRELU_BACKWARD),
    row!("aten::glu", Pointwise, pointwise::per_tensor_element::<0, 1>, GLU),
    row!("aten::glu_backward", Pointwise, pointwise::per_tensor_element::<1, 1>, GLU_BACKWARD),
    // Kernels of quantized models (`quantize.rs`): integer operations, apart from FLOPs.
    row!("aten::_int_mm", Integer, matmul::mm, INTEGER_PRODUCT),
    row!("quantized::linear", Integer, quantize::packed_linear, INTEGER_PRODUCT),
    row!("quantized::linear_relu", Integer, quantize::packed_linear, INTEGER_PRODUCT),
    row!(
        "quantized::linear_dynamic",
        Integer,
        quantize::packed_linear,
        DYNAMIC_INTEGER_PRODUCT,
        float: quantize::dynamic_linear_float::<0>
    ),
    row!(
        "quantized::linear_relu_dynamic",
        Integer,
        quantize::packed_linear,
        DYNAMIC_INTEGER_PRODUCT,
        float: quantize::dynamic_linear_float::<1>
    ),
    row!("quantized::linear_dynamic_fp16", Matmul, quantize::packed_fp16_linear::<0>, PACKED_FP16_PRODUCT),
    row!("quantized::linear_relu_dynamic_fp16", Matmul, quantize::packed_fp16_linear::<1>, PACKED_FP16_PRODUCT),
    row!("quantized::conv1d", Integer, quantize::packed_conv, INTEGER_PRODUCT),
    row!("quantized::conv2d", Integer, quantize::packed_conv, INTEGER_PRODUCT),
    row!("quantized::conv3d", Integer, quantize::packed_conv, INTEGER_PRODUCT),
    row!("quantized::conv1d_relu", Integer, quantize::packed_conv, INTEGER_PRODUCT),
    row!("quantized::conv2d_relu", Integer, quantize::packed_conv, INTEGER_PRODUCT),
    row!("quantized::conv3d_relu", Integer, quantize::packed_conv, INTEGER_PRODUCT),
    row!("quantized::conv2d_add", Integer, quantize::packed_conv, INTEGER_PRODUCT),
    row!("quantized::conv2d_add_relu", Integer, quantize::packed_conv, INTEGER_PRODUCT),
    row!("quantized::conv_transpose1d", Integer, quantize::packed_conv, INTEGER_PRODUCT),
    row!("quantized::conv_transpose2d", Integer, quantize::packed_conv, INTEGER_PRODUCT),
    row!("quantized::conv_transpose3d", Integer, quantize::packed_conv, INTEGER_PRODUCT),
    row!("quantized::add", Integer, quantize::elementwise, INTEGER_ELEMENTWISE),
    row!("quantized::add_relu", Integer, quantize::elementwise, INTEGER_ELEMENTWISE),
    row!("quantized::add_scalar", Integer, quantize::elementwise, INTEGER_ELEMENTWISE),
    row!("quantized::add_scalar_relu", Integer, quantize::elementwise, INTEGER_ELEMENTWISE),
    row!("quantized::mul", Integer, quantize::elementwise, INTEGER_ELEMENTWISE),
    row!("quantized::mul_relu", Integer, quantize::elementwise, INTEGER_ELEMENTWISE),
    row!("quantized::mul_scalar", Integer, quantize::elementwise, INTEGER_ELEMENTWISE),
    row!("quantized::mul_scalar_relu", Integer, quantize::elementwise, INTEGER_ELEMENTWISE),
    // Quantization in floating point (integer kernels of quantized models are not FLOPs).
    row!("aten::quantize_per_tensor", Pointwise, quantize::per_input_element::<4>, QUANTIZE),
    row!("aten::quantize_per_tensor_dynamic", Pointwise, quantize::per_input_element::<6>, DYNAMIC_QUANTIZE),
    row!("aten::quantize_per_channel", Pointwise, quantize::per_input_element::<4>, QUANTIZE),
    row!("aten::dequantize", Pointwise, quantize::per_input_element::<2>, DEQUANTIZE),
    row!("aten::fake_quantize_per_tensor_affine_cachemask", Pointwise, quantize::per_input_element::<6>, FAKE_QUANTIZE),
    row!(
        "aten::_fake_quantize_per_tensor_affine_cachemask_tensor_qparams",
        Pointwise,
        quantize::per_input_element::<6>,
        FAKE_QUANTIZE
    ),
    row!(
        "aten::fake_quantize_per_channel_affine_cachemask",
        Pointwise,
        quantize::per_input_element::<6>,
        FAKE_QUANTIZE
    ),
    row!(
        "aten::_fake_quantize_learnable_per_tensor_affine",
        Pointwise,
        quantize::per_input_element::<6>,
        FAKE_QUANTIZE
    ),
    row!(
        "aten::_fake_quantize_learnable_per_channel_affine",
        Pointwise,
        quantize::per_input_element::<6>,
        FAKE_QUANTIZE
    ),
    row!("aten::_fused_moving_avg_obs_fq_helper", Pointwise, quantize::per_input_element::<8>, OBSERVE_FAKE_QUANTIZE),
    row!(
        "aten::_fused_moving_avg_obs_fq_helper_functional",
        Pointwise,
        quantize::per_input_element::<8>,
        OBSERVE_FAKE_QUANTIZE
    ),
    // Dropout's fused kernels: the mask multiply (the mask's random numbers are creation).
    pointwise!("aten::native_dropout"),
    pointwise!("aten::native_dropout_backward"),
    // Optimizer arithmetic: self + value * t1 * t2, self + value * t1 / t2, self + w * (end - self).
    row!("aten::addcmul", Pointwise, pointwise::per_element::<3>, THREE),
    row!("aten::addcmul_", Pointwise, pointwise::per_element::<3>, THREE),
    row!("aten::addcdiv", Pointwise, pointwise::per_element::<3>, THREE),
    row!("aten::addcdiv_", Pointwise, pointwise::per_element::<3>, THREE),
    row!("aten::lerp", Pointwise, pointwise::per_element::<3>, THREE),
    row!("aten::lerp_", Pointwise, pointwise::per_element::<3>, THREE),
    // Multi-tensor optimizer kernels (SGD, Adam, AdamW with foreach=True).
    foreach!("aten::_foreach_add", 1),
    foreach!("aten::_foreach_add_", 1),
    foreach!("aten::_foreach_sub", 1),
    foreach!("aten::_foreach_sub_", 1),
    foreach!("aten::_foreach_mul", 1),
    foreach!("aten::_foreach_mul_", 1),
    foreach!("aten::_foreach_div", 1),
    foreach!("aten::_foreach_div_", 1),
    foreach!("aten::_foreach_neg", 1),
    foreach!("aten::_foreach_neg_", 1),
    foreach!("aten::_foreach_sqrt", 1),
    foreach!("aten::_foreach_sqrt_", 1),
    foreach!("aten::_foreach_reciprocal_", 1),
    foreach!("aten::_foreach_maximum_", 1),
    foreach!("aten::_foreach_pow", 1),
    foreach!("aten::_foreach_abs", 1),
    foreach!("aten::_foreach_acos", 1),
    foreach!("aten::_foreach_asin", 1),
    foreach!("aten::_foreach_atan", 1),
    foreach!("aten::_foreach_ceil", 1),
    foreach!("aten::_foreach_cos", 1),
    foreach!("aten::_foreach_cosh", 1),
    foreach!("aten::_foreach_erf", 1),
    foreach!("aten::_foreach_erfc", 1),
    foreach!("aten::_foreach_exp", 1),
    foreach!("aten::_foreach_expm1", 1),
    foreach!("aten::_foreach_floor", 1),
    foreach!("aten::_foreach_frac", 1),
    foreach!("aten::_foreach_lgamma", 1),
    foreach!("aten::_foreach_log", 1),
    foreach!("aten::_foreach_log10", 1),
    foreach!("aten::_foreach_log1p", 1),
    foreach!("aten::_foreach_log2", 1),
    foreach!("aten::_foreach_reciprocal", 1),
    foreach!("aten::_foreach_round", 1),
    foreach!("aten::_foreach_rsqrt", 1),
    foreach!("aten::_foreach_sigmoid", 1),
    foreach!("aten::_foreach_sign", 1),
    foreach!("aten::_foreach_sin", 1),
    foreach!("aten::_foreach_sinh", 1),
    foreach!("aten::_foreach_tan", 1),
    foreach!("aten::_foreach_tanh", 1),
    foreach!("aten::_foreach_trunc", 1),
    foreach!("aten::_foreach_clamp_max", 1),
    foreach!("aten::_foreach_clamp_min", 1),
    foreach!("aten::_foreach_maximum", 1),
    foreach!("aten::_foreach_minimum", 1),
    foreach!("aten::_foreach_max", 1),
    row!("aten::_foreach_powsum", Reduction, pointwise::foreach::<2>, P_NORM),
    // Mixed precision: the gradient scaler's unscale (a finiteness test and a multiply) and its
    // scale update (a few scalar operations).
    row!("aten::_amp_foreach_non_finite_check_and_unscale_", Pointwise, pointwise::foreach::<2>, AMP_UNSCALE),
    pointwise!("aten::_amp_update_scale_"),
    foreach!("aten::_foreach_addcmul", 3),
    foreach!("aten::_foreach_addcmul_", 3),
    foreach!("aten::_foreach_addcdiv", 3),
    foreach!("aten::_foreach_addcdiv_", 3),
    foreach!("aten::_foreach_lerp", 3),
    foreach!("aten::_foreach_lerp_", 3),
    // Fused optimizer steps (fused=True) and gradient clipping's norms.
    row!("aten::_fused_adam_", Pointwise, pointwise::fused_adam, FUSED_OPTIMIZER),
    row!("aten::_fused_adamw_", Pointwise, pointwise::fused_adam, FUSED_OPTIMIZER),
    row!("aten::_fused_sgd_", Pointwise, pointwise::fused_sgd, FUSED_OPTIMIZER),
    row!("aten::_fused_adagrad_", Pointwise, pointwise::fused_adagrad, FUSED_OPTIMIZER),
    row!("aten::_foreach_norm", Reduction, pointwise::foreach::<2>, P_NORM),
    // Tests, comparisons and logic: one per element.
    pointwise!("aten::eq"),
    pointwise!("aten::ne"),
    pointwise!("aten::lt"),
    pointwise!("aten::le"),
    pointwise!("aten::gt"),
    pointwise!("aten::ge"),
    pointwise!("aten::isneginf"),
    pointwise!("aten::isposinf"),
    pointwise!("aten::isinf"),
    pointwise!("aten::isnan"),
    pointwise!("aten::bitwise_and"),
    pointwise!("aten::bitwise_or"),
    pointwise!("aten::bitwise_xor"),
    pointwise!("aten::bitwise_not"),
    pointwise!("aten::logical_and"),
    pointwise!("aten::logical_or"),
    pointwise!("aten::logical_not"),
    pointwise!("aten::equal"),
    row!("aten::linalg_cross", Pointwise, pointwise::per_element::<3>, CROSS),
    // max/min: elementwise with `other`, reductions otherwise.
    row!("aten::max", Reduction, pointwise::elementwise_or_reduction, PER_INPUT),
    row!("aten::min", Reduction, pointwise::elementwise_or_reduction, PER_INPUT),
    // Reductions.
    // A complex sum or mean adds both parts of each element: 2 real FLOPs per complex one.
    row!("aten::sum", Reduction, reduction::one_per_input_element, PER_INPUT, complex: 2),
    row!("aten::mean", Reduction, reduction::one_per_input_element, PER_INPUT, complex: 2),
    row!("aten::prod", Reduction, reduction::one_per_input_element, PER_INPUT),
    row!("aten::amax", Reduction, reduction::one_per_input_element, PER_INPUT),
    row!("aten::amin", Reduction, reduction::one_per_input_element, PER_INPUT),
    row!("aten::argmax", Reduction, reduction::one_per_input_element, PER_INPUT),
    row!("aten::argmin", Reduction, reduction::one_per_input_element, PER_INPUT),
    row!("aten::all", Reduction, reduction::one_per_input_element, PER_INPUT),
    row!("aten::any", Reduction, reduction::one_per_input_element, PER_INPUT),
    row!("aten::cumsum", Reduction, reduction::one_per_input_element, PER_INPUT),
    row!("aten::var", Reduction, reduction::one_per_input_element, PER_INPUT),
    row!("aten::var_mean", Reduction, reduction::one_per_input_element, PER_INPUT),
    row!("aten::std", Reduction, reduction::one_per_input_element, PER_INPUT),
    row!("aten::std_mean", Reduction, reduction::one_per_input_element, PER_INPUT),
    row!("aten::norm", Reduction, reduction::p_norm, P_NORM),
    row!("aten::linalg_vector_norm", Reduction, reduction::p_norm, P_NORM),
    row!("aten::logsumexp", Reduction, reduction::one_per_input_element, PER_INPUT),
    row!("aten::aminmax", Reduction, quantize::per_input_element::<2>, MIN_MAX),
    row!("aten::_aminmax", Reduction, quantize::per_input_element::<2>, MIN_MAX),
    row!("aten::cumprod", Reduction, reduction::one_per_input_element, PER_INPUT),
    row!("aten::nansum", Reduction, reduction::one_per_input_element, PER_INPUT),
    row!("aten::count_nonzero", Reduction, reduction::one_per_input_element, PER_INPUT),
    row!("aten::bincount", Reduction, reduction::one_per_input_element, ACCUMULATE),
    row!("aten::_logcumsumexp", Reduction, reduction::one_per_input_element, PER_INPUT),
    row!("aten::_cummax_helper", Reduction, reduction::one_per_input_element, PER_INPUT),
    row!("aten::_cummin_helper", Reduction, reduction::one_per_input_element, PER_INPUT),
    row!("aten::trace", Reduction, select::trace, PER_INPUT),
    // Sorting, selection and histograms: comparisons from the input shape (data-dependent work).
    row!("aten::sort", Reduction, select::sort, SORTING),
    row!("aten::topk", Reduction, select::topk, SORTING),
    row!("aten::kthvalue", Reduction, select::kthvalue, SORTING),
    row!("aten::median", Reduction, select::median, SORTING),
    row!("aten::nanmedian", Reduction, select::median, SORTING),
    row!("aten::_unique2", Reduction, select::unique, SORTING),
    row!("aten::histc", Reduction, select::histc, SORTING),
    row!("aten::isin", Reduction, select::isin, SORTING),
    // Accumulating writes.
    row!("aten::embedding_dense_backward", Reduction, reduction::one_per_source_element, ACCUMULATE),
    row!("aten::index_put", Reduction, reduction::index_put, ACCUMULATE),
    row!("aten::index_put_", Reduction, reduction::index_put, ACCUMULATE),
    row!("aten::_index_put_impl_", Reduction, reduction::index_put, ACCUMULATE),
    row!("aten::col2im", Reduction, reduction::one_per_input_element, ACCUMULATE),
    row!("aten::unfold_backward", Reduction, reduction::one_per_input_element, ACCUMULATE),
    row!("aten::scatter", Reduction, select::scatter, SCATTER),
    row!("aten::scatter_add", Reduction, select::scatter_accumulate, SCATTER),
    row!("aten::scatter_reduce", Reduction, select::scatter_accumulate, SCATTER),
    row!("aten::index_add", Reduction, select::index_add, SCATTER),
    row!("aten::_embedding_bag", Reduction, select::embedding_bag, SCATTER),
    row!("aten::_embedding_bag_forward_only", Reduction, select::embedding_bag, SCATTER),
    row!("aten::_embedding_bag_backward", Reduction, select::embedding_bag_backward, SCATTER),
    row!("aten::_embedding_bag_dense_backward", Reduction, select::embedding_bag_dense_backward, SCATTER),
    // Losses.
    row!("aten::nll_loss_forward", Loss, loss::nll_loss_forward, LOSS),
    row!("aten::nll_loss2d_forward", Loss, loss::nll_loss_forward, LOSS),
    row!("aten::nll_loss_backward", Loss, loss::nll_loss_backward, LOSS),
    row!("aten::nll_loss2d_backward", Loss, loss::nll_loss_backward, LOSS),
    row!("aten::mse_loss", Loss, loss::mse_loss, ELEMENTWISE_LOSS),
    row!("aten::mse_loss_backward", Loss, loss::mse_loss_backward, ELEMENTWISE_LOSS),
    row!("aten::huber_loss", Loss, loss::huber_loss, ELEMENTWISE_LOSS),
    row!("aten::huber_loss_backward", Loss, loss::huber_loss_backward, ELEMENTWISE_LOSS),
    row!("aten::smooth_l1_loss", Loss, loss::huber_loss, ELEMENTWISE_LOSS),
    row!("aten::smooth_l1_loss_backward", Loss, loss::huber_loss_backward, ELEMENTWISE_LOSS),
    row!("aten::multi_margin_loss", Loss, loss::multi_margin_loss, MARGIN_LOSS),
    row!("aten::multi_margin_loss_backward", Loss, loss::multi_margin_loss_backward, MARGIN_LOSS),
    row!("aten::multilabel_margin_loss_forward", Loss, loss::multilabel_margin_loss, MARGIN_LOSS),
    row!("aten::multilabel_margin_loss_backward", Loss, loss::multilabel_margin_loss_backward, MARGIN_LOSS),
    row!("aten::_ctc_loss", Loss, loss::ctc_loss, CTC),
    row!("aten::_ctc_loss_backward", Loss, loss::ctc_loss_backward, CTC),
    row!("aten::binary_cross_entropy", Loss, loss::binary_cross_entropy, ELEMENTWISE_LOSS),
    row!("aten::binary_cross_entropy_backward", Loss, loss::binary_cross_entropy_backward, ELEMENTWISE_LOSS),
    // Recurrent layers run as one kernel (nn.LSTM on CPU).
    row!("aten::mkldnn_rnn_layer", Matmul, rnn::mkldnn_rnn_layer, LSTM),
    row!("aten::mkldnn_rnn_layer_backward", Matmul, rnn::mkldnn_rnn_layer_backward, LSTM),
    // Softmax.
    row!("aten::_softmax", Softmax, softmax::forward, SOFTMAX),
    row!("aten::_log_softmax", Softmax, softmax::forward, SOFTMAX),
    row!("aten::_softmax_backward_data", Softmax, softmax::backward, SOFTMAX),
    row!("aten::_log_softmax_backward_data", Softmax, softmax::backward, SOFTMAX),
    // Normalization.
    row!("aten::native_batch_norm", Normalization, norm::batch_norm, NORM),
    row!("aten::_native_batch_norm_legit", Normalization, norm::batch_norm, NORM),
    // AOTAutograd's functional form (torch.compile): the running stats come back as outputs
    // instead of being updated in place; the same arithmetic, the same arguments.
    row!("aten::_native_batch_norm_legit_functional", Normalization, norm::batch_norm, NORM),
    row!("aten::_native_batch_norm_legit_no_training", Normalization, norm::batch_norm_no_training, NORM),
    row!("aten::native_batch_norm_backward", Normalization, norm::batch_norm_backward, NORM),
    row!("aten::native_layer_norm", Normalization, norm::layer_norm, NORM),
    row!("aten::native_layer_norm_backward", Normalization, norm::layer_norm_backward, NORM),
    row!("aten::native_group_norm", Normalization, norm::group_norm, NORM),
    row!("aten::native_group_norm_backward", Normalization, norm::group_norm_backward, NORM),
    row!("aten::_fused_rms_norm", Normalization, norm::rms_norm, RMS_NORM),
    row!("aten::_fused_rms_norm_backward", Normalization, norm::rms_norm_backward, RMS_NORM),
    row!("aten::_weight_norm_interface", Normalization, norm::weight_norm, RMS_NORM),
    row!("aten::_weight_norm_interface_backward", Normalization, norm::weight_norm_backward, RMS_NORM),
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
    row!("aten::fractional_max_pool2d", Pooling, pool::fractional_max_pool::<2>, WINDOW),
    row!("aten::fractional_max_pool3d", Pooling, pool::fractional_max_pool::<3>, WINDOW),
    row!("aten::fractional_max_pool2d_backward", Pooling, pool::max_pool_backward, ROUTE),
    row!("aten::fractional_max_pool3d_backward", Pooling, pool::max_pool_backward, ROUTE),
    // Interpolation (F.interpolate): taps per output element; nearest forward is a copy.
    row!("aten::upsample_linear1d", Interpolation, interpolate::forward::<1, 2>, TAPS),
    row!("aten::upsample_bilinear2d", Interpolation, interpolate::forward::<2, 4>, TAPS),
    row!("aten::upsample_bicubic2d", Interpolation, interpolate::forward::<2, 16>, TAPS),
    row!("aten::upsample_trilinear3d", Interpolation, interpolate::forward::<3, 8>, TAPS),
    row!("aten::upsample_linear1d_backward", Interpolation, interpolate::backward::<2>, TAPS),
    row!("aten::upsample_bilinear2d_backward", Interpolation, interpolate::backward::<4>, TAPS),
    row!("aten::upsample_bicubic2d_backward", Interpolation, interpolate::backward::<16>, TAPS),
    row!("aten::upsample_trilinear3d_backward", Interpolation, interpolate::backward::<8>, TAPS),
    row!("aten::upsample_nearest1d_backward", Interpolation, interpolate::backward::<1>, ROUTE),
    row!("aten::upsample_nearest2d_backward", Interpolation, interpolate::backward::<1>, ROUTE),
    row!("aten::upsample_nearest3d_backward", Interpolation, interpolate::backward::<1>, ROUTE),
    row!("aten::_upsample_nearest_exact1d_backward", Interpolation, interpolate::backward::<1>, ROUTE),
    row!("aten::_upsample_nearest_exact2d_backward", Interpolation, interpolate::backward::<1>, ROUTE),
    row!("aten::_upsample_nearest_exact3d_backward", Interpolation, interpolate::backward::<1>, ROUTE),
    row!("aten::grid_sampler_2d", Interpolation, interpolate::grid_sampler, GRID),
    row!("aten::grid_sampler_3d", Interpolation, interpolate::grid_sampler, GRID),
    row!("aten::grid_sampler_2d_backward", Interpolation, interpolate::grid_sampler_backward, GRID),
    row!("aten::grid_sampler_3d_backward", Interpolation, interpolate::grid_sampler_backward, GRID),
    // Linear algebra.
    row!("aten::linalg_inv_ex", LinearAlgebra, linalg::inv, LAPACK),
    row!("aten::_linalg_solve_ex", LinearAlgebra, linalg::solve, LAPACK),
    row!("aten::_linalg_det", LinearAlgebra, linalg::det, LAPACK),
    row!("aten::_linalg_slogdet", LinearAlgebra, linalg::det, LAPACK),
    row!("aten::linalg_cholesky_ex", LinearAlgebra, linalg::cholesky, LAPACK),
    row!("aten::_cholesky_solve_helper", LinearAlgebra, linalg::cholesky_solve, LAPACK),
    row!("aten::linalg_solve_triangular", LinearAlgebra, linalg::solve_triangular, LAPACK),
    row!("aten::_linalg_eigh", LinearAlgebra, linalg::eigh, LAPACK),
    row!("aten::linalg_eig", LinearAlgebra, linalg::eig, LAPACK),
    row!("aten::_linalg_svd", LinearAlgebra, linalg::svd, LAPACK),
    // Fourier transforms.
    row!("aten::_fft_c2c", Spectral, fft::c2c, FFT),
    row!("aten::_fft_r2c", Spectral, fft::r2c, FFT),
    row!("aten::_fft_c2r", Spectral, fft::c2r, FFT),
    // Detection (torchvision).
    row!("torchvision::nms", Reduction, detection::nms, NMS),
    row!("torchvision::roi_align", Pooling, detection::roi_align, ROI_ALIGN),
    row!("torchvision::_roi_align_backward", Pooling, detection::roi_align_backward, ROI_ALIGN),
    // Pairwise distances.
    row!("aten::_cdist_forward", Matmul, matmul::cdist, DISTANCE),
    row!("aten::_cdist_backward", Matmul, matmul::cdist_backward, DISTANCE),
    // Backend and legacy variants of the families above (issue 15: the whole operator surface).
    row!("aten::_batch_norm_with_update", Normalization, norm::batch_norm_with_update, NORM),
    row!("aten::cudnn_batch_norm", Normalization, norm::batch_norm, NORM),
    row!("aten::miopen_batch_norm", Normalization, norm::batch_norm, NORM),
    row!("aten::batch_norm_backward", Normalization, norm::batch_norm_backward, NORM),
    row!("aten::cudnn_batch_norm_backward", Normalization, norm::backend_batch_norm_backward, NORM),
    row!("aten::miopen_batch_norm_backward", Normalization, norm::backend_batch_norm_backward, NORM),
    row!("aten::batch_norm_stats", Normalization, norm::sync_stats, SYNC_BATCH_NORM),
    row!("aten::batch_norm_update_stats", Normalization, norm::sync_stats, SYNC_BATCH_NORM),
    row!("aten::batch_norm_gather_stats", Normalization, norm::sync_gather, SYNC_BATCH_NORM),
    row!("aten::batch_norm_gather_stats_with_counts", Normalization, norm::sync_gather, SYNC_BATCH_NORM),
    row!("aten::batch_norm_elemt", Normalization, norm::sync_elemt, SYNC_BATCH_NORM),
    row!("aten::batch_norm_backward_reduce", Normalization, norm::sync_backward_reduce, SYNC_BATCH_NORM),
    row!("aten::batch_norm_backward_elemt", Normalization, norm::sync_backward_elemt, SYNC_BATCH_NORM),
    row!("aten::_cudnn_attention_forward", Attention, attention::sdpa_forward, SDPA),
    row!("aten::_cudnn_attention_backward", Attention, attention::sdpa_backward, SDPA),
    row!("aten::_triton_scaled_dot_attention", Attention, attention::sdpa_forward, SDPA),
    row!("aten::_flash_attention_forward_no_dropout_inplace", Attention, attention::sdpa_forward_into, SDPA),
    row!("aten::_triton_multi_head_attention", Attention, attention::native_multi_head_attention, MHA),
    row!("aten::_transform_bias_rescale_qkv", Attention, attention::transform_bias_rescale_qkv, QKV_RESCALE),
    row!("aten::_masked_softmax", Softmax, softmax::forward, SOFTMAX),
    row!("aten::_masked_softmax_backward", Softmax, softmax::backward, SOFTMAX),
    pointwise!("aten::__lshift__"),
    pointwise!("aten::__rshift__"),
    pointwise!("aten::__ilshift__"),
    pointwise!("aten::__irshift__"),
    pointwise!("aten::gcd"),
    pointwise!("aten::lcm"),
    pointwise!("aten::polar"),
    pointwise!("aten::_standard_gamma_grad"),
    pointwise!("aten::_dirichlet_grad"),
    row!("aten::glu_jvp", Pointwise, pointwise::per_tensor_element::<0, 1>, PER_ELEMENT),
    row!("aten::glu_backward_jvp", Pointwise, pointwise::per_tensor_element::<0, 1>, PER_ELEMENT),
    // The learnable fake quantizations' backward: twice the forward's 6 per element.
    row!(
        "aten::_fake_quantize_learnable_per_tensor_affine_backward",
        Pointwise,
        pointwise::per_tensor_element::<1, 12>,
        FAKE_QUANTIZE
    ),
    row!(
        "aten::_fake_quantize_learnable_per_channel_affine_backward",
        Pointwise,
        pointwise::per_tensor_element::<1, 12>,
        FAKE_QUANTIZE
    ),
    row!("aten::mvlgamma", Pointwise, descend, COMPOSITE_KERNEL),
    row!("aten::linalg__powsum", Reduction, reduction::p_norm, P_NORM),
    row!("aten::hash_tensor", Reduction, reduction::one_per_input_element, PER_INPUT),
    row!("aten::segment_reduce", Reduction, reduction::one_per_input_element, PER_INPUT),
    row!("aten::_segment_reduce_backward", Reduction, pointwise::per_tensor_element::<2, 1>, PER_INPUT),
    row!("aten::index_reduce", Reduction, pointwise::per_tensor_element::<3, 1>, SCATTER),
    row!("aten::put_", Reduction, select::put, SCATTER),
    row!(
        "aten::_embedding_bag_per_sample_weights_backward",
        Reduction,
        select::embedding_bag_per_sample_weights_backward,
        SCATTER
    ),
    row!("aten::embedding_renorm_", Reduction, descend, COMPOSITE_KERNEL),
    row!("aten::renorm", Reduction, descend, COMPOSITE_KERNEL),
    row!("aten::reflection_pad1d_backward", Reduction, reduction::pad_backward, PAD_BACKWARD),
    row!("aten::reflection_pad2d_backward", Reduction, reduction::pad_backward, PAD_BACKWARD),
    row!("aten::reflection_pad3d_backward", Reduction, reduction::pad_backward, PAD_BACKWARD),
    row!("aten::replication_pad1d_backward", Reduction, reduction::pad_backward, PAD_BACKWARD),
    row!("aten::replication_pad2d_backward", Reduction, reduction::pad_backward, PAD_BACKWARD),
    row!("aten::replication_pad3d_backward", Reduction, reduction::pad_backward, PAD_BACKWARD),
    row!("aten::adaptive_avg_pool2d", Pooling, descend, COMPOSITE_KERNEL),
    row!("aten::adaptive_avg_pool3d", Pooling, descend, COMPOSITE_KERNEL),
    row!("aten::adaptive_avg_pool3d_backward", Pooling, pool::adaptive_avg_pool_backward::<3>, WINDOW),
    row!("aten::_upsample_bilinear2d_aa", Interpolation, interpolate::antialias::<1>, ANTIALIAS),
    row!("aten::_upsample_bicubic2d_aa", Interpolation, interpolate::antialias::<2>, ANTIALIAS),
    row!("aten::_upsample_lanczos2d_aa", Interpolation, interpolate::antialias::<3>, ANTIALIAS),
    row!("aten::_upsample_bilinear2d_aa_backward", Interpolation, interpolate::antialias_backward::<1>, ANTIALIAS),
    row!("aten::_upsample_bicubic2d_aa_backward", Interpolation, interpolate::antialias_backward::<2>, ANTIALIAS),
    row!("aten::_upsample_lanczos2d_aa_backward", Interpolation, interpolate::antialias_backward::<3>, ANTIALIAS),
    row!("aten::cudnn_grid_sampler", Interpolation, interpolate::cudnn_grid_sampler, GRID),
    row!("aten::cudnn_grid_sampler_backward", Interpolation, interpolate::cudnn_grid_sampler_backward, GRID),
    row!("aten::cudnn_affine_grid_generator", Matmul, interpolate::affine_grid, AFFINE_GRID),
    row!("aten::cudnn_affine_grid_generator_backward", Matmul, interpolate::affine_grid_backward, AFFINE_GRID),
    row!("aten::addr", Matmul, matmul::addr, OUTER_PRODUCT),
    row!("aten::sspaddmm", Matmul, matmul::addmm, SPARSE_ADDED_INPUT, sparse: sparse::sspaddmm),
    row!("aten::_foreach_mm", Matmul, matmul::foreach_mm, PYTORCH),
    row!("aten::_compute_linear_combination", Matmul, matmul::linear_combination, LINEAR_COMBINATION),
    row!("aten::_weight_int8pack_mm", Matmul, matmul::weight_int8pack_mm, WEIGHT_ONLY_QUANTIZED),
    row!("aten::_weight_int4pack_mm", Matmul, matmul::weight_int4pack_mm, WEIGHT_ONLY_QUANTIZED),
    row!("aten::_weight_int4pack_mm_for_cpu", Matmul, matmul::weight_int4pack_mm, WEIGHT_ONLY_QUANTIZED),
    row!("aten::_dyn_quant_matmul_4bit", Matmul, matmul::dyn_quant_matmul_4bit, WEIGHT_ONLY_QUANTIZED),
    row!("aten::_mixed_dtypes_linear", Matmul, matmul::mixed_dtypes_linear, WEIGHT_ONLY_QUANTIZED),
    row!("aten::_sparse_semi_structured_mm", Matmul, matmul::semi_structured_mm, SEMI_STRUCTURED),
    row!("aten::_sparse_semi_structured_addmm", Matmul, matmul::semi_structured_addmm, SEMI_STRUCTURED),
    row!("aten::_sparse_semi_structured_linear", Matmul, matmul::semi_structured_linear, SEMI_STRUCTURED),
    row!("aten::_pdist_forward", Matmul, matmul::pdist, DISTANCE),
    row!("aten::_pdist_backward", Matmul, matmul::pdist_backward, DISTANCE),
    row!("aten::_thnn_fused_lstm_cell", Pointwise, rnn::fused_lstm_cell, RNN_CELLS),
    row!("aten::_thnn_fused_lstm_cell_backward_impl", Pointwise, rnn::fused_lstm_cell_backward, RNN_CELLS),
    row!("aten::_thnn_fused_gru_cell", Pointwise, rnn::fused_gru_cell, RNN_CELLS),
    row!("aten::_thnn_fused_gru_cell_backward", Pointwise, rnn::fused_gru_cell_backward, RNN_CELLS),
    row!("aten::_cudnn_rnn", Matmul, rnn::cudnn_rnn, WHOLE_RNN),
    row!("aten::_cudnn_rnn_backward", Matmul, rnn::whole_rnn_backward, WHOLE_RNN),
    row!("aten::miopen_rnn", Matmul, rnn::miopen_rnn, WHOLE_RNN),
    row!("aten::miopen_rnn_backward", Matmul, rnn::whole_rnn_backward, WHOLE_RNN),
    row!("aten::_cudnn_ctc_loss", Loss, loss::ctc_loss, CTC),
    row!("aten::miopen_ctc_loss", Loss, loss::ctc_loss, CTC),
    row!("aten::cholesky", LinearAlgebra, linalg::cholesky, LAPACK),
    row!("aten::cholesky_inverse", LinearAlgebra, linalg::cholesky_inverse, LAPACK_FACTORIZATIONS),
    row!("aten::triangular_solve", LinearAlgebra, linalg::triangular_solve, LAPACK),
    row!("aten::geqrf", LinearAlgebra, linalg::geqrf, LAPACK_FACTORIZATIONS),
    row!("aten::linalg_householder_product", LinearAlgebra, linalg::householder_product, LAPACK_FACTORIZATIONS),
    row!("aten::ormqr", LinearAlgebra, linalg::ormqr, LAPACK_FACTORIZATIONS),
    row!("aten::linalg_lu_factor_ex", LinearAlgebra, linalg::lu_factor, LAPACK_FACTORIZATIONS),
    row!("aten::linalg_lu_solve", LinearAlgebra, linalg::lu_solve, LAPACK_FACTORIZATIONS),
    row!("aten::linalg_ldl_factor_ex", LinearAlgebra, linalg::ldl_factor, LAPACK_FACTORIZATIONS),
    row!("aten::linalg_ldl_solve", LinearAlgebra, linalg::ldl_solve, LAPACK_FACTORIZATIONS),
    row!("aten::_linalg_eigvals", LinearAlgebra, linalg::eigvals, LAPACK_FACTORIZATIONS),
    row!("aten::linalg_qr", LinearAlgebra, linalg::qr, QR),
    row!("aten::linalg_lstsq", LinearAlgebra, linalg::lstsq, LEAST_SQUARES),
    row!("aten::linalg_eigvals", LinearAlgebra, descend, COMPOSITE_KERNEL),
    row!("aten::linalg_lu", LinearAlgebra, descend, COMPOSITE_KERNEL),
    row!("aten::linalg_matrix_exp", LinearAlgebra, descend, COMPOSITE_KERNEL),
    row!("aten::searchsorted", Reduction, select::searchsorted, SEARCHING),
    row!("aten::bucketize", Reduction, select::bucketize, SEARCHING),
    row!("aten::mode", Reduction, select::mode, SEARCHING),
    row!("aten::_unique", Reduction, select::unique, SORTING),
    row!("aten::unique_consecutive", Reduction, select::unique_consecutive, SEARCHING),
    row!("aten::unique_dim_consecutive", Reduction, select::unique_consecutive, SEARCHING),
    row!("aten::unique_dim", Reduction, select::unique_dim, SEARCHING),
    row!("aten::histogram", Reduction, select::histogram, SEARCHING),
    row!("aten::_histogramdd_bin_edges", Reduction, select::histogramdd_bin_edges, SEARCHING),
    row!("aten::_histogramdd_from_bin_cts", Reduction, select::histogramdd_from_bin_cts, SEARCHING),
    row!("aten::_histogramdd_from_bin_tensors", Reduction, select::histogramdd_from_bin_tensors, SEARCHING),
    row!("torchvision::qnms", Reduction, detection::nms, NMS),
    row!("torchvision::qroi_align", Pooling, detection::qroi_align, ROI_ALIGN),
    row!("torchvision::ps_roi_align", Pooling, detection::ps_roi_align, ROI_ALIGN),
    row!("torchvision::_ps_roi_align_backward", Pooling, detection::ps_roi_align_backward, ROI_ALIGN),
    row!("torchvision::_roi_pool_backward", Pooling, detection::roi_pool_backward, ROUTE),
    row!("torchvision::deform_conv2d", Conv, detection::deform_conv2d, DEFORMABLE),
    row!("torchvision::_deform_conv2d_backward", Conv, detection::deform_conv2d_backward, DEFORMABLE),
];

/// What the registry says about one operator name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// Index into [`FORMULAS`].
    Formula(usize),
    /// Index into [`ignored::IGNORED`].
    Ignored(usize),
}

/// Looks an operator up by qualified name (`aten::mm`). An in-place variant without a row of
/// its own (`aten::cos_`) takes its functional form's (`aten::cos`): ATen's in-place kernels do
/// the functional form's arithmetic, written into `self`.
pub fn lookup(operator: &str) -> Option<Rule> {
    exact(operator).or_else(|| {
        let base = operator.strip_suffix('_').filter(|base| !base.ends_with('_'))?;
        exact(base)
    })
}

/// How the registry treats an operator, for the coverage table (`docs/coverage.md`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Class {
    /// Counted by a formula of this category.
    Counted(&'static str),
    /// Costs zero, for this reason.
    Ignored(&'static str),
    /// Does arithmetic torchscan deliberately does not count, for this reason.
    Uncounted(&'static str),
    /// A `torch.distributed` collective: bytes by this convention (`collective.rs`), no FLOPs.
    Communication(&'static str),
    /// Not in the registry: counted as an uncounted operator (partial) if it runs a kernel.
    Unclassified,
}

/// The registry's class of `operator` (qualified, `aten::mm`).
pub fn classify(operator: &str) -> Class {
    if collective::lookup(operator).is_some() {
        return Class::Communication(crate::report::CONVENTION);
    }
    match lookup(operator) {
        Some(Rule::Formula(i)) => Class::Counted(FORMULAS[i].category.name()),
        Some(Rule::Ignored(i)) => Class::Ignored(ignored::IGNORED[i].reason.name()),
        None => match quantize::uncounted_reason(operator) {
            Some(reason) => Class::Uncounted(reason),
            None => Class::Unclassified,
        },
    }
}

/// Every operator the registry names (formulas, the ignore list, the deliberately uncounted).
pub fn registry_operators() -> impl Iterator<Item = &'static str> {
    FORMULAS
        .iter()
        .map(|f| f.operator)
        .chain(ignored::IGNORED.iter().map(|i| i.operator))
        .chain(quantize::UNCOUNTED.iter().map(|u| u.operator))
        .chain(collective::COLLECTIVES.iter().map(|c| c.operator))
}

/// The registry's own row for `operator`; built once, read-only afterwards.
fn exact(operator: &str) -> Option<Rule> {
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

/// A kernel that does its work through dispatched operators: the session counts those.
fn descend(_: &Args) -> Result<u64, FormulaError> {
    Err(FormulaError::Descend)
}

// ---- checked arithmetic shared by the families ----

pub(crate) fn mul(a: u64, b: u64) -> Result<u64, FormulaError> {
    a.checked_mul(b).ok_or(FormulaError::Overflow)
}

pub(crate) fn add(a: u64, b: u64) -> Result<u64, FormulaError> {
    a.checked_add(b).ok_or(FormulaError::Overflow)
}

/// `ceil(log2(n))` for `n >= 1` (0 for 1): comparison counts of sorts and heaps.
pub(crate) fn ceil_log2(n: u64) -> u64 {
    if n <= 1 {
        0
    } else {
        u64::from(64 - (n - 1).leading_zeros())
    }
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
        // In-place variants take their functional form's row unless they have their own.
        assert_eq!(lookup("aten::cos_"), lookup("aten::cos"));
        assert!(lookup("aten::cos").is_some());
        assert_eq!(lookup("aten::__and__"), exact("aten::__and__"));
        assert_eq!(lookup("aten::not_an_op_"), None);
        assert_eq!(classify("aten::mm"), Class::Counted("matmul"));
        assert_eq!(classify("aten::view"), Class::Ignored("view"));
        assert_eq!(classify("quantized::linear"), Class::Counted("integer"));
        assert_eq!(classify("aten::not_an_op"), Class::Unclassified);
        assert!(registry_operators().any(|name| name == "quantized::conv2d"));
    }

    #[test]
    fn complex_pointwise_work_is_counted_in_real_flops() {
        use crate::args::build::*;
        let price = |op: &str, build: &dyn Fn(&mut Vec<i64>)| {
            let Some(Rule::Formula(i)) = exact(op) else { panic!("{op} has no row") };
            let mut stream = Vec::new();
            build(&mut stream);
            let mut offsets = Vec::new();
            assert!(crate::args::index_stream(&stream, &mut offsets));
            FORMULAS[i].price(&Args::new(&stream, &offsets))
        };
        // Two complex64 [4, 8] operands, 32 complex elements. Per complex element, by hand:
        // add 2 (a real add per part), mul 6 (ac - bd, ad + bc), div 11 (6 multiplies, 3 adds,
        // 2 divisions), abs 4 (2 squares, an add, a root), exp 5 (e^a, cos b, sin b, 2 products).
        let two = |s: &mut Vec<i64>| {
            complex_tensor(s, &[4, 8]);
            complex_tensor(s, &[4, 8]);
        };
        let one = |s: &mut Vec<i64>| complex_tensor(s, &[4, 8]);
        assert_eq!(price("aten::add", &two), Ok(64));
        assert_eq!(price("aten::sub_", &two), Ok(64));
        assert_eq!(price("aten::mul", &two), Ok(192));
        assert_eq!(price("aten::mul_", &two), Ok(192));
        assert_eq!(price("aten::div", &two), Ok(352));
        assert_eq!(price("aten::abs", &one), Ok(128));
        assert_eq!(price("aten::exp", &one), Ok(160));
        assert_eq!(price("aten::sgn", &one), Ok(192));
        assert_eq!(price("aten::reciprocal", &one), Ok(192));
        assert_eq!(price("aten::angle", &one), Ok(32));
        assert_eq!(price("aten::neg", &one), Ok(64));
        // A complex tensor times a real scalar: the kernel multiplies in complex, 6 each.
        assert_eq!(
            price("aten::mul", &|s: &mut Vec<i64>| {
                complex_tensor(s, &[4, 8]);
                double(s, 2.0);
            }),
            Ok(192)
        );
        // A complex sum adds both parts: 2 per element.
        assert_eq!(price("aten::sum", &one), Ok(64));
        // The same shapes in real arithmetic: 1 per element.
        assert_eq!(price("aten::mul", &|s: &mut Vec<i64>| tensor(s, &[4, 8])), Ok(32));
        // No complex count stated (tanh): partial, never the real price.
        assert_eq!(price("aten::tanh", &one), Err(FormulaError::Complex));
        // Every row that states a complex cost is pointwise or a reduction, whose real count the
        // factor multiplies, and says so in docs/formulas.md.
        for f in FORMULAS.iter().filter(|f| f.complex.is_some()) {
            assert!(matches!(f.category, Category::Pointwise | Category::Reduction), "{}", f.operator);
            assert!(f.formula.contains("complex: `x"), "{}", f.operator);
        }
    }

    #[test]
    fn every_row_prices_a_hand_computed_call() {
        use crate::args::build::*;
        // A [2,3] tensor and a [3] tensor (lists for _foreach_* rows, a bool where accumulate
        // sits): every pointwise row gives 6, every foreach row K x 6.
        // Rows priced by one tensor (`per_tensor_element`), fused optimizer steps and cells, and
        // composite kernels (`descend`, their nested operators count) have
        // hand-computed tests of their own.
        let own_tests = ["per_tensor_element", "fused_", "descend"];
        let mut used = std::collections::BTreeSet::new();
        let broadcast =
            |f: &&Formula| f.category == Category::Pointwise && !own_tests.iter().any(|k| f.formula.contains(k));
        for f in FORMULAS.iter().filter(broadcast) {
            let foreach = f.operator.contains("_foreach_");
            let got = testing::with_args(
                |s| {
                    if foreach {
                        tensors(s, &[&[2, 3]]);
                        tensors(s, &[&[2, 3]]);
                        tensors(s, &[&[2, 3]]);
                    } else {
                        tensor(s, &[2, 3]);
                        tensor(s, &[3]);
                    }
                },
                f.flops,
            );
            let name = f.operator.trim_start_matches("aten::");
            let name = name.strip_prefix("_foreach_").unwrap_or(name).trim_end_matches('_');
            let per = PER_ELEMENT.iter().find(|(n, _)| *n == name).map_or(1, |&(_, per)| per);
            used.insert(name);
            assert_eq!(got, Ok(6 * per), "{}", f.operator);
            // The row's convention text states the same count first ("3 FLOPs per output element");
            // the foreach rows share one text, their count is the formula's parameter.
            let stated: u64 = f.convention.rule.split(' ').next().and_then(|n| n.parse().ok()).unwrap_or(1);
            assert!(foreach || stated == per, "{}: the convention text says {stated}, not {per}", f.operator);
        }
        let unused: Vec<_> = PER_ELEMENT.iter().filter(|(n, _)| !used.contains(n)).collect();
        assert!(unused.is_empty(), "rows without a registry entry: {unused:?}");
    }

    /// FLOPs per element of the pointwise rows that cost more than one, counted by hand here,
    /// independently of the rows' own convention text (keyed by the operator's name without
    /// `aten::`, a `_foreach_` prefix or an in-place `_`).
    const PER_ELEMENT: &[(&str, u64)] = &[
        ("_add_relu", 2),                                 // an add, a max
        ("_amp_foreach_non_finite_check_and_unscale", 2), // a multiply, a finiteness test
        ("_masked_scale", 2),                             // mask x value x scale: two multiplies
        ("addcdiv", 3),                                   // self + value * t1 / t2
        ("addcmul", 3),                                   // self + value * t1 * t2
        ("lerp", 3),                                      // self + weight * (end - self)
        ("linalg_cross", 3),                              // a_i b_j - a_j b_i per output element
        ("dequantize", 2),                                // (q - zero_point) * scale
        ("quantize_per_tensor", 4),                       // divide, round, add, clamp
        ("quantize_per_tensor_dynamic", 6),               // its minimum and maximum (2), then quantize (4)
        ("quantize_per_channel", 4),
        // fake quantization: quantize (4), then dequantize (2)
        ("fake_quantize_per_tensor_affine_cachemask", 6),
        ("fake_quantize_per_channel_affine_cachemask", 6),
        ("_fake_quantize_per_tensor_affine_cachemask_tensor_qparams", 6),
        ("_fake_quantize_learnable_per_tensor_affine", 6),
        ("_fake_quantize_learnable_per_channel_affine", 6),
        // the observer's running min and max (2), then fake quantization (6)
        ("_fused_moving_avg_obs_fq_helper", 8),
        ("_fused_moving_avg_obs_fq_helper_functional", 8),
    ];

    #[test]
    fn checked_helpers() {
        assert_eq!(mul_all(&[2, 3, 4]), Ok(24));
        assert_eq!(mul(u64::MAX, 2), Err(FormulaError::Overflow));
        assert_eq!(add(u64::MAX, 1), Err(FormulaError::Overflow));
        assert_eq!(product(&[3, -1]), Err(FormulaError::UnexpectedShape));
        assert_eq!(product(&[]), Ok(1));
    }
}
