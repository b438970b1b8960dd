//! Operator arguments as the shim hands them over: a flat `i64` stream, one entry per schema
//! argument, that the C++ side (`cpp/observer.cpp`, `encode_ivalue`) writes into a buffer the
//! session reuses, so that reading an operator's inputs allocates nothing in the steady state.
//!
//! Layout of one argument (`TAG_*` below; `ffi.rs` asserts the C++ enum agrees):
//! - `NONE` / `OTHER`: the tag alone (`OTHER`: strings outside [`choice`]'s table, generators, ...
//!   never needed by a formula)
//! - `CHOICE`: tag, code: a string argument that chooses an algorithm (`linalg_qr`'s `mode`,
//!   `linalg_lstsq`'s `driver`), as its code in the fixed table [`choice`] (the shim compares the
//!   string in place against that table: no string crosses, nothing is allocated)
//! - `TENSOR`: tag, dtype (`c10::ScalarType` as int), ndim, dims...
//! - `INT` / `BOOL`: tag, value; `DOUBLE`: tag, the `f64` bits
//! - `INT_LIST` / `BOOL_LIST`: tag, n, values...; `TENSOR_LIST`: tag, n, then n x (dtype, ndim, dims...)
//! - `SPARSE`: tag, layout (`c10::Layout` as int), stored values, dtype, ndim, dims... A sparse
//!   tensor is never a `TENSOR`, so that no dense formula can price it by its dense shape.
//! - `PACKED`: tag, the weight's dtype, ndim, dims..., then n, then n parameters: a quantized
//!   kernel's packed weight (`quantized::linear`'s, `quantized::conv2d`'s), read by the shim
//!   through the object's methods (for a convolution: spatial rank d, stride, padding, output
//!   padding and dilation (d each), groups, transposed; for a linear, whether it has a bias).
//! - `GROUP`: tag, size, rank: a `torch.distributed` process group (a c10d collective's
//!   `process_group` argument, or a functional collective's group name, resolved by the shim).
//!   Only a collective's inputs carry it (`OpEvent::collective_inputs`); elsewhere it is `OTHER`.
//! - `DATA`: tag, value: after the arguments, what a data-dependent formula needs from the
//!   tensors' values (RoI Align's adaptive sampling points summed over its boxes, an embedding
//!   bag's ids other than its padding index; for `linalg_lstsq` without a driver on an
//!   underdetermined system, whether `A` is on the CPU, whose default driver differs from the
//!   other devices'). Only the inputs read after a formula returned
//!   `DataDependent` carry it (`OpEvent::data_inputs`), and only where the shim can read it.
//!
//! Values never leave the session: reports only ever carry FLOP counts and shapes' products.

pub const TAG_NONE: i64 = 0;
pub const TAG_TENSOR: i64 = 1;
pub const TAG_INT: i64 = 2;
pub const TAG_DOUBLE: i64 = 3;
pub const TAG_BOOL: i64 = 4;
pub const TAG_INT_LIST: i64 = 5;
pub const TAG_BOOL_LIST: i64 = 6;
pub const TAG_TENSOR_LIST: i64 = 7;
pub const TAG_OTHER: i64 = 8;
pub const TAG_SPARSE: i64 = 9;
pub const TAG_PACKED: i64 = 10;
pub const TAG_GROUP: i64 = 11;
pub const TAG_DATA: i64 = 12;
pub const TAG_CHOICE: i64 = 13;

