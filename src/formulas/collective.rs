//! Collectives: the bytes one rank sends and receives in a `torch.distributed` collective, by
//! the standard algorithm's convention (`docs/distributed.md`, Conventions). They do no FLOPs:
//! a collective's reduction is the interconnect's work, not the model's, and every FLOP counter
//! (PyTorch's among them) leaves it out. Each entry is one operator; its traffic is a pure
//! function of the call's shapes and its process group (size `n`, this rank `r`).
//!
//! Conventions (per rank; `S` the bytes of the buffer):
//! - all-reduce: ring over `torch.tensor_split(buffer, n)` (by elements); rank `r` owns chunk `r`
//!   and sends and receives every other chunk twice, once in the reduce-scatter half and once in
//!   the all-gather half: `2 (S - chunk_r)` each way, which is `2 (n-1)/n S` when `n` divides it;
//! - all-gather (ring): the input `I` travels to the `n-1` others: sent `(n-1) I`, received the
//!   output less the own input;
//! - reduce-scatter (ring): the partial sums of every chunk but the own output: `I - O` each way;
//! - broadcast / scatter (from the root): the root sends each other rank its part; reduce /
//!   gather (to the root): the mirror;
//! - all-to-all: every slice but the own one, each way;
//! - send / recv: the buffer, one way; barrier: a call, no bytes.

use super::FormulaError;
use crate::args::{Args, Group, TensorMeta};

/// Bytes one rank moves in one call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    pub sent: u64,
    pub received: u64,
}

impl Traffic {
    fn both(bytes: u64) -> Traffic {
        Traffic { sent: bytes, received: bytes }
    }
}

type Result<T> = std::result::Result<T, FormulaError>;
type TrafficFn = fn(&Args) -> Result<Traffic>;

pub struct Collective {
    pub operator: &'static str,
    pub traffic: TrafficFn,
}

/// Bytes per element of a `c10::ScalarType` code (`c10/core/ScalarType.h`: the C++ type's size;
/// the packed sub-byte types store one byte per element).
pub fn element_size(dtype: i64) -> Option<u64> {
    Some(match dtype {
        0 | 1 | 11 | 12 | 13 | 16..=21 | 23..=26 | 30..=45 => 1,
        2 | 5 | 15 | 22 | 27 => 2,
        3 | 6 | 8 | 14 | 28 => 4,
        4 | 7 | 9 | 29 => 8,
        10 => 16,
        _ => return None,
    })
}

fn bytes(t: TensorMeta) -> Result<u64> {
    let size = element_size(t.dtype).ok_or(FormulaError::UnexpectedShape)?;
    t.numel().ok_or(FormulaError::Overflow)?.checked_mul(size).ok_or(FormulaError::Overflow)
}

fn tensor_arg<'a>(args: &Args<'a>, index: usize) -> Result<TensorMeta<'a>> {
    args.tensor(index).ok_or(FormulaError::MissingTensor(index))
}

fn list<'a>(args: &Args<'a>, index: usize) -> Result<Vec<TensorMeta<'a>>> {
    Ok(args.list_tensors(index).ok_or(FormulaError::MissingArgument(index))?.collect())
}

fn list_bytes(args: &Args, index: usize) -> Result<u64> {
    list(args, index)?.into_iter().try_fold(0u64, |acc, t| acc.checked_add(bytes(t)?).ok_or(FormulaError::Overflow))
}

fn group_of(args: &Args) -> Result<Group> {
    let g = args.group().ok_or(FormulaError::MissingArgument(args.len()))?;
    if g.size < 1 || g.rank < 0 || g.rank >= g.size {
        return Err(FormulaError::UnexpectedShape);
    }
    Ok(g)
}

/// A group size given as an integer argument (the functional collectives' `group_size`).
fn size_arg(args: &Args, index: usize) -> Result<u64> {
    let n = args.int(index).ok_or(FormulaError::MissingArgument(index))?;
    u64::try_from(n).ok().filter(|&n| n >= 1).ok_or(FormulaError::UnexpectedShape)
}

