//! `attn_output.transpose(1, 2)` followed by `.contiguous()` or `.reshape(B, S, H·D)`, right
//! after `F.scaled_dot_product_attention`: a view or a copy, depending on how the kernel the call
//! ran ([`SdpaBackend::choose`]) laid its `[B, H, S, D]` output out in memory:
//!
//! - mem-efficient attention writes it as `[B, S, H, D]`: a view;
//! - cuDNN and flash attention write it like q: a copy when q was contiguous `[B, H, S, D]` (a
//!   `cat` or cast result rather than the usual transposed projection);
//! - flash attention over padded head dims returns a slice of its padded output: a copy;
//! - the math fallback returns a contiguous `[B, H, S, D]` `bmm` result: a copy unless there is
//!   one head or one query.
//!
//! Either way the gradient passes through (`TransposeBackward0`, `CloneBackward0`).

use super::attention::SdpaCall;
use super::*;

/// The transposed (and merged) attention output; see the module docs.
#[derive(Debug, Clone)]
pub struct SdpaOutputMerge {
    /// What PyTorch calls the copy: `clone` (`.contiguous()`) or `reshape`.
    pub name: &'static str,
    /// The output shape: `[B, S, H, D]`, or `[B, S, H·D]` merged.
    pub shape: Shape,
    /// q was contiguous `[B, H, S, D]`.
    pub q_contiguous: bool,
    /// The attention call had a mask (which rules flash attention out).
    pub masked: bool,
    /// The attention call's dropout probability (active in training only).
    pub dropout_p: f64,
}

impl SdpaOutputMerge {
    /// Whether the `[B, H, S, D]` attention output `ctx.inputs[0]` is copied.
    fn copies(&self, ctx: &OpCtx) -> bool {
        let o = &ctx.inputs[0];
        let dims = |i: usize| o.shape.get(i).copied().unwrap_or(1);
        let dropout = ctx.training && self.dropout_p > 0.0;
        let grad = ctx
            .inputs_require_grad
            .first()
            .copied()
            .unwrap_or(ctx.training);
        let call = SdpaCall::around(dims(3), dropout, self.masked, grad);
        let backend = SdpaBackend::choose(o.dtype, &call);
        if backend.heads_first(&call) {
            // contiguous heads-first: its transpose is contiguous only for one head or query
            // (a padded slice never is)
            backend.pads_head_dims(&call) || (dims(1) > 1 && dims(2) > 1)
        } else {
            // mem-efficient attention writes [B, S, H, D]; cuDNN and flash lay it out like q
            backend != SdpaBackend::Efficient && self.q_contiguous
        }
    }
}

impl Op for SdpaOutputMerge {
    fn kind(&self) -> &'static str {
        self.name
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        let s = expect_rank(self.name, inputs, 0, 4)?;
        super::view::same_numel(self.name, s, &self.shape)
    }

    fn alias(&self) -> Alias {
        Alias::View(0)
    }

    fn alias_for(&self, ctx: &OpCtx) -> Alias {
        if self.copies(ctx) {
            Alias::None
        } else {
            Alias::View(0)
        }
    }

    fn input_grads(&self, _ctx: &OpCtx) -> Vec<GradIn> {
        vec![GradIn::PassThrough(0)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alias(op: &SdpaOutputMerge, o: TensorMeta, training: bool) -> Alias {
        let inputs = [o];
        op.alias_for(&OpCtx {
            inputs: &inputs,
            params: &[],
            outputs: &[],
            training,
            inputs_require_grad: &[training],
            keeps_saved: true,
            saved_unpacked: false,
        })
    }

    #[test]
    fn copies_as_the_kernel_laid_the_output_out() {
        let merge = |q_contiguous| SdpaOutputMerge {
            name: "clone",
            shape: vec![2, 64, 4, 64],
            q_contiguous,
            masked: false,
            dropout_p: 0.0,
        };
        let o = |d: u64, dtype| TensorMeta::new(vec![2, 4, 64, d], dtype);
        // cuDNN: like q
        assert_eq!(
            alias(&merge(false), o(64, DType::BF16), true),
            Alias::View(0)
        );
        assert_eq!(alias(&merge(true), o(64, DType::BF16), true), Alias::None);
        // mem-efficient: always [B, S, H, D]
        assert_eq!(alias(&merge(true), o(64, DType::F32), true), Alias::View(0));
        // padded flash attention: a slice of the padded output
        let padded = SdpaOutputMerge {
            shape: vec![2, 64, 4, 12],
            ..merge(false)
        };
        assert_eq!(alias(&padded, o(12, DType::BF16), false), Alias::None);
        // the math fallback (float32, a head dim that is not a multiple of 4)
        let math = SdpaOutputMerge {
            shape: vec![2, 64, 4, 6],
            ..merge(false)
        };
        assert_eq!(alias(&math, o(6, DType::F32), true), Alias::None);
        let one_query = SdpaOutputMerge {
            shape: vec![2, 1, 4, 6],
            ..merge(false)
        };
        let decode = TensorMeta::new(vec![2, 4, 1, 6], DType::F32);
        assert_eq!(alias(&one_query, decode, false), Alias::View(0));
    }
}