/// The codes of the string arguments a formula reads (`CHOICE` records); `ffi.rs` asserts the
/// C++ enum agrees. Any other string is an `OTHER` record.
pub mod choice {
    /// `linalg_qr(A, mode)`: Q m x min(m, n) and R.
    pub const REDUCED: i64 = 1;
    /// `linalg_qr(A, mode)`: Q m x m and R.
    pub const COMPLETE: i64 = 2;
    /// `linalg_qr(A, mode)`: R only.
    pub const R: i64 = 3;
    /// `linalg_lstsq(A, B, rcond, driver)`: QR (LQ when m < n), full rank assumed.
    pub const GELS: i64 = 4;
    /// `linalg_lstsq`: complete orthogonal factorization (QR with column pivoting).
    pub const GELSY: i64 = 5;
    /// `linalg_lstsq`: SVD by divide and conquer.
    pub const GELSD: i64 = 6;
    /// `linalg_lstsq`: SVD by QR iteration.
    pub const GELSS: i64 = 7;
}

/// `c10::ScalarType` codes of the complex dtypes (ComplexHalf, ComplexFloat, ComplexDouble).
const COMPLEX_DTYPES: [i64; 3] = [8, 9, 10];

/// The name PyTorch gives a `c10::Layout` code (`torch.sparse_csr`, ...).
pub fn layout_name(layout: i64) -> &'static str {
    match layout {
        0 => "strided",
        1 => "sparse_coo",
        2 => "sparse_csr",
        3 => "mkldnn",
        4 => "sparse_csc",
        5 => "sparse_bsr",
        6 => "sparse_bsc",
        7 => "jagged",
        _ => "unknown",
    }
}

/// A tensor's metadata: its dtype code and its sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorMeta<'a> {
    pub dtype: i64,
    pub dims: &'a [i64],
}

impl TensorMeta<'_> {
    /// Number of elements, `None` if it does not fit in `u64` (or a size is negative).
    pub fn numel(&self) -> Option<u64> {
        self.dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(u64::try_from(d).ok()?))
    }

    pub fn is_complex(&self) -> bool {
        COMPLEX_DTYPES.contains(&self.dtype)
    }
}

/// A sparse tensor's metadata: its layout, the number of values it stores (with the zeros
/// inside stored blocks of BSR/BSC, and the dense part of hybrid tensors), dtype and sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SparseMeta<'a> {
    pub layout: i64,
    pub stored: i64,
    pub tensor: TensorMeta<'a>,
}

/// A quantized kernel's packed weight: the weight's metadata and the kernel's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackedMeta<'a> {
    pub weight: TensorMeta<'a>,
    pub params: &'a [i64],
}

/// A process group as a collective sees it: how many ranks, and which one this process is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Group {
    pub size: i64,
    pub rank: i64,
}