fn mul(a: u64, b: u64) -> Result<u64> {
    a.checked_mul(b).ok_or(FormulaError::Overflow)
}

fn minus(a: u64, b: u64) -> Result<u64> {
    a.checked_sub(b).ok_or(FormulaError::UnexpectedShape)
}

/// Ring all-reduce of one tensor: `2 (S - chunk_r)` each way (see the module's conventions).
fn ring_all_reduce(t: TensorMeta, g: Group) -> Result<Traffic> {
    let size = element_size(t.dtype).ok_or(FormulaError::UnexpectedShape)?;
    let elements = t.numel().ok_or(FormulaError::Overflow)?;
    let (n, r) = (g.size as u64, g.rank as u64);
    // torch.tensor_split: the first `elements % n` chunks hold one element more.
    let own = elements / n + u64::from(r < elements % n);
    Ok(Traffic::both(mul(mul(minus(elements, own)?, size)?, 2)?))
}

fn sum(parts: impl IntoIterator<Item = Result<Traffic>>) -> Result<Traffic> {
    parts.into_iter().try_fold(Traffic::default(), |acc, t| {
        let t = t?;
        Ok(Traffic {
            sent: acc.sent.checked_add(t.sent).ok_or(FormulaError::Overflow)?,
            received: acc.received.checked_add(t.received).ok_or(FormulaError::Overflow)?,
        })
    })
}

/// `c10d::allreduce_(Tensor[] tensors, ProcessGroup, ReduceOp, ...)` and the coalesced form:
/// each tensor is one ring all-reduce.
fn allreduce(args: &Args) -> Result<Traffic> {
    let g = group_of(args)?;
    sum(list(args, 0)?.into_iter().map(|t| ring_all_reduce(t, g)))
}

/// `_c10d_functional::all_reduce(Tensor input, str reduce_op, str group_name)`.
fn functional_all_reduce(args: &Args) -> Result<Traffic> {
    ring_all_reduce(tensor_arg(args, 0)?, group_of(args)?)
}

/// `c10d::broadcast_(Tensor[] tensors, ProcessGroup, int root_rank, ...)`: the root sends the
/// buffer to each other rank.
fn broadcast(args: &Args) -> Result<Traffic> {
    let g = group_of(args)?;
    let root = args.int(2).ok_or(FormulaError::MissingArgument(2))?;
    rooted_out(list_bytes(args, 0)?, g, root)
}

/// `_c10d_functional::broadcast(Tensor input, int src, str group_name)`.
fn functional_broadcast(args: &Args) -> Result<Traffic> {
    let root = args.int(1).ok_or(FormulaError::MissingArgument(1))?;
    rooted_out(bytes(tensor_arg(args, 0)?)?, group_of(args)?, root)
}

/// The root sends `part` bytes to each other rank; the others receive `part`.
fn rooted_out(part: u64, g: Group, root: i64) -> Result<Traffic> {
    if root < 0 || root >= g.size {
        return Err(FormulaError::UnexpectedShape);
    }
    Ok(if g.rank == root {
        Traffic { sent: mul(part, g.size as u64 - 1)?, received: 0 }
    } else {
        Traffic { sent: 0, received: part }
    })
}

/// The others send `part` bytes each to the root.
fn rooted_in(part: u64, g: Group, root: i64) -> Result<Traffic> {
    let out = rooted_out(part, g, root)?;
    Ok(Traffic { sent: out.received, received: out.sent })
}

/// `c10d::reduce_(Tensor[] tensors, ProcessGroup, ReduceOp, int root_rank, ...)`.
fn reduce(args: &Args) -> Result<Traffic> {
    let root = args.int(3).ok_or(FormulaError::MissingArgument(3))?;
    rooted_in(list_bytes(args, 0)?, group_of(args)?, root)
}

