//! Operators that do no arithmetic: they cost zero FLOPs, and the report lists them with the
//! reason. Only operators whose every overload is arithmetic-free belong here (an operator that
//! sometimes accumulates, like `index_put_` with `accumulate=True`, does not).

pub struct Ignored {
    pub operator: &'static str,
    pub reason: Reason,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Returns a view or alias of its input's storage.
    View,
    /// Copies or rearranges elements without arithmetic.
    DataMovement,
    /// Allocates memory without writing values.
    Allocation,
    /// Writes constants, ranges or random numbers.
    Creation,
    /// Reads sizes, strides or other metadata.
    Metadata,
    /// Waits for other work (a collective's result) to finish.
    Synchronization,
}

impl Reason {
    pub const ALL: [Reason; 6] = [
        Reason::View,
        Reason::DataMovement,
        Reason::Allocation,
        Reason::Creation,
        Reason::Metadata,
        Reason::Synchronization,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Reason::View => "view",
            Reason::DataMovement => "data_movement",
            Reason::Allocation => "allocation",
            Reason::Creation => "creation",
            Reason::Metadata => "metadata",
            Reason::Synchronization => "synchronization",
        }
    }
}

macro_rules! ignore_table {
    ($($reason:ident: [$($op:literal),+ $(,)?]),+ $(,)?) => {
        &[$($(Ignored { operator: $op, reason: Reason::$reason }),+),+]
    };
}