/// One decoded argument, borrowing from the stream.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arg<'a> {
    None,
    Other,
    Tensor(TensorMeta<'a>),
    Int(i64),
    Double(f64),
    Bool(bool),
    IntList(&'a [i64]),
    BoolList(&'a [i64]),
    /// `n` tensors, encoded back to back as `(dtype, ndim, dims...)`.
    TensorList(usize, &'a [i64]),
    Sparse(SparseMeta<'a>),
    Packed(PackedMeta<'a>),
    Group(Group),
    /// A string argument of [`choice`]'s table, by its code.
    Choice(i64),
}

/// Finds where each argument starts. `offsets` is cleared and refilled (its capacity is kept).
/// Returns `false` for a malformed stream, which a formula then reports as an error.
pub fn index_stream(stream: &[i64], offsets: &mut Vec<usize>) -> bool {
    offsets.clear();
    let mut pos = 0usize;
    while pos < stream.len() {
        offsets.push(pos);
        match arg_len(stream, pos) {
            Some(len) => pos += len,
            None => return false,
        }
    }
    true
}

/// Length in `i64`s of the argument at `pos`, or `None` when it runs past the end.
fn arg_len(stream: &[i64], pos: usize) -> Option<usize> {
    let tag = *stream.get(pos)?;
    let len = match tag {
        TAG_NONE | TAG_OTHER => 1,
        TAG_INT | TAG_DOUBLE | TAG_BOOL | TAG_DATA | TAG_CHOICE => 2,
        TAG_GROUP => 3,
        TAG_TENSOR => 1 + tensor_len(stream, pos + 1)?,
        TAG_SPARSE => 3 + tensor_len(stream, pos + 3)?,
        TAG_PACKED => {
            let weight = tensor_len(stream, pos + 1)?;
            let n = usize::try_from(*stream.get(pos + 1 + weight)?).ok()?;
            2 + weight + n
        }
        TAG_INT_LIST | TAG_BOOL_LIST => 2 + usize::try_from(*stream.get(pos + 1)?).ok()?,
        TAG_TENSOR_LIST => {
            let n = usize::try_from(*stream.get(pos + 1)?).ok()?;
            let mut cursor = pos + 2;
            for _ in 0..n {
                cursor += tensor_len(stream, cursor)?;
            }
            cursor - pos
        }
        _ => return None,
    };
    (pos + len <= stream.len()).then_some(len)
}

/// Length of one `(dtype, ndim, dims...)` record.
fn tensor_len(stream: &[i64], pos: usize) -> Option<usize> {
    let ndim = usize::try_from(*stream.get(pos + 1)?).ok()?;
    let len = 2 + ndim;
    (pos + len <= stream.len()).then_some(len)
}

fn tensor_at(stream: &[i64], pos: usize) -> Option<TensorMeta<'_>> {
    let len = tensor_len(stream, pos)?;
    Some(TensorMeta { dtype: stream[pos], dims: &stream[pos + 2..pos + len] })
}

/// The arguments of one operator call.
#[derive(Clone, Copy, Debug)]
pub struct Args<'a> {
    stream: &'a [i64],
    offsets: &'a [usize],
}

impl<'a> Args<'a> {
    /// `offsets` must come from [`index_stream`] on the same `stream`.
    pub fn new(stream: &'a [i64], offsets: &'a [usize]) -> Self {
        Args { stream, offsets }
    }

    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    pub fn get(&self, index: usize) -> Option<Arg<'a>> {
        let pos = *self.offsets.get(index)?;
        let s = self.stream;
        Some(match s[pos] {
            TAG_NONE => Arg::None,
            TAG_TENSOR => Arg::Tensor(tensor_at(s, pos + 1)?),
            TAG_SPARSE => {
                Arg::Sparse(SparseMeta { layout: s[pos + 1], stored: s[pos + 2], tensor: tensor_at(s, pos + 3)? })
            }
            TAG_PACKED => {
                let weight = tensor_at(s, pos + 1)?;
                let at = pos + 3 + weight.dims.len();
                let n = usize::try_from(s[at]).ok()?;
                Arg::Packed(PackedMeta { weight, params: &s[at + 1..at + 1 + n] })
            }
            TAG_INT => Arg::Int(s[pos + 1]),
            TAG_DOUBLE => Arg::Double(f64::from_bits(s[pos + 1] as u64)),
            TAG_BOOL => Arg::Bool(s[pos + 1] != 0),
            TAG_GROUP => Arg::Group(Group { size: s[pos + 1], rank: s[pos + 2] }),
            TAG_CHOICE => Arg::Choice(s[pos + 1]),
            TAG_INT_LIST | TAG_BOOL_LIST => {
                let n = usize::try_from(s[pos + 1]).ok()?;
                let values = &s[pos + 2..pos + 2 + n];
                if s[pos] == TAG_INT_LIST {
                    Arg::IntList(values)
                } else {
                    Arg::BoolList(values)
                }
            }
            TAG_TENSOR_LIST => {
                let n = usize::try_from(s[pos + 1]).ok()?;
                let len = arg_len(s, pos)?;
                Arg::TensorList(n, &s[pos + 2..pos + len])
            }
            _ => Arg::Other,
        })
    }

    /// The `DATA` record the shim appended after the arguments (see the module's layout), if any.
    pub fn data(&self) -> Option<i64> {
        let &pos = self.offsets.last()?;
        (self.stream[pos] == TAG_DATA).then(|| self.stream[pos + 1])
    }

    pub fn tensor(&self, index: usize) -> Option<TensorMeta<'a>> {
        match self.get(index)? {
            Arg::Tensor(t) => Some(t),
            _ => None,
        }
    }

    pub fn int(&self, index: usize) -> Option<i64> {
        match self.get(index)? {
            Arg::Int(v) => Some(v),
            _ => None,
        }
    }

    /// A number argument (a Scalar is an int or a double), as a float.
    pub fn scalar(&self, index: usize) -> Option<f64> {
        match self.get(index)? {
            Arg::Double(v) => Some(v),
            Arg::Int(v) => Some(v as f64),
            _ => None,
        }
    }

    /// Whether argument `index` is a (dense) tensor, not None or absent.
    pub fn has_tensor(&self, index: usize) -> bool {
        matches!(self.get(index), Some(Arg::Tensor(_)))
    }

    pub fn bool(&self, index: usize) -> Option<bool> {
        match self.get(index)? {
            Arg::Bool(v) => Some(v),
            _ => None,
        }
    }

    /// The code ([`choice`]) of the string argument at `index`, if it is one of the table's.
    pub fn choice(&self, index: usize) -> Option<i64> {
        match self.get(index)? {
            Arg::Choice(code) => Some(code),
            _ => None,
        }
    }

    pub fn int_list(&self, index: usize) -> Option<&'a [i64]> {
        match self.get(index)? {
            Arg::IntList(v) => Some(v),
            _ => None,
        }
    }

    pub fn bool_list(&self, index: usize) -> Option<&'a [i64]> {
        match self.get(index)? {
            Arg::BoolList(v) => Some(v),
            _ => None,
        }
    }

    /// The tensors of the tensor-list argument at `index` (`None` if it is not a list).
    pub fn list_tensors(&self, index: usize) -> Option<impl Iterator<Item = TensorMeta<'a>> + 'a> {
        let pos = *self.offsets.get(index)?;
        (self.stream.get(pos) == Some(&TAG_TENSOR_LIST)).then_some(TensorsAt {
            stream: self.stream,
            pos,
            remaining: None,
        })
    }

    pub fn sparse(&self, index: usize) -> Option<SparseMeta<'a>> {
        match self.get(index)? {
            Arg::Sparse(t) => Some(t),
            _ => None,
        }
    }

    pub fn packed(&self, index: usize) -> Option<PackedMeta<'a>> {
        match self.get(index)? {
            Arg::Packed(p) => Some(p),
            _ => None,
        }
    }

    /// The first process group among the arguments (a collective has one).
    pub fn group(&self) -> Option<Group> {
        (0..self.len()).find_map(|i| match self.get(i)? {
            Arg::Group(g) => Some(g),
            _ => None,
        })
    }

    /// The layout of the first sparse tensor among the arguments, if any.
    pub fn sparse_layout(&self) -> Option<i64> {
        let s = self.stream;
        self.offsets.iter().find(|&&pos| s[pos] == TAG_SPARSE).map(|&pos| s[pos + 1])
    }

    /// Whether any tensor argument (dense, sparse, or in a list) has a complex dtype. Called for
    /// every priced call: one pass over the argument tags, no iterator machinery.
    pub fn has_complex(&self) -> bool {
        let s = self.stream;
        self.offsets.iter().any(|&pos| match s[pos] {
            TAG_TENSOR => COMPLEX_DTYPES.contains(&s[pos + 1]),
            TAG_SPARSE => COMPLEX_DTYPES.contains(&s[pos + 3]),
            TAG_TENSOR_LIST => TensorsAt { stream: s, pos, remaining: None }.any(|t| t.is_complex()),
            _ => false,
        })
    }

    /// Every tensor among the arguments, those inside tensor lists included, in order.
    pub fn tensors(&self) -> impl Iterator<Item = TensorMeta<'a>> + 'a {
        let stream = self.stream;
        self.offsets.iter().flat_map(move |&pos| TensorsAt { stream, pos, remaining: None })
    }
}