/// `c10d::gather_(Tensor[][] outputs, Tensor[] inputs, ProcessGroup, int root_rank, ...)`.
fn gather(args: &Args) -> Result<Traffic> {
    let root = args.int(3).ok_or(FormulaError::MissingArgument(3))?;
    rooted_in(list_bytes(args, 1)?, group_of(args)?, root)
}

/// `c10d::scatter_(Tensor[] outputs, Tensor[][] inputs, ProcessGroup, int root_rank, ...)`: each
/// rank's part is its output.
fn scatter(args: &Args) -> Result<Traffic> {
    let root = args.int(3).ok_or(FormulaError::MissingArgument(3))?;
    rooted_out(list_bytes(args, 0)?, group_of(args)?, root)
}

/// `c10d::allgather_(Tensor[][] outputs, Tensor[] inputs, ProcessGroup, ...)` and
/// `allgather_coalesced_`: each input travels to the `n-1` others, and theirs come back.
fn allgather_list(args: &Args) -> Result<Traffic> {
    let g = group_of(args)?;
    Ok(Traffic::both(mul(list_bytes(args, 1)?, g.size as u64 - 1)?))
}

/// `c10d::_allgather_base_(Tensor output, Tensor input, ProcessGroup, ...)`.
fn allgather_base(args: &Args) -> Result<Traffic> {
    let g = group_of(args)?;
    let (output, input) = (bytes(tensor_arg(args, 0)?)?, bytes(tensor_arg(args, 1)?)?);
    Ok(Traffic { sent: mul(input, g.size as u64 - 1)?, received: minus(output, input)? })
}

/// `c10d::allgather_into_tensor_coalesced_(Tensor[] outputs, Tensor[] inputs, ProcessGroup, ...)`.
fn allgather_into_tensor_coalesced(args: &Args) -> Result<Traffic> {
    let g = group_of(args)?;
    let (output, input) = (list_bytes(args, 0)?, list_bytes(args, 1)?);
    Ok(Traffic { sent: mul(input, g.size as u64 - 1)?, received: minus(output, input)? })
}

/// `_c10d_functional::all_gather_into_tensor(Tensor input, int group_size, str group_name)`
/// (and `_coalesced` with a list): the output is `group_size` inputs.
fn functional_all_gather(args: &Args) -> Result<Traffic> {
    let n = size_arg(args, 1)?;
    let input = match args.tensor(0) {
        Some(t) => bytes(t)?,
        None => list_bytes(args, 0)?,
    };
    Ok(Traffic::both(mul(input, n - 1)?))
}

/// `c10d::reduce_scatter_(Tensor[] outputs, Tensor[][] inputs, ProcessGroup, ReduceOp, ...)`:
/// the partial sums of every chunk but the own one, each way.
fn reduce_scatter_list(args: &Args) -> Result<Traffic> {
    let g = group_of(args)?;
    Ok(Traffic::both(mul(list_bytes(args, 0)?, g.size as u64 - 1)?))
}

/// `c10d::_reduce_scatter_base_(Tensor output, Tensor input, ProcessGroup, ReduceOp, ...)`.
fn reduce_scatter_base(args: &Args) -> Result<Traffic> {
    group_of(args)?;
    Ok(Traffic::both(minus(bytes(tensor_arg(args, 1)?)?, bytes(tensor_arg(args, 0)?)?)?))
}

/// `c10d::reduce_scatter_tensor_coalesced_(Tensor[] outputs, Tensor[] inputs, ProcessGroup, ...)`.
fn reduce_scatter_coalesced(args: &Args) -> Result<Traffic> {
    group_of(args)?;
    Ok(Traffic::both(minus(list_bytes(args, 1)?, list_bytes(args, 0)?)?))
}

