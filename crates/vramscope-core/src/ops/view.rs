//! Views (`view`, `reshape` of contiguous data, `flatten`, `permute`, `transpose`, `expand`,
//! `chunk`) allocate nothing; `contiguous()` / `clone()` copy. A view's backward is a view of the
//! incoming gradient, except `expand` (summed) and `chunk` (re-assembled into one new tensor).

use super::*;

/// A view of input 0 with a new shape.
#[derive(Debug, Clone)]
pub struct View {
    /// What PyTorch calls it (`flatten`, `permute`, ...), for tables.
    pub name: &'static str,
    /// The output shapes (one per output; several for `chunk`/`split`).
    pub shapes: Vec<Shape>,
    /// Whether it is an `expand` (broadcast view; backward sums).
    pub expand: bool,
}

impl View {
    /// A single-output view.
    pub fn new(name: &'static str, shape: Shape) -> Self {
        View {
            name,
            shapes: vec![shape],
            expand: false,
        }
    }
}

impl Op for View {
    fn kind(&self) -> &'static str {
        self.name
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        let n_in = crate::ir::numel(inputs[0]);
        let n_out: u64 = self.shapes.iter().map(|s| crate::ir::numel(s)).sum();
        if !self.expand && n_in != n_out {
            return Err(ShapeError::new(
                self.name,
                format!("cannot view {:?} as {:?}", inputs[0], self.shapes),
            ));
        }
        Ok(self.shapes.clone())
    }

    fn alias(&self) -> Alias {
        Alias::View(0)
    }

    fn input_grads(&self, ctx: &OpCtx) -> Vec<GradIn> {
        if self.expand || ctx.outputs.len() > 1 {
            vec![GradIn::New]
        } else {
            vec![GradIn::PassThrough(0)]
        }
    }
}

/// A copy into fresh contiguous memory (`.contiguous()` of a permuted tensor, `clone()`, a
/// `reshape` that cannot view).
#[derive(Debug, Clone)]
pub struct Contiguous {
    /// What PyTorch calls it.
    pub name: &'static str,
    /// The output shape (the same number of elements).
    pub shape: Shape,
}

impl Op for Contiguous {
    fn kind(&self) -> &'static str {
        self.name
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        same_numel(self.name, inputs[0], &self.shape)
    }

    fn input_grads(&self, _ctx: &OpCtx) -> Vec<GradIn> {
        vec![GradIn::PassThrough(0)]
    }
}

/// The shape rule of every view or reshape to a given shape: the element counts must agree.
pub(crate) fn same_numel(
    op: &'static str,
    input: &[u64],
    shape: &Shape,
) -> Result<Vec<Shape>, ShapeError> {
    if crate::ir::numel(input) != crate::ir::numel(shape) {
        return Err(ShapeError::new(
            op,
            format!("cannot view {input:?} as {shape:?}"),
        ));
    }
    Ok(vec![shape.clone()])
}
