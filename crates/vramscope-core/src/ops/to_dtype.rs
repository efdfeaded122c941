//! `x.to(dtype)`: a `_to_copy` with its own `ToCopyBackward0` node when the dtype changes, and `x`
//! itself (no allocation, no copy) when it already has that dtype. The target is a fixed dtype or
//! the runtime dtype of another input (`output.to(result.dtype)`), so one graph serves every
//! precision.

use super::*;

/// Where the target dtype of a [`ToDtype`] comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DTypeTarget {
    /// Always this dtype.
    Fixed(DType),
    /// The runtime dtype of input `i` (which is read for its dtype only: no gradient).
    LikeInput(usize),
}

/// `x.to(dtype)` (input 0 is `x`).
#[derive(Debug, Clone)]
pub struct ToDtype {
    /// The dtype to convert to.
    pub target: DTypeTarget,
    /// Input 0 is a frozen parameter first converted for good to input 1's dtype
    /// ([`Op::recasts_param_to_input_1`]).
    pub recast_first: bool,
}

impl ToDtype {
    /// `x.to(dtype)`.
    pub fn fixed(dtype: DType) -> Self {
        ToDtype {
            target: DTypeTarget::Fixed(dtype),
            recast_first: false,
        }
    }

    /// `Linear4bit`'s `bias.to(dtype)` with input 1 the layer's input `x`: first, when the bias's
    /// dtype is not `x`'s, `self.bias.data = self.bias.data.to(x.dtype)` (for good).
    pub fn fixed_after_recast(dtype: DType) -> Self {
        ToDtype {
            target: DTypeTarget::Fixed(dtype),
            recast_first: true,
        }
    }

    /// `x.to(other.dtype)` with `other` as input 1.
    pub fn like_input_1() -> Self {
        ToDtype {
            target: DTypeTarget::LikeInput(1),
            recast_first: false,
        }
    }

    fn resolve(&self, inputs: &[DType]) -> DType {
        match self.target {
            DTypeTarget::Fixed(d) => d,
            DTypeTarget::LikeInput(i) => inputs
                .get(i)
                .or(inputs.first())
                .copied()
                .unwrap_or(DType::F32),
        }
    }
}

impl Op for ToDtype {
    fn kind(&self) -> &'static str {
        "_to_copy"
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        let s = inputs
            .first()
            .ok_or_else(|| ShapeError::new("_to_copy", "no input"))?;
        Ok(vec![s.to_vec()])
    }

    fn output_dtypes(&self, inputs: &[DType], n: usize) -> Vec<DType> {
        vec![self.resolve(inputs); n]
    }

    fn recasts_param_to_input_1(&self) -> bool {
        self.recast_first
    }

    // `.to()` returns `self`: the same tensor, not a view with a node of its own
    fn view_is_its_input(&self) -> bool {
        true
    }

    fn alias_for(&self, ctx: &OpCtx) -> Alias {
        let inputs = ctx.inputs;
        let dtypes: Vec<DType> = inputs.iter().map(|t| t.dtype).collect();
        match inputs.first() {
            Some(x) if x.dtype == self.resolve(&dtypes) => Alias::View(0),
            _ => Alias::None,
        }
    }

    fn input_grads(&self, ctx: &OpCtx) -> Vec<GradIn> {
        let same = ctx
            .inputs
            .first()
            .zip(ctx.outputs.first())
            .is_some_and(|(i, o)| i.dtype == o.dtype);
        let first = match ctx.inputs.first() {
            Some(t) if !t.dtype.is_float() => GradIn::None,
            // `.to()` returned its input: the gradient is the output's
            _ if same => GradIn::PassThrough(0),
            _ => GradIn::New,
        };
        let mut g = vec![first];
        g.resize(ctx.inputs.len(), GradIn::None);
        g
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn to_returns_its_input_when_the_dtype_already_matches() {
        let x = [TensorMeta::new(vec![2, 3], DType::BF16)];
        let ctx = |inputs| OpCtx {
            inputs,
            params: &[],
            outputs: &[],
            training: true,
            inputs_require_grad: &[],
            keeps_saved: true,
            saved_unpacked: false,
        };
        assert_eq!(
            ToDtype::fixed(DType::BF16).alias_for(&ctx(&x)),
            Alias::View(0)
        );
        assert_eq!(ToDtype::fixed(DType::F32).alias_for(&ctx(&x)), Alias::None);
        let pair = [
            TensorMeta::new(vec![2, 3], DType::F32),
            TensorMeta::new(vec![2, 3], DType::BF16),
        ];
        assert!(ToDtype::fixed(DType::BF16).view_is_its_input());
        let like = ToDtype::like_input_1();
        assert_eq!(like.alias_for(&ctx(&pair)), Alias::None);
        assert_eq!(
            like.output_dtypes(&[DType::F32, DType::BF16], 1),
            vec![DType::BF16]
        );
    }
}