/// `_c10d_functional::reduce_scatter_tensor(Tensor input, str reduce_op, int group_size, str
/// group_name)` (and `_coalesced` with a list): the output is the input's `1/group_size`.
fn functional_reduce_scatter(args: &Args) -> Result<Traffic> {
    let n = size_arg(args, 2)?;
    let input = match args.tensor(0) {
        Some(t) => vec![t],
        None => args.list_tensors(0).ok_or(FormulaError::MissingArgument(0))?.collect(),
    };
    sum(input.into_iter().map(|t| {
        let elements = t.numel().ok_or(FormulaError::Overflow)?;
        if !elements.is_multiple_of(n) {
            return Err(FormulaError::UnexpectedShape);
        }
        let size = element_size(t.dtype).ok_or(FormulaError::UnexpectedShape)?;
        Ok(Traffic::both(mul(elements - elements / n, size)?))
    }))
}

/// Rank `r`'s rows of `rows` split by `splits` (empty: equally, which `n` must divide).
fn own_rows(rows: u64, splits: &[i64], g: Group) -> Result<u64> {
    if splits.is_empty() {
        if !rows.is_multiple_of(g.size as u64) {
            return Err(FormulaError::UnexpectedShape);
        }
        return Ok(rows / g.size as u64);
    }
    if splits.len() != g.size as usize {
        return Err(FormulaError::UnexpectedShape);
    }
    u64::try_from(splits[g.rank as usize]).map_err(|_| FormulaError::UnexpectedShape)
}

/// `t`'s rows (dim 0) and the bytes of one row.
fn rows_of(t: TensorMeta) -> Result<(u64, u64)> {
    let rows = u64::try_from(*t.dims.first().ok_or(FormulaError::UnexpectedShape)?)
        .map_err(|_| FormulaError::UnexpectedShape)?;
    Ok((rows, bytes(t)?.checked_div(rows).unwrap_or(0)))
}

/// The bytes of rank `r`'s slice along dim 0 of `t`, split by `splits` rows (empty: equally).
fn own_slice(t: TensorMeta, splits: &[i64], g: Group) -> Result<u64> {
    let (rows, row_bytes) = rows_of(t)?;
    mul(row_bytes, own_rows(rows, splits, g)?)
}

/// `c10d::alltoall_base_(Tensor output, Tensor input, ProcessGroup, int[] output_split_sizes,
/// int[] input_split_sizes, ...)`: every slice but the own one, each way.
fn alltoall_base(args: &Args) -> Result<Traffic> {
    let g = group_of(args)?;
    let (output, input) = (tensor_arg(args, 0)?, tensor_arg(args, 1)?);
    let out_splits = args.int_list(3).ok_or(FormulaError::MissingArgument(3))?;
    let in_splits = args.int_list(4).ok_or(FormulaError::MissingArgument(4))?;
    Ok(Traffic {
        sent: minus(bytes(input)?, own_slice(input, in_splits, g)?)?,
        received: minus(bytes(output)?, own_slice(output, out_splits, g)?)?,
    })
}

/// `_c10d_functional::all_to_all_single(Tensor input, SymInt[] output_split_sizes, SymInt[]
/// input_split_sizes, str group_name)`: the output has `sum(output_split_sizes)` rows (the
/// input's when the list is empty).
fn functional_all_to_all(args: &Args) -> Result<Traffic> {
    let g = group_of(args)?;
    let input = tensor_arg(args, 0)?;
    let out_splits = args.int_list(1).ok_or(FormulaError::MissingArgument(1))?;
    let in_splits = args.int_list(2).ok_or(FormulaError::MissingArgument(2))?;
    let (rows, row_bytes) = rows_of(input)?;
    let out_rows = if out_splits.is_empty() {
        rows
    } else {
        out_splits
            .iter()
            .try_fold(0u64, |acc, &s| acc.checked_add(u64::try_from(s).ok()?))
            .ok_or(FormulaError::UnexpectedShape)?
    };
    Ok(Traffic {
        sent: minus(bytes(input)?, own_slice(input, in_splits, g)?)?,
        received: mul(minus(out_rows, own_rows(out_rows, out_splits, g)?)?, row_bytes)?,
    })
}