/// Iterates the tensors of one argument (zero, one, or a list's worth).
struct TensorsAt<'a> {
    stream: &'a [i64],
    pos: usize,
    /// `None` before the argument was looked at; then how many list entries are left.
    remaining: Option<usize>,
}

impl<'a> Iterator for TensorsAt<'a> {
    type Item = TensorMeta<'a>;

    fn next(&mut self) -> Option<TensorMeta<'a>> {
        let s = self.stream;
        match self.remaining {
            None => match *s.get(self.pos)? {
                TAG_TENSOR => {
                    self.remaining = Some(0);
                    tensor_at(s, self.pos + 1)
                }
                TAG_TENSOR_LIST => {
                    self.remaining = Some(usize::try_from(*s.get(self.pos + 1)?).ok()?);
                    self.pos += 2;
                    self.next()
                }
                _ => None,
            },
            Some(0) => None,
            Some(n) => {
                let t = tensor_at(s, self.pos)?;
                self.pos += 2 + t.dims.len();
                self.remaining = Some(n - 1);
                Some(t)
            }
        }
    }
}

/// Builds streams in tests (and documents the layout by example).
#[cfg(test)]
pub mod build {
    use super::*;

    pub fn tensor(out: &mut Vec<i64>, dims: &[i64]) {
        out.extend([TAG_TENSOR, 6, dims.len() as i64]);
        out.extend_from_slice(dims);
    }

