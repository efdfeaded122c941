//! A `view` whose gradient arrives strided: when a view is followed by a `transpose`/`permute`
//! (ShuffleNet's `channel_shuffle`: `view → transpose → contiguous → view`), the gradient reaching
//! the first view is the transposed (non-contiguous) gradient, and `ViewBackward0`'s
//! `grad.reshape(sizes)` cannot view it: it copies it into a new contiguous tensor (`clone`) of the
//! input's size. Forward is an ordinary view (no allocation).

use super::*;

/// `x.view(shape)` whose backward copies the incoming (strided) gradient.
#[derive(Debug, Clone)]
pub struct ViewStridedGrad {
    /// The output shape.
    pub shape: Shape,
}

impl Op for ViewStridedGrad {
    fn kind(&self) -> &'static str {
        "view"
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        super::view::same_numel("view", inputs[0], &self.shape)
    }

    fn alias(&self) -> Alias {
        Alias::View(0)
    }
}