/// `c10d::alltoall_(Tensor[] outputs, Tensor[] inputs, ProcessGroup, ...)`: one tensor per rank.
fn alltoall_list(args: &Args) -> Result<Traffic> {
    let g = group_of(args)?;
    let (outputs, inputs) = (list(args, 0)?, list(args, 1)?);
    if outputs.len() != g.size as usize || inputs.len() != g.size as usize {
        return Err(FormulaError::UnexpectedShape);
    }
    let others = |ts: &[TensorMeta]| -> Result<u64> {
        ts.iter()
            .enumerate()
            .filter(|&(i, _)| i != g.rank as usize)
            .try_fold(0u64, |acc, (_, &t)| acc.checked_add(bytes(t)?).ok_or(FormulaError::Overflow))
    };
    Ok(Traffic { sent: others(&inputs)?, received: others(&outputs)? })
}

/// `c10d::send(Tensor[] tensors, ProcessGroup, int dst, int tag)`.
fn send(args: &Args) -> Result<Traffic> {
    group_of(args)?;
    Ok(Traffic { sent: list_bytes(args, 0)?, received: 0 })
}

/// `c10d::recv_(Tensor[] tensors, ProcessGroup, int src, int tag)` and `recv_any_source_`.
fn recv(args: &Args) -> Result<Traffic> {
    group_of(args)?;
    Ok(Traffic { sent: 0, received: list_bytes(args, 0)? })
}

/// `_c10d_functional::isend(Tensor tensor, int dst, int tag, str group_name)`.
fn functional_send(args: &Args) -> Result<Traffic> {
    Ok(Traffic { sent: bytes(tensor_arg(args, 0)?)?, received: 0 })
}

/// `_c10d_functional::irecv(Tensor tensor, int src, int tag, str group_name)`.
fn functional_recv(args: &Args) -> Result<Traffic> {
    Ok(Traffic { sent: 0, received: bytes(tensor_arg(args, 0)?)? })
}

/// `c10d::barrier` and `monitored_barrier_`: a call, no payload.
fn barrier(_: &Args) -> Result<Traffic> {
    Ok(Traffic::default())
}

macro_rules! collectives {
    ($($op:literal => $f:path),+ $(,)?) => {
        &[$(Collective { operator: $op, traffic: $f }),+]
    };
}

/// Every collective torchscan prices. The `_c10d_functional` operators are what compiled code
/// and DTensor call; their `_c10d_functional_autograd` twins take the same arguments.
pub static COLLECTIVES: &[Collective] = collectives! {
    "c10d::allreduce_" => allreduce,
    "c10d::allreduce_coalesced_" => allreduce,
    "c10d::broadcast_" => broadcast,
    "c10d::reduce_" => reduce,
    "c10d::allgather_" => allgather_list,
    "c10d::allgather_coalesced_" => allgather_list,
    "c10d::_allgather_base_" => allgather_base,
    "c10d::allgather_into_tensor_coalesced_" => allgather_into_tensor_coalesced,
    "c10d::reduce_scatter_" => reduce_scatter_list,
    "c10d::_reduce_scatter_base_" => reduce_scatter_base,
    "c10d::reduce_scatter_tensor_coalesced_" => reduce_scatter_coalesced,
    "c10d::alltoall_base_" => alltoall_base,
    "c10d::alltoall_" => alltoall_list,
    "c10d::gather_" => gather,
    "c10d::scatter_" => scatter,
    "c10d::send" => send,
    "c10d::recv_" => recv,
    "c10d::recv_any_source_" => recv,
    "c10d::barrier" => barrier,
    "c10d::monitored_barrier_" => barrier,
    "_c10d_functional::all_reduce" => functional_all_reduce,
    "_c10d_functional::all_reduce_" => functional_all_reduce,
    "_c10d_functional::all_reduce_coalesced" => allreduce,
    "_c10d_functional::all_reduce_coalesced_" => allreduce,
    "_c10d_functional::all_gather_into_tensor" => functional_all_gather,
    "_c10d_functional::all_gather_into_tensor_out" => functional_all_gather,
    "_c10d_functional::all_gather_into_tensor_coalesced" => functional_all_gather,
    "_c10d_functional::reduce_scatter_tensor" => functional_reduce_scatter,
    "_c10d_functional::reduce_scatter_tensor_coalesced" => functional_reduce_scatter,
    "_c10d_functional::all_to_all_single" => functional_all_to_all,
    "_c10d_functional::broadcast" => functional_broadcast,
    "_c10d_functional::broadcast_" => functional_broadcast,
    "_c10d_functional::isend" => functional_send,
    "_c10d_functional::irecv" => functional_recv,
    "_c10d_functional_autograd::all_gather_into_tensor" => functional_all_gather,
    "_c10d_functional_autograd::reduce_scatter_tensor" => functional_reduce_scatter,
    "_c10d_functional_autograd::all_to_all_single" => functional_all_to_all,
};

