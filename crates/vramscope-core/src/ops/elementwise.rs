//! Generic broadcasting pointwise ops that the named ops do not cover (`sub`, `div`, `pow`,
//! `sqrt`, `erf`, `leaky_relu`, `clamp`, `where`, `_to_copy`, ...), described by what their
//! backward formula reads (derivatives.yaml): which inputs, and whether the output.

use super::*;

/// A pointwise op over one or more broadcasting inputs, producing a new tensor.
#[derive(Debug, Clone)]
pub struct Elementwise {
    /// The aten name (`sub`, `div`, `sqrt`).
    pub name: &'static str,
    /// Inputs its backward reads.
    pub saves_inputs: Vec<usize>,
    /// Whether its backward reads the output (`sqrt`, `exp`).
    pub saves_output: bool,
    /// A fixed output dtype (`_to_copy`, comparisons); `None` promotes the inputs.
    pub out_dtype: Option<DType>,
    /// Its autocast class.
    pub autocast: Autocast,
}

impl Elementwise {
    /// A pointwise op that saves the given inputs, runs in its inputs' dtype.
    pub fn new(name: &'static str, saves_inputs: &[usize]) -> Self {
        Elementwise {
            name,
            saves_inputs: saves_inputs.to_vec(),
            saves_output: false,
            out_dtype: None,
            autocast: Autocast::Unlisted,
        }
    }
}

impl Op for Elementwise {
    fn kind(&self) -> &'static str {
        self.name
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        let mut out = inputs
            .first()
            .ok_or_else(|| ShapeError::new(self.name, "no inputs"))?
            .to_vec();
        for s in &inputs[1..] {
            out = broadcast(self.name, &out, s)?;
        }
        Ok(vec![out])
    }

    fn output_dtypes(&self, inputs: &[DType], n: usize) -> Vec<DType> {
        let d = self.out_dtype.unwrap_or_else(|| {
            inputs
                .iter()
                .copied()
                .reduce(DType::promote)
                .unwrap_or(DType::F32)
        });
        vec![d; n]
    }

    fn autocast(&self) -> Autocast {
        self.autocast
    }

    fn saved_for_backward(&self, ctx: &OpCtx) -> Vec<Saved> {
        let mut s: Vec<Saved> = self
            .saves_inputs
            .iter()
            .filter(|&&i| i < ctx.inputs.len())
            .map(|&i| Saved::Input(i))
            .collect();
        if self.saves_output {
            s.push(Saved::Output(0));
        }
        s
    }

    fn differentiable(&self) -> bool {
        !matches!(self.out_dtype, Some(d) if !d.is_float())
    }
}
