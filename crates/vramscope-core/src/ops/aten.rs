//! A single aten call described by data instead of a dedicated type: its output shapes and dtype
//! rule, whether it is a view, what autograd saves, its extra results and temporaries, and where
//! each input's gradient comes from. Front-ends that transcribe a model's forward op by op (the
//! Hugging Face transformers, whose forwards are long chains of small tensor ops: `pow`, `mean`,
//! `rsqrt`, `mul`, `neg`, `cat`, `embedding`, ...) use it for the ops whose rules are plain data.
//!
//! Shapes are fixed when the graph is built (a graph is built for one batch and sequence length);
//! dtypes are decided at run time from the inputs, so the same graph serves every precision.

use super::*;

/// How the dtype of an output, extra or temporary is decided at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DTypeRule {
    /// The dtype of input `i`.
    Like(usize),
    /// Type promotion over the floating-point inputs (the first input's dtype when none is float).
    Promote,
    /// Always this dtype (int64 indices, bool masks, float32 statistics).
    Fixed(DType),
}

impl DTypeRule {
    fn resolve(self, inputs: &[DType]) -> DType {
        match self {
            DTypeRule::Like(i) => inputs.get(i).copied().unwrap_or(DType::F32),
            DTypeRule::Fixed(d) => d,
            DTypeRule::Promote => inputs
                .iter()
                .copied()
                .filter(|d| d.is_float())
                .reduce(DType::promote)
                .or_else(|| inputs.first().copied())
                .unwrap_or(DType::F32),
        }
    }
}

/// A tensor an [`Aten`] op makes besides its outputs: shape and dtype rule.
pub type TensorRule = (Shape, DTypeRule);

/// One aten call with data-driven rules (see the module docs).
#[derive(Debug, Clone)]
pub struct Aten {
    /// The aten name (`pow`, `rsqrt`, `embedding`), for tables and traces.
    pub name: &'static str,
    /// Output shapes and dtype rules.
    pub outputs: Vec<TensorRule>,
    /// New memory, a view or in place.
    pub alias: Alias,
    /// The autocast class.
    pub autocast: Autocast,
    /// What autograd saves.
    pub saved: Vec<Saved>,
    /// Saved tensors kept only when a given input requires grad (see [`Op::saved_only_for`]).
    pub saved_only_for: Vec<(Saved, usize)>,
    /// Extra results kept for backward (when autograd records the op).
    pub extras: Vec<TensorRule>,
    /// Transient allocations inside the forward call (allocated and freed one after another).
    pub temporaries: Vec<TensorRule>,
    /// Transient allocations of the backward call (alive together with the new gradients).
    pub backward_temporaries: Vec<TensorRule>,
    /// Transient allocations before the outputs, as a program (see [`Op::forward_scratch`]).
    pub scratch: Vec<Scratch>,
    /// The same in backward, before the input gradients (see [`Op::backward_scratch`]).
    pub backward_scratch: Vec<Scratch>,
    /// Gradient rule per input; `None` is the default (a new tensor for every float input).
    pub grads: Option<Vec<GradIn>>,
    /// Backward allocates the input gradients last input first.
    pub grad_order: GradOrder,
    /// Whether it makes an autograd node at all.
    pub differentiable: bool,
    /// Its output is a leaf that requires grad (see [`Op::leaf_requires_grad`]).
    pub leaf_requires_grad: bool,
    /// Gradients are computed like the output, then reduced / cast (see
    /// [`Op::grads_like_output`]).
    pub grads_like_output: bool,
    /// Parameters and buffers its module owns (when used as a leaf module's whole forward).
    pub param_specs: Vec<ParamSpec>,
    /// Its output is a key/value cache (see [`Op::is_kv_cache`]).
    pub kv_cache: bool,
}

impl Aten {
    /// An op named `name` with one new output of `shape`, dtype promoted from its inputs, not on
    /// any autocast list, saving nothing.
    pub fn new(name: &'static str, shape: Shape) -> Self {
        Aten {
            name,
            outputs: vec![(shape, DTypeRule::Promote)],
            alias: Alias::None,
            autocast: Autocast::Unlisted,
            saved: Vec::new(),
            saved_only_for: Vec::new(),
            extras: Vec::new(),
            temporaries: Vec::new(),
            backward_temporaries: Vec::new(),
            scratch: Vec::new(),
            backward_scratch: Vec::new(),
            grads: None,
            grad_order: GradOrder::LeftToRight,
            differentiable: true,
            leaf_requires_grad: false,
            grads_like_output: false,
            param_specs: Vec::new(),
            kv_cache: false,
        }
    }