    /// A complex64 (`ComplexFloat`) tensor.
    pub fn complex_tensor(out: &mut Vec<i64>, dims: &[i64]) {
        out.extend([TAG_TENSOR, 9, dims.len() as i64]);
        out.extend_from_slice(dims);
    }

    /// A float32 sparse tensor of `layout` storing `stored` values.
    pub fn sparse(out: &mut Vec<i64>, layout: i64, stored: i64, dims: &[i64]) {
        out.extend([TAG_SPARSE, layout, stored, 6, dims.len() as i64]);
        out.extend_from_slice(dims);
    }
    /// A packed weight of these dims (int8) with these parameters.
    pub fn packed(out: &mut Vec<i64>, dims: &[i64], params: &[i64]) {
        out.extend([TAG_PACKED, 12, dims.len() as i64]);
        out.extend_from_slice(dims);
        out.push(params.len() as i64);
        out.extend_from_slice(params);
    }

    pub fn int(out: &mut Vec<i64>, v: i64) {
        out.extend([TAG_INT, v]);
    }
    pub fn group(out: &mut Vec<i64>, size: i64, rank: i64) {
        out.extend([TAG_GROUP, size, rank]);
    }
    /// A tensor of `dtype` (a `c10::ScalarType` code).
    pub fn typed_tensor(out: &mut Vec<i64>, dtype: i64, dims: &[i64]) {
        out.extend([TAG_TENSOR, dtype, dims.len() as i64]);
        out.extend_from_slice(dims);
    }
    pub fn other(out: &mut Vec<i64>) {
        out.push(TAG_OTHER);
    }
    /// The `DATA` record the shim appends after a data-dependent call's arguments.
    pub fn data(out: &mut Vec<i64>, v: i64) {
        out.extend([TAG_DATA, v]);
    }
    /// A string argument of [`choice`](super::choice)'s table.
    pub fn choice(out: &mut Vec<i64>, code: i64) {
        out.extend([TAG_CHOICE, code]);
    }
    pub fn boolean(out: &mut Vec<i64>, v: bool) {
        out.extend([TAG_BOOL, v as i64]);
    }
    pub fn double(out: &mut Vec<i64>, v: f64) {
        out.extend([TAG_DOUBLE, v.to_bits() as i64]);
    }
    pub fn none(out: &mut Vec<i64>) {
        out.push(TAG_NONE);
    }
    pub fn ints(out: &mut Vec<i64>, v: &[i64]) {
        out.extend([TAG_INT_LIST, v.len() as i64]);
        out.extend_from_slice(v);
    }
    pub fn bools(out: &mut Vec<i64>, v: &[bool]) {
        out.extend([TAG_BOOL_LIST, v.len() as i64]);
        out.extend(v.iter().map(|&b| b as i64));
    }
    pub fn tensors(out: &mut Vec<i64>, list: &[&[i64]]) {
        out.extend([TAG_TENSOR_LIST, list.len() as i64]);
        for dims in list {
            out.extend([6, dims.len() as i64]);
            out.extend_from_slice(dims);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::build::*;
    use super::*;

    #[test]
    fn decodes_every_kind() {
        let mut s = Vec::new();
        tensor(&mut s, &[2, 3]);
        int(&mut s, -4);
        double(&mut s, 0.5);
        boolean(&mut s, true);
        ints(&mut s, &[1, 2]);
        bools(&mut s, &[true, false, true]);
        tensors(&mut s, &[&[4], &[5, 6]]);
        none(&mut s);
        s.push(TAG_OTHER);
        choice(&mut s, super::choice::COMPLETE);
        let mut offsets = Vec::new();
        assert!(index_stream(&s, &mut offsets));
        let args = Args::new(&s, &offsets);
        assert_eq!(args.len(), 10);
        assert_eq!(args.tensor(0).unwrap().dims, &[2, 3]);
        assert_eq!(args.tensor(0).unwrap().numel(), Some(6));
        assert_eq!(args.int(1), Some(-4));
        assert_eq!(args.get(2), Some(Arg::Double(0.5)));
        assert_eq!(args.bool(3), Some(true));
        assert_eq!(args.int_list(4), Some(&[1, 2][..]));
        assert_eq!(args.bool_list(5), Some(&[1, 0, 1][..]));
        assert!(matches!(args.get(6), Some(Arg::TensorList(2, _))));
        assert_eq!(args.get(7), Some(Arg::None));
        assert_eq!(args.get(8), Some(Arg::Other));
        assert_eq!(args.choice(9), Some(super::choice::COMPLETE));
        assert_eq!(args.choice(8), None, "an OTHER record is no choice");
        assert_eq!(args.get(10), None);
        let shapes: Vec<&[i64]> = args.tensors().map(|t| t.dims).collect();
        assert_eq!(shapes, vec![&[2, 3][..], &[4][..], &[5, 6][..]]);
        // Wrong-kind accessors answer None instead of guessing.
        assert_eq!(args.int(0), None);
        assert_eq!(args.tensor(1), None);
    }

    #[test]
    fn malformed_streams_are_rejected_not_panicking() {
        let mut offsets = Vec::new();
        assert!(!index_stream(&[TAG_TENSOR, 6, 3, 1], &mut offsets));
        assert!(!index_stream(&[TAG_INT_LIST, 5, 1], &mut offsets));
        assert!(!index_stream(&[99], &mut offsets));
        assert!(!index_stream(&[TAG_TENSOR_LIST, 2, 6, 1, 3], &mut offsets));
        assert!(!index_stream(&[TAG_INT_LIST, -1], &mut offsets));
        assert!(!index_stream(&[TAG_CHOICE], &mut offsets), "a choice without its code");
        assert!(index_stream(&[], &mut offsets));
        assert!(offsets.is_empty());
    }

    #[test]
    fn numel_overflow_and_negative_sizes_are_none() {
        let big = TensorMeta { dtype: 6, dims: &[1 << 40, 1 << 40] };
        assert_eq!(big.numel(), None);
        let neg = TensorMeta { dtype: 6, dims: &[-1, 3] };
        assert_eq!(neg.numel(), None);
        let scalar = TensorMeta { dtype: 6, dims: &[] };
        assert_eq!(scalar.numel(), Some(1));
    }
}
