//! An in-place op applied to a *view* of a tensor that requires grad (EfficientNet's
//! `Dropout(inplace=True)` on `torch.flatten(x, 1)`): autograd rebases the view's history onto a
//! `CopySlices` node. In backward it allocates the base's gradient (`new_empty_strided`), clones
//! the incoming gradient, runs the wrapped op's backward on the clone (one more tensor of the
//! view's size, e.g. `grad * noise` for `mul_`) and copies the result in; the clone and the
//! wrapped op's result are freed before the node returns.
//!
//! Modelled for a view that covers its whole base (the base's gradient has the view's bytes).

use super::*;

/// `op` run in place on a view (the wrapped op must be in place).
#[derive(Debug, Clone)]
pub struct CopySlices<O> {
    /// The in-place op.
    pub op: O,
}

impl<O: Op> Op for CopySlices<O> {
    fn kind(&self) -> &'static str {
        self.op.kind()
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        self.op.output_shapes(inputs)
    }

    fn output_dtypes(&self, inputs: &[DType], n_outputs: usize) -> Vec<DType> {
        self.op.output_dtypes(inputs, n_outputs)
    }

    fn param_specs(&self) -> Vec<ParamSpec> {
        self.op.param_specs()
    }

    fn alias(&self) -> Alias {
        self.op.alias()
    }

    fn autocast(&self) -> Autocast {
        self.op.autocast()
    }

    fn forward_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        self.op.forward_extras(ctx)
    }

    fn inference_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        self.op.inference_extras(ctx)
    }

    fn forward_temporaries(&self, ctx: &OpCtx) -> Vec<u64> {
        self.op.forward_temporaries(ctx)
    }

    fn saved_for_backward(&self, ctx: &OpCtx) -> Vec<Saved> {
        self.op.saved_for_backward(ctx)
    }

    // the base's gradient is always a new tensor
    fn input_grads(&self, ctx: &OpCtx) -> Vec<GradIn> {
        self.op
            .input_grads(ctx)
            .into_iter()
            .enumerate()
            .map(|(i, g)| {
                if i == 0 && g != GradIn::None {
                    GradIn::New
                } else {
                    g
                }
            })
            .collect()
    }

    // the cloned incoming gradient and the wrapped op's own input gradient
    fn backward_temporaries(&self, ctx: &OpCtx) -> Vec<u64> {
        let mut t = self.op.backward_temporaries(ctx);
        if let Some(x) = ctx.inputs.first() {
            t.push(x.bytes());
            t.push(x.bytes());
        }
        t
    }

    fn differentiable(&self) -> bool {
        self.op.differentiable()
    }

    fn identity_in_eval(&self) -> bool {
        self.op.identity_in_eval()
    }
}