    /// A view of input 0 (`view`, `transpose`, `unsqueeze`, `split` pieces, `[..., :n]`).
    pub fn view(name: &'static str, shape: Shape) -> Self {
        Aten {
            alias: Alias::View(0),
            grads: Some(vec![GradIn::PassThrough(0)]),
            ..Aten::new(name, shape)
        }
    }

    /// Marks the output as a key/value cache (reported in that category): a differentiable
    /// cache update, such as the first `DynamicLayer.update` of a training forward.
    pub fn kv_cache(mut self) -> Self {
        self.kv_cache = true;
        self
    }

    /// Sets the output dtype rule.
    pub fn dtype(mut self, rule: DTypeRule) -> Self {
        for o in &mut self.outputs {
            o.1 = rule;
        }
        self
    }

    /// Sets what autograd saves.
    pub fn saves(mut self, saved: Vec<Saved>) -> Self {
        self.saved = saved;
        self
    }

    /// Keeps saved tensor `s` only when input `input` requires grad (`mm`, `mul`: each operand is
    /// saved for the other's gradient).
    pub fn saved_only_for(mut self, s: Saved, input: usize) -> Self {
        self.saved_only_for.push((s, input));
        self
    }

    /// A binary product (`mul`, `mm`) of inputs `a` and `b`: each is saved only for the other's
    /// gradient.
    pub fn cross_saves(self, a: usize, b: usize) -> Self {
        self.saved_only_for(Saved::Input(a), b)
            .saved_only_for(Saved::Input(b), a)
    }

    /// Sets the gradient rule per input.
    pub fn grads(mut self, grads: Vec<GradIn>) -> Self {
        self.grads = Some(grads);
        self
    }

    /// Sets the autocast class.
    pub fn autocast(mut self, class: Autocast) -> Self {
        self.autocast = class;
        self
    }

    /// Adds an extra result kept for backward.
    pub fn extra(mut self, shape: Shape, rule: DTypeRule) -> Self {
        self.extras.push((shape, rule));
        self
    }

    /// Adds a forward temporary.
    pub fn temporary(mut self, shape: Shape, rule: DTypeRule) -> Self {
        self.temporaries.push((shape, rule));
        self
    }

    /// Adds a backward temporary.
    pub fn backward_temporary(mut self, shape: Shape, rule: DTypeRule) -> Self {
        self.backward_temporaries.push((shape, rule));
        self
    }

    /// Sets the program of transient allocations made before the outputs.
    pub fn scratch(mut self, program: Vec<Scratch>) -> Self {
        self.scratch = program;
        self
    }

    /// Sets the program of transient allocations backward makes before the input gradients
    /// (what it leaves allocated goes once the gradients exist).
    pub fn backward_scratch(mut self, program: Vec<Scratch>) -> Self {
        self.backward_scratch = program;
        self
    }

    /// Backward allocates the input gradients last input first.
    pub fn right_to_left(mut self) -> Self {
        self.grad_order = GradOrder::RightToLeft;
        self
    }

    /// Backward makes the gradients of the inputs after the first, then the first's
    /// (`addmm(bias, mat1, mat2)`: mat1, mat2, bias).
    pub fn first_last(mut self) -> Self {
        self.grad_order = GradOrder::FirstLast;
        self
    }

    /// Registers a buffer of the op's module.
    pub fn buffer(mut self, name: &'static str, shape: Shape) -> Self {
        self.param_specs.push(ParamSpec::buffer(name, shape));
        self
    }

    /// No autograd node (integer index arithmetic).
    pub fn not_differentiable(mut self) -> Self {
        self.differentiable = false;
        self
    }

    /// Backward computes the gradients with the output's shape and dtype, then reduces those of
    /// broadcast inputs and casts those of narrower ones (a product: `grad * other`).
    pub fn grads_like_output(mut self) -> Self {
        self.grads_like_output = true;
        self
    }

    /// The output is a leaf with `requires_grad = True` (`t.requires_grad = True` after a
    /// factory call such as `zeros`); implies no autograd node of its own.
    pub fn requires_grad_leaf(mut self) -> Self {
        self.differentiable = false;
        self.leaf_requires_grad = true;
        self
    }

    fn dtypes(ctx: &OpCtx) -> Vec<DType> {
        ctx.inputs.iter().map(|t| t.dtype).collect()
    }