/// The ignore list, grouped by reason.
pub static IGNORED: &[Ignored] = ignore_table! {
    View: [
        "aten::view", "aten::_unsafe_view", "aten::_reshape_alias", "aten::as_strided", "aten::as_strided_",
        "aten::t", "aten::t_", "aten::transpose", "aten::transpose_", "aten::permute", "aten::expand",
        "aten::squeeze", "aten::squeeze_", "aten::unsqueeze", "aten::unsqueeze_", "aten::select",
        "aten::slice", "aten::narrow", "aten::alias", "aten::detach", "aten::detach_", "aten::unfold",
        "aten::split", "aten::split_with_sizes", "aten::unbind", "aten::diagonal", "aten::view_as_real",
        "aten::view_as_complex", "aten::lift_fresh", "aten::_nested_view_from_buffer", "aten::indices",
        "aten::values",
        // The functional collectives' output, handed to autograd as it is.
        "_c10d_functional::_wrap_tensor_autograd",
    ],
    DataMovement: [
        // Index conversions, packing and layout changes (issue 15's operator surface).
        "aten::_convert_indices_from_coo_to_csr", "aten::_convert_indices_from_csr_to_coo",
        "aten::_cudnn_rnn_flatten_weight", "aten::_make_per_channel_quantized_tensor",
        "aten::_make_per_tensor_quantized_tensor", "aten::_nested_tensor_from_mask",
        "aten::_to_sparse_semi_structured", "aten::_sparse_semi_structured_tile",
        "aten::_sparse_semi_structured_apply", "aten::_sparse_semi_structured_apply_dense", "aten::_cslt_compress",
        "aten::_convert_weight_to_int4pack", "aten::_convert_weight_to_int4pack_for_cpu",
        "aten::_dyn_quant_pack_4bit_weight", "aten::lu_unpack", "aten::_spdiags", "aten::repeat_interleave",
        "aten::clone", "aten::copy_", "aten::_to_copy", "aten::_copy_from", "aten::_copy_from_and_resize",
        "aten::cat", "aten::index_select", "aten::gather", "aten::flip", "aten::roll", "aten::repeat",
        "aten::lift_fresh_copy", "aten::where", "aten::masked_fill", "aten::masked_fill_", "aten::index",
        "aten::stack", "aten::tril", "aten::tril_", "aten::triu", "aten::triu_", "aten::constant_pad_nd",
        "aten::reflection_pad1d", "aten::reflection_pad2d", "aten::replication_pad2d", "aten::channel_shuffle",
        "aten::native_channel_shuffle", "aten::pixel_shuffle", "aten::pixel_unshuffle", "aten::embedding",
        "aten::upsample_nearest1d", "aten::upsample_nearest2d", "aten::upsample_nearest3d",
        "aten::_upsample_nearest_exact1d", "aten::_upsample_nearest_exact2d", "aten::_upsample_nearest_exact3d",
        "aten::contiguous", "aten::im2col", "aten::masked_scatter", "aten::int_repr", "aten::_pin_memory",
        "aten::masked_select", "aten::nonzero", "aten::max_unpool2d", "aten::max_unpool3d", "aten::_stack",
        "aten::narrow_copy", "aten::split_with_sizes_copy", "aten::index_copy", "aten::take", "aten::to_mkldnn",
        "aten::_to_sparse", "aten::_to_sparse_csr", "aten::_to_sparse_csc", "aten::_to_sparse_bsr",
        "aten::_to_sparse_bsc", "aten::_chunk_cat", "aten::complex", "aten::reflection_pad3d",
        "aten::replication_pad1d", "aten::replication_pad3d", "aten::_nested_from_padded",
        "aten::_jagged_to_padded_dense_forward", "aten::_padded_dense_to_jagged_forward", "aten::_foreach_copy_",
        "aten::_foreach_clone", "aten::nonzero_static",
        // FSDP2's copies in and out of its collectives' buffers (Python kernels that only copy).
        "fsdp::all_gather_copy_in", "fsdp::split_with_sizes_copy", "fsdp::chunk_cat",
    ],
    Allocation: [
        "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty",
        "aten::new_empty_strided", "aten::resize_", "aten::resize_as_", "aten::set_", "aten::empty_permuted",
        "aten::_empty_affine_quantized", "aten::_empty_per_channel_affine_quantized",
    ],
    Creation: [
        "aten::_fill_mem_eff_dropout_mask_",
        "aten::zeros", "aten::_efficientzerotensor", "aten::zeros_like", "aten::ones", "aten::ones_like", "aten::full", "aten::full_like",
        "aten::fill_", "aten::zero_", "aten::new_zeros", "aten::new_ones", "aten::new_full",
        "aten::scalar_tensor", "aten::arange", "aten::normal_", "aten::uniform_", "aten::random_",
        "aten::randn", "aten::rand", "aten::bernoulli", "aten::bernoulli_", "aten::randint", "aten::randperm",
        // kaiser_window: a CompositeExplicitAutograd kernel that computes through a stub, not
        // through dispatched operators; a window made once, like linspace and logspace.
        "aten::kaiser_window",
        "aten::linspace", "aten::eye", "aten::index_fill", "aten::index_fill_", "aten::tril_indices",
        "aten::triu_indices", "aten::range", "aten::logspace", "aten::cauchy_", "aten::exponential_",
        "aten::geometric_", "aten::log_normal_", "aten::normal", "aten::multinomial", "aten::poisson",
        "aten::binomial", "aten::_standard_gamma", "aten::_sample_dirichlet", "aten::_philox_normal_",
        "aten::_philox_uniform_", "aten::_philox_key_split", "aten::_philox_key_fold_in",
        "aten::_cudnn_init_dropout_state", "aten::from_file", "aten::_foreach_zero_",
    ],
    Metadata: [
        "aten::_nested_tensor_from_mask_left_aligned",
        "aten::size", "aten::stride", "aten::_local_scalar_dense", "aten::is_same_size", "aten::q_scale",
        "aten::q_zero_point", "aten::q_per_channel_scales", "aten::q_per_channel_zero_points",
        "aten::q_per_channel_axis", "aten::qscheme", "aten::is_pinned",
        "aten::_assert_async", "aten::_functional_assert_async", "aten::_make_dep_token", "aten::record_stream",
        "aten::is_set_to", "aten::_use_cudnn_ctc_loss", "aten::_use_miopen_ctc_loss", "aten::_fused_sdp_choice",
        "aten::_validate_compressed_sparse_indices", "aten::_nested_compute_contiguous_strides_offsets"
    ],
    Synchronization: [
        // A functional collective's wait: the collective itself is priced (`collective.rs`).
        "_c10d_functional::wait_tensor",
    ],
};
