//! `docs/formulas.md`, generated from the registry so that it cannot drift: a test compares the
//! file with [`markdown`] and fails on any difference (`make docs` rewrites it).

use std::fmt::Write;

use super::ignored::IGNORED;
use super::{Category, FORMULAS};

/// The whole page: one table per category, then the ignore list by reason.
pub fn markdown() -> String {
    let mut out = String::new();
    out.push_str(
        "# Operator formulas\n\n\
         Generated from the registry (`src/formulas/mod.rs` and `src/formulas/ignored.rs`) by \
         `make docs`; a test fails when this page and the registry disagree.\n\n\
         A row covers every overload of the operator, and an in-place variant without a row of its \
         own (`aten.cos_`) takes its functional form's (`aten.cos`). An operator that has a kernel of its own and \
         appears nowhere on this page is *uncounted*: the total becomes `partial` and a diagnostic \
         names it. Composite operators (no kernel of their own) are never listed: their nested \
         operators are counted. Sources: PyTorch's `FlopCounterMode` formulas where it has them \
         (matrix products, convolutions, attention), fvcore's for normalization and interpolation, \
         and conventions stated here for the rest.\n\n\
         Complex tensors are counted in real arithmetic: a complex multiply-accumulate is 4 real \
         multiplies and 4 real adds, 8 FLOPs against a real one's 2, so the matmul, conv and attention \
         formulas count 4x on complex operands; the Fourier transforms count their complex arithmetic \
         themselves; a pointwise or reduction row marked `complex: xK` counts K real FLOPs per complex \
         operation, the textbook count on a + bi (add, subtract, negate 2; multiply 6; divide 11; abs 4; \
         exp 5; reciprocal 6; sgn 6; angle 1; conj_physical 1; sum and mean 2 per element, the row's \
         comment in `src/formulas/mod.rs` derives each). Other formulas have no complex form, and such a \
         call is a `formula_error` (partial), never a real-valued price. Sparse operands (COO, CSR, CSC, BSR, \
         BSC) are priced by their stored values where a row names a sparse formula; any other formula \
         on a sparse tensor is a `formula_error` naming the layout, never a dense price.\n\n\
         The bias convention: a fused kernel's bias or added input costs what the separate operators \
         would, since an ordinary `add` cannot be told from a bias add (`F.linear` runs as `addmm` or, \
         under `torch.func.vmap`, as `mm` + `add`: the same count either way). `addmm(self, a, b, beta, \
         alpha)` is the product, 1 FLOP per output element for the add, 1 per element of `self` for \
         `beta`'s multiply and 1 per output element for `alpha`'s; `beta = 1` and `alpha = 1` are free \
         (no multiply), `beta = 0` ignores `self` (no add). A convolution's bias is 1 per output element \
         and its gradient (`convolution_backward`'s `output_mask[2]`) 1 per element of `grad_output`, \
         the separate `sum`'s cost; so for `addmv`, `baddbmm`, `addbmm`, `addr`, `_addmm_activation`, \
         the backend convolutions, the fused RNN cells and layers, the multi-head attention fast path's \
         projections, the fp8, 2:4-sparse and mixed-dtype products. PyTorch's `FlopCounterMode` drops these terms: the rows differ from it \
         by exactly them.\n\n\
         The `integer` category holds the integer kernels of quantized models: integer operations, not \
         FLOPs (2 per int8 multiply-accumulate, 1 per quantized elementwise result), reported apart in \
         the report's `integer_ops` and in no FLOP total; a packed weight's shape and a packed \
         convolution's parameters are read from the packed object. A dynamic kernel's floating-point work \
         around its integer product (`quantized::linear_dynamic`: quantizing its input, dequantizing its \
         output, the bias; `FLOPs:` in the formula column) is FLOPs, in `pointwise`.\n",
    );
    for category in Category::ALL {
        let rows: Vec<_> = FORMULAS.iter().filter(|f| f.category == category).collect();
        if rows.is_empty() {
            continue;
        }
        let _ = write!(
            out,
            "\n## {}\n\n| operator | formula | convention | source |\n|---|---|---|---|\n",
            category.name()
        );
        for f in rows {
            let _ = writeln!(
                out,
                "| `{}` | `{}` | {} | {} |",
                f.operator, f.formula, f.convention.rule, f.convention.source
            );
        }
    }
    out.push_str(
        "\n## Deliberately uncounted (the total is partial, with a `deliberately_uncounted` diagnostic)\n\n\
         | operator | reason |\n|---|---|\n",
    );
    for u in super::quantize::UNCOUNTED {
        let _ = writeln!(out, "| `{}` | {} |", u.operator, u.reason);
    }
    if super::quantize::UNCOUNTED.is_empty() {
        out.push_str("| (none) | |\n");
    }
    out.push_str(
        "\n## Collectives: bytes, not FLOPs (the report's `communication`)\n\n\
         Priced by the bytes this rank sends and receives, by the ring convention of \
         `docs/distributed.md` (`src/formulas/collective.rs`); they add no FLOPs.\n\n| operator |\n|---|\n",
    );
    for c in super::collective::COLLECTIVES {
        let _ = writeln!(out, "| `{}` |", c.operator);
    }
    out.push_str(
        "\n## Ignored: no arithmetic (0 FLOPs, listed in `ignored_operators`)\n\n| operator | reason |\n|---|---|\n",
    );
    for ignored in IGNORED {
        let _ = writeln!(out, "| `{}` | {} |", ignored.operator, ignored.reason.name());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `docs/formulas.md` equals the registry's page; `TORCHSCAN_BLESS=1` rewrites it.
    #[test]
    fn docs_formulas_md_is_generated_from_the_registry() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/formulas.md");
        let expected = markdown();
        if std::env::var_os("TORCHSCAN_BLESS").is_some() {
            std::fs::write(&path, &expected).expect("docs/formulas.md is writable");
        }
        let actual = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(actual == expected, "docs/formulas.md is stale: run `make docs`");
    }

    #[test]
    fn every_formula_and_ignore_reason_is_listed() {
        let page = markdown();
        for f in FORMULAS {
            assert!(page.contains(&format!("| `{}` | `{}` |", f.operator, f.formula)), "{}", f.operator);
        }
        for ignored in IGNORED {
            assert!(page.contains(&format!("| `{}` | {} |", ignored.operator, ignored.reason.name())));
        }
    }
}