    fn metas(rules: &[TensorRule], dtypes: &[DType]) -> Vec<TensorMeta> {
        rules
            .iter()
            .map(|(s, r)| TensorMeta::new(s.clone(), r.resolve(dtypes)))
            .collect()
    }
}

impl Op for Aten {
    fn kind(&self) -> &'static str {
        self.name
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        if let Alias::View(i) | Alias::InPlace(i) = self.alias {
            let n_in = inputs.get(i).map(|s| crate::ir::numel(s)).unwrap_or(0);
            let n_out = self.outputs.first().map(|o| crate::ir::numel(&o.0));
            if self.alias == Alias::InPlace(i) && Some(n_in) != n_out {
                return Err(ShapeError::new(
                    self.name,
                    format!("in-place output {:?} does not fit input {i}", n_out),
                ));
            }
        }
        Ok(self.outputs.iter().map(|o| o.0.clone()).collect())
    }

    fn output_dtypes(&self, inputs: &[DType], _n: usize) -> Vec<DType> {
        self.outputs.iter().map(|o| o.1.resolve(inputs)).collect()
    }

    fn alias(&self) -> Alias {
        self.alias
    }

    fn param_specs(&self) -> Vec<ParamSpec> {
        self.param_specs.clone()
    }

    fn autocast(&self) -> Autocast {
        self.autocast
    }

    fn forward_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        Self::metas(&self.extras, &Self::dtypes(ctx))
    }

    fn forward_temporaries(&self, ctx: &OpCtx) -> Vec<u64> {
        Self::metas(&self.temporaries, &Self::dtypes(ctx))
            .iter()
            .map(TensorMeta::bytes)
            .collect()
    }

    fn forward_scratch(&self, _ctx: &OpCtx) -> Vec<Scratch> {
        self.scratch.clone()
    }

    fn backward_scratch(&self, _ctx: &OpCtx) -> Vec<Scratch> {
        self.backward_scratch.clone()
    }

    fn saved_for_backward(&self, _ctx: &OpCtx) -> Vec<Saved> {
        self.saved.clone()
    }

    fn saved_only_for(&self, s: Saved) -> Option<usize> {
        self.saved_only_for
            .iter()
            .find(|(x, _)| *x == s)
            .map(|&(_, i)| i)
    }

    fn input_grads(&self, ctx: &OpCtx) -> Vec<GradIn> {
        // without an explicit list: the trait's default (a new gradient per float input)
        ctx.inputs
            .iter()
            .enumerate()
            .map(|(i, t)| match (&self.grads, t.dtype.is_float()) {
                (_, false) => GradIn::None,
                (None, true) => GradIn::New,
                (Some(g), true) => g.get(i).copied().unwrap_or(GradIn::None),
            })
            .collect()
    }

    fn backward_temporaries(&self, ctx: &OpCtx) -> Vec<u64> {
        Self::metas(&self.backward_temporaries, &Self::dtypes(ctx))
            .iter()
            .map(TensorMeta::bytes)
            .collect()
    }

    fn grad_order(&self) -> GradOrder {
        self.grad_order
    }

    fn differentiable(&self) -> bool {
        self.differentiable
    }

    fn is_kv_cache(&self) -> bool {
        self.kv_cache
    }

    fn leaf_requires_grad(&self) -> bool {
        self.leaf_requires_grad
    }

    fn grads_like_output(&self) -> bool {
        self.grads_like_output
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promote_picks_the_widest_float_input() {
        let op = Aten::new("mul", vec![2, 3]);
        assert_eq!(
            op.output_dtypes(&[DType::BF16, DType::F32], 1),
            vec![DType::F32]
        );
        assert_eq!(op.output_dtypes(&[DType::I64], 1), vec![DType::I64]);
        let fixed = Aten::new("ne", vec![2]).dtype(DTypeRule::Fixed(DType::Bool));
        assert_eq!(fixed.output_dtypes(&[DType::I64], 1), vec![DType::Bool]);
    }

    #[test]
    fn explicit_grads_skip_integer_inputs() {
        let op = Aten::new("embedding", vec![2, 4]).grads(vec![GradIn::New, GradIn::New]);
        let inputs = [
            TensorMeta::new(vec![10, 4], DType::F32),
            TensorMeta::new(vec![2], DType::I64),
        ];
        let ctx = OpCtx {
            inputs: &inputs,
            params: &[],
            outputs: &[],
            training: true,
            inputs_require_grad: &[],
            keeps_saved: true,
            saved_unpacked: false,
        };
        assert_eq!(op.input_grads(&ctx), vec![GradIn::New, GradIn::None]);
    }
}