/// The row of a collective (qualified name, `c10d::allreduce_`).
pub fn lookup(operator: &str) -> Option<usize> {
    COLLECTIVES.iter().position(|c| c.operator == operator)
}

#[cfg(test)]
mod tests {
    use super::{element_size, lookup, Args, FormulaError, Result, Traffic, COLLECTIVES};
    use crate::args::{build::*, index_stream};

    fn traffic(name: &str, build: impl FnOnce(&mut Vec<i64>)) -> Result<Traffic> {
        let mut s = Vec::new();
        build(&mut s);
        let mut offsets = Vec::new();
        assert!(index_stream(&s, &mut offsets));
        (COLLECTIVES[lookup(name).expect(name)].traffic)(&Args::new(&s, &offsets))
    }

    fn t(sent: u64, received: u64) -> Result<Traffic> {
        Ok(Traffic { sent, received })
    }

    #[test]
    fn ring_all_reduce_moves_twice_every_chunk_but_the_own() {
        // 10 float32 over 4 ranks: chunks 3, 3, 2, 2 elements. Rank 0: 2 x (10 - 3) x 4 bytes.
        let call = |rank| {
            traffic("c10d::allreduce_", |s| {
                tensors(s, &[&[10]]);
                group(s, 4, rank);
                other(s);
            })
        };
        assert_eq!(call(0), t(56, 56));
        assert_eq!(call(3), t(64, 64));
        // Divisible: 2 (n-1)/n S. 1024 float32 (4096 bytes) over 4 ranks: 6144.
        let even = traffic("c10d::allreduce_", |s| {
            tensors(s, &[&[32, 32]]);
            group(s, 4, 1);
        });
        assert_eq!(even, t(6144, 6144));
        // One rank moves nothing; a bfloat16 (code 15) buffer is 2 bytes an element.
        let alone = traffic("_c10d_functional::all_reduce", |s| {
            typed_tensor(s, 15, &[8]);
            other(s);
            group(s, 1, 0);
        });
        assert_eq!(alone, t(0, 0));
        let half = traffic("_c10d_functional::all_reduce", |s| {
            typed_tensor(s, 15, &[8]);
            other(s);
            group(s, 2, 0);
        });
        assert_eq!(half, t(16, 16));
    }

    #[test]
    fn rooted_collectives_move_from_or_to_the_root() {
        let bcast = |rank| {
            traffic("c10d::broadcast_", |s| {
                tensors(s, &[&[5]]);
                group(s, 4, rank);
                int(s, 2);
                int(s, 0);
            })
        };
        assert_eq!(bcast(2), t(60, 0));
        assert_eq!(bcast(0), t(0, 20));
        let red = |rank| {
            traffic("c10d::reduce_", |s| {
                tensors(s, &[&[5]]);
                group(s, 4, rank);
                other(s);
                int(s, 1);
                int(s, 0);
            })
        };
        assert_eq!(red(1), t(0, 60));
        assert_eq!(red(3), t(20, 0));
        let bad_root = traffic("c10d::broadcast_", |s| {
            tensors(s, &[&[5]]);
            group(s, 2, 0);
            int(s, 2);
        });
        assert_eq!(bad_root, Err(FormulaError::UnexpectedShape));
    }

    #[test]
    fn gathers_and_scatters_move_every_part_but_the_own() {
        // all_gather of 6 float32 (24 bytes) into 4 x 6.
        let base = traffic("c10d::_allgather_base_", |s| {
            tensor(s, &[24]);
            tensor(s, &[6]);
            group(s, 4, 0);
        });
        assert_eq!(base, t(72, 72));
        let functional = traffic("_c10d_functional::all_gather_into_tensor", |s| {
            tensor(s, &[6]);
            int(s, 4);
            other(s);
        });
        assert_eq!(functional, t(72, 72));
        // reduce_scatter of 24 float32 into 6: the other 3 chunks each way.
        let rs = traffic("c10d::_reduce_scatter_base_", |s| {
            tensor(s, &[6]);
            tensor(s, &[24]);
            group(s, 4, 3);
            other(s);
        });
        assert_eq!(rs, t(72, 72));
        let frs = traffic("_c10d_functional::reduce_scatter_tensor", |s| {
            tensor(s, &[24]);
            other(s);
            int(s, 4);
            other(s);
        });
        assert_eq!(frs, t(72, 72));
        let uneven = traffic("_c10d_functional::reduce_scatter_tensor", |s| {
            tensor(s, &[5]);
            other(s);
            int(s, 2);
        });
        assert_eq!(uneven, Err(FormulaError::UnexpectedShape));
    }

    #[test]
    fn all_to_all_moves_every_slice_but_the_own() {
        // 8 rows of 3 float32 (12 bytes a row) over 2 ranks, rank 1 keeps rows 5..8 of the input
        // (splits [5, 3]) and receives 4 rows of 6 (splits [4, 2]).
        let call = traffic("c10d::alltoall_base_", |s| {
            tensor(s, &[6, 3]);
            tensor(s, &[8, 3]);
            group(s, 2, 1);
            ints(s, &[4, 2]);
            ints(s, &[5, 3]);
        });
        assert_eq!(call, t(60, 48));
        let equal = traffic("_c10d_functional::all_to_all_single", |s| {
            tensor(s, &[8, 3]);
            ints(s, &[]);
            ints(s, &[]);
            group(s, 4, 0);
        });
        assert_eq!(equal, t(72, 72));
    }

    #[test]
    fn point_to_point_and_barriers() {
        let sent = traffic("c10d::send", |s| {
            tensors(s, &[&[4], &[2]]);
            group(s, 2, 0);
            int(s, 1);
        });
        assert_eq!(sent, t(24, 0));
        let received = traffic("c10d::recv_", |s| {
            tensors(s, &[&[4]]);
            group(s, 2, 1);
            int(s, 0);
        });
        assert_eq!(received, t(0, 16));
        assert_eq!(traffic("c10d::barrier", |s| tensor(s, &[1])), t(0, 0));
    }

    #[test]
    fn a_collective_without_its_group_cannot_be_priced() {
        let missing = traffic("c10d::allreduce_", |s| tensors(s, &[&[4]]));
        assert_eq!(missing, Err(FormulaError::MissingArgument(1)));
        let bad = traffic("c10d::allreduce_", |s| {
            tensors(s, &[&[4]]);
            group(s, 2, 2);
        });
        assert_eq!(bad, Err(FormulaError::UnexpectedShape));
    }

    #[test]
    fn element_sizes_follow_c10() {
        assert_eq!(element_size(6), Some(4)); // Float
        assert_eq!(element_size(5), Some(2)); // Half
        assert_eq!(element_size(10), Some(16)); // ComplexDouble
        assert_eq!(element_size(11), Some(1)); // Bool
        assert_eq!(element_size(24), Some(1)); // Float8_e4m3fn
        assert_eq!(element_size(99), None);
    }
}
