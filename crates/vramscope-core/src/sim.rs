//! The step simulator: runs the canonical training loop (or the inference loop) of DESIGN.md over a
//! [`Graph`] the way PyTorch eager and its autograd engine would, producing every allocation and
//! free, tagged by phase, category and module, and feeds them through the caching-allocator model.
//!
//! The rules it follows, each checked against `../shared/truth` traces:
//! - forward: an op allocates its outputs (views and in-place ops none) and its extra results; a
//!   tensor is freed when its last user has run and the module calls that received it have returned,
//!   unless autograd saved it;
//! - backward (reverse creation order, as the engine's ready queue runs it): a node allocates its
//!   input gradients, then drops the incoming gradient, then its saved tensors; gradients that meet
//!   at a tensor used twice are summed into a new tensor; a parameter's first gradient is stolen by
//!   `AccumulateGrad` (no copy);
//! - autocast: low-precision ops cast their float inputs (parameters through the autocast cache,
//!   alive until the autocast block exits), fp32 ops cast half inputs up;
//! - non-reentrant checkpointing keeps only a region's inputs, and recomputes the region's forward
//!   when backward reaches it;
//! - the optimizer creates its state at the first step and allocates its foreach temporaries.

use std::sync::Arc;

use serde::Serialize;
use smallvec::SmallVec;

use crate::dtype::{DType, Precision};
use crate::fasthash::IntMap;
use crate::ir::{Graph, InitTemporary, ModuleId, ParamId, ParamKind, Shape, Task, TensorId};
use crate::ops::{
    Alias, Autocast, GradIn, GradOrder, LogSoftmax, NllLoss, Op, OpCtx, Saved, Scratch,
    SdpaBackend, TensorMeta,
};
use crate::optim::{LoopStep, Optimizer, StateInit, StepTemporaries};

mod memory;

use memory::{MemoryFeed, MemoryModel, ModelThread, Msg};

/// Training step or inference pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The canonical training loop.
    Train,
    /// `model.eval()` and `torch.no_grad()` forwards.
    Infer,
    /// `model.generate(...)` under `no_grad` (the graph is the whole generation: prefill and
    /// decode steps with the KV cache); simulated like [`Mode::Infer`].
    Generate,
}

/// What to checkpoint (`torch.utils.checkpoint`, non-reentrant).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checkpoint {
    /// `checkpoint(module, x)` around one module call (every call of it).
    Module(String),
    /// `checkpoint_sequential(module, segments, x)`: all segments but the last are checkpointed.
    Sequential {
        /// The `nn.Sequential`.
        module: String,
        /// Number of segments.
        segments: u32,
    },
}

/// Everything that decides a simulated step besides the graph.
#[derive(Debug, Clone)]
pub struct StepConfig {
    /// Train or infer.
    pub mode: Mode,
    /// Precision.
    pub precision: Precision,
    /// Optimizer (training only).
    pub optimizer: Optimizer,
    /// Loop iterations (2 shows the steady state).
    pub iterations: u32,
    /// Checkpointed modules.
    pub checkpoint: Vec<Checkpoint>,
    /// Keep the event stream (for traces and the "why" of each phase).
    pub record_events: bool,
    /// `optimizer.zero_grad(set_to_none=...)`: with `false` the gradients stay allocated and are
    /// zeroed in place (backward then accumulates into them).
    pub zero_grad_set_to_none: bool,
    /// `del out, loss` at the end of each iteration, so the previous output is gone before the
    /// next forward.
    pub free_output: bool,
    /// The bytes the caching allocator's segments may take: the GPU's memory less the CUDA
    /// context and workspaces (`None`: a GPU with room to spare, as the truth measurements).
    /// Past it the allocator frees its cached segments and retries, as PyTorch does before
    /// raising out-of-memory ([`crate::allocator::CachingAllocator::set_reserved_limit`]).
    pub reserved_limit: Option<u64>,
}

impl Default for StepConfig {
    fn default() -> Self {
        StepConfig {
            mode: Mode::Train,
            precision: Precision::Fp32,
            optimizer: Optimizer::SgdMomentum,
            iterations: 2,
            checkpoint: Vec::new(),
            record_events: false,
            zero_grad_set_to_none: true,
            free_output: false,
            reserved_limit: None,
        }
    }
}

/// What a block of memory is, for the breakdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Model parameters.
    Parameters,
    /// Model buffers (running statistics).
    Buffers,
    /// `p.grad`.
    Gradients,
    /// Optimizer state.
    OptimizerStates,
    /// Tensors created in forward and loss (saved for backward, or transient).
    Activations,
    /// Forward recomputation inside backward (checkpointing).
    Recomputed,
    /// Backward temporaries, incoming gradients, optimizer-step temporaries.
    Temporaries,
    /// The batch.
    Inputs,
    /// The key/value cache a generation keeps across forwards.
    KvCache,
}

impl Category {
    /// All categories, in report order.
    pub const ALL: [Category; 9] = [
        Category::Parameters,
        Category::Buffers,
        Category::Gradients,
        Category::OptimizerStates,
        Category::Activations,
        Category::Recomputed,
        Category::Temporaries,
        Category::Inputs,
        Category::KvCache,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

/// Allocated bytes per category (allocator block sizes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Breakdown(pub [u64; 9]);

impl Breakdown {
    /// Bytes of one category.
    pub fn get(&self, c: Category) -> u64 {
        self.0[c.index()]
    }
    /// Sum over categories.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

/// What made a tensor: an op kind, or the gradient of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Label {
    /// The op kind or role (`Conv2d`, `exp_avg`, `input`).
    pub what: &'static str,
    /// Whether this is the gradient computed by that op's backward.
    pub grad: bool,
}

impl Label {
    /// A plain label.
    pub fn new(what: &'static str) -> Self {
        Label { what, grad: false }
    }

    /// The gradient produced by the backward of `what`.
    pub fn grad_of(what: &'static str) -> Self {
        Label { what, grad: true }
    }
}

impl std::fmt::Display for Label {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.grad {
            write!(f, "grad of {}", self.what)
        } else {
            f.write_str(self.what)
        }
    }
}

/// Memory of one phase of the loop.
#[derive(Debug, Clone)]
pub struct PhaseStats {
    /// `model`, `it1.forward`, ...
    pub name: String,
    /// `memory_allocated()` at the end of the phase.
    pub allocated_after: u64,
    /// Highest `memory_allocated()` within the phase (starting value included).
    pub peak_allocated: u64,
    /// `memory_reserved()` at the end of the phase.
    pub reserved_after: u64,
    /// Highest `memory_reserved()` within the phase.
    pub peak_reserved: u64,
    /// Bytes allocated and freed during the phase (counts of allocator blocks).
    pub allocated_bytes: u64,
    /// Bytes freed during the phase.
    pub freed_bytes: u64,
    /// Breakdown at the phase's peak.
    pub breakdown_at_peak: Breakdown,
}

/// One allocation or free.
#[derive(Debug, Clone)]
pub struct Event {
    /// Index into [`Simulation::phases`].
    pub phase: u16,
    /// Allocation (`true`) or free.
    pub alloc: bool,
    /// Storage id.
    pub storage: u32,
    /// Exact bytes requested.
    pub bytes: u64,
    /// Allocator block bytes.
    pub block: u64,
    /// Category.
    pub category: Category,
    /// What made it (`Conv2d`, `grad of Conv2d`, `exp_avg`).
    pub label: Label,
    /// The module whose op made it.
    pub module: Option<ModuleId>,
    /// `memory_allocated()` after the event.
    pub allocated: u64,
    /// `memory_reserved()` after the event.
    pub reserved: u64,
}

/// A tensor alive at the peak.
#[derive(Debug, Clone)]
pub struct LiveTensor {
    /// Block bytes.
    pub bytes: u64,
    /// Shape.
    pub shape: Shape,
    /// Dtype.
    pub dtype: DType,
    /// Category.
    pub category: Category,
    /// What made it.
    pub label: Label,
    /// Module path (empty when none).
    pub module: String,
}

/// Per-module-call figures for the layer table (first iteration). A row names its module, op and
/// output by id; [`name`](Self::name), [`op`](Self::op) and [`output_shape`](Self::output_shape)
/// read them from the simulated graph (a 70B model's table has 1,285 rows, and copying three
/// strings into each was 5% of its estimate).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerStats {
    /// The module called.
    pub module: ModuleId,
    /// The op's kind when the row is a run of functional ops inside a container (a residual
    /// `+=`): the one that saved the most for backward, else the first; `None` when the
    /// module's class names the row.
    pub functional_op: Option<&'static str>,
    /// The first output of the call's last op that had one (its shape is the row's output shape).
    pub output: Option<TensorId>,
    /// Parameters owned directly by the module (first call only, 0 after).
    pub parameters: u64,
    /// Bytes that autograd saved for backward in this call (first saver of a storage counts it).
    pub saved_bytes: u64,
}

impl LayerStats {
    /// The module path.
    pub fn name<'g>(&self, graph: &'g Graph) -> &'g str {
        graph.module_path(self.module)
    }

    /// The module class, or the functional op's kind.
    pub fn op<'g>(&self, graph: &'g Graph) -> &'g str {
        match self.functional_op {
            Some(kind) => kind,
            None => &graph.modules[self.module.0 as usize].type_name,
        }
    }

    /// The output shape of the call (empty when none of its ops had an output).
    pub fn output_shape<'g>(&self, graph: &'g Graph) -> &'g [u64] {
        self.output.map_or(&[], |t| &graph.tensor(t).shape)
    }
}

/// The result of a simulation.
#[derive(Debug, Clone)]
pub struct Simulation {
    /// Per phase, in order.
    pub phases: Vec<PhaseStats>,
    /// `max_memory_allocated()`.
    pub peak_allocated: u64,
    /// `max_memory_reserved()`.
    pub peak_reserved: u64,
    /// A request found no room under [`StepConfig::reserved_limit`], even with the allocator's
    /// cache released: PyTorch would raise out-of-memory there.
    pub out_of_memory: bool,
    /// Index of the phase where the allocated peak is first reached.
    pub peak_phase: usize,
    /// Breakdown at the overall peak.
    pub breakdown_at_peak: Breakdown,
    /// The largest tensors alive at the overall peak (largest first).
    pub live_at_peak: Vec<LiveTensor>,
    /// Layer table.
    pub layers: Vec<LayerStats>,
    /// Events, when asked for.
    pub events: Vec<Event>,
    /// Attention backends used.
    pub sdpa_backends: Vec<SdpaBackend>,
    /// Exact bytes of parameters, buffers, gradients (after backward) and optimizer states.
    pub parameter_bytes: u64,
    /// Exact bytes of buffers.
    pub buffer_bytes: u64,
    /// Exact bytes of gradients after the first backward.
    pub gradient_bytes: u64,
    /// Exact bytes of optimizer state.
    pub optimizer_state_bytes: u64,
    /// Segments the allocator created.
    pub segments: u64,
}

/// An error in the step configuration (the graph itself is already checked).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// `--checkpoint` names a module the model does not have.
    #[error(
        "--checkpoint {name}: the model has no module `{name}`; top-level modules are: {available}"
    )]
    UnknownCheckpointModule {
        /// The name given.
        name: String,
        /// The top-level modules.
        available: String,
    },
    /// The graph breaks an invariant the simulator relies on (a front-end bug or a corrupt model).
    #[error("invalid graph: {0}")]
    InvalidGraph(String),
    /// `--checkpoint m:N` on a module that is not a sequence of children.
    #[error("--checkpoint {name}:{segments}: {reason}")]
    BadSegments {
        /// The module.
        name: String,
        /// Requested segments.
        segments: u32,
        /// Why not.
        reason: String,
    },
}

// ---------------------------------------------------------------------------------------------
// internal state

type Rt = u32;

/// A shape in [`Shapes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ShapeId(u32);

/// Every shape the simulation uses, stored once: runtime tensors, storages and tape entries refer
/// to their sizes by [`ShapeId`], so copying a tensor's metadata never allocates (cloning small
/// `Vec<u64>`s was the largest share of an estimate's time). The first entries are the graph's
/// tensors (`ShapeId(t)` is tensor `t`'s shape), then its parameters (see [`Shapes::param`]).
#[derive(Debug, Default)]
struct Shapes {
    dims: Vec<u64>,
    /// (first dimension in `dims`, number of dimensions, number of elements)
    spans: Vec<(u32, u32, u64)>,
    params_from: u32,
}

impl Shapes {
    fn for_graph(g: &Graph) -> Self {
        // room for the shapes the run adds (casts, temporaries, scratch buffers, optimizer
        // states: about one per node and parameter at most, of about three dimensions), so that
        // the arena is seldom copied as it grows, and not much more: what is reserved and never
        // touched still widens the heap (a copy is only slower, never wrong)
        let preloaded = g.tensors.len() + g.params.len();
        let extra = g.nodes.len() + g.params.len() + 64;
        let mut s = Shapes {
            dims: Vec::with_capacity(3 * (preloaded + extra)),
            spans: Vec::with_capacity(preloaded + extra),
            params_from: 0,
        };
        for t in &g.tensors {
            s.add(&t.shape);
        }
        s.params_from = s.spans.len() as u32;
        for p in &g.params {
            s.add(&p.shape);
        }
        s
    }

    fn add(&mut self, shape: &[u64]) -> ShapeId {
        self.spans.push((
            self.dims.len() as u32,
            shape.len() as u32,
            crate::ir::numel(shape),
        ));
        self.dims.extend_from_slice(shape);
        ShapeId(self.spans.len() as u32 - 1)
    }

    /// Whether two tensors have the same dtype and sizes.
    fn same(&self, a: Meta, b: Meta) -> bool {
        a.dtype == b.dtype && (a.shape == b.shape || self.get(a.shape) == self.get(b.shape))
    }

    fn get(&self, id: ShapeId) -> &[u64] {
        let (start, len, _) = self.spans[id.0 as usize];
        &self.dims[start as usize..(start + len) as usize]
    }

    /// The shape of graph tensor `t`.
    fn tensor(t: TensorId) -> ShapeId {
        ShapeId(t.0)
    }

    /// The shape of parameter `p`.
    fn param(&self, p: ParamId) -> ShapeId {
        ShapeId(self.params_from + p.0)
    }

    /// Exact storage bytes of a tensor.
    fn bytes(&self, meta: Meta) -> u64 {
        self.spans[meta.shape.0 as usize].2 * meta.dtype.size()
    }
}

/// Shape and dtype of a runtime tensor (a [`TensorMeta`] whose sizes live in [`Shapes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Meta {
    shape: ShapeId,
    dtype: DType,
}

#[derive(Debug, Clone)]
struct Storage {
    bytes: u64,
    refs: u32,
    category: Category,
    // a `Label`'s two fields, side by side with the other small ones: a storage is 48 bytes
    // rather than 56 (one is written for every allocation)
    label_what: &'static str,
    label_grad: bool,
    module: Option<ModuleId>,
    meta: Meta,
    alive: bool,
    saved: bool,
}

// the comment on `Storage::label_what` holds
const _: () = assert!(std::mem::size_of::<Storage>() == 48);

#[derive(Debug, Clone, Copy)]
struct RtTensor {
    storage: u32,
    meta: Meta,
    requires_grad: bool,
    param: Option<ParamId>,
}

/// A range of one of the simulation's shared lists (`Sim::tape_inputs`, `Plans::metas`, ...):
/// tape nodes and op plans keep their lists there instead of in vectors of their own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Span {
    start: u32,
    len: u32,
}

impl Span {
    /// The span of the items pushed onto a list since it had `start` items.
    fn since(start: usize, list_len: usize) -> Self {
        Span {
            start: start as u32,
            len: (list_len - start) as u32,
        }
    }

    fn range(self) -> std::ops::Range<usize> {
        self.start as usize..(self.start + self.len) as usize
    }

    fn is_empty(self) -> bool {
        self.len == 0
    }
}

#[derive(Debug, Clone, Copy)]
struct TapeNode {
    label: Label,
    module: Option<ModuleId>,
    /// rt ids of the inputs (activations then parameters) with their gradient rule, in
    /// `Sim::tape_inputs`
    inputs: Span,
    /// in `Sim::tape_outputs`
    outputs: Span,
    /// storages kept for backward, in `Sim::tape_saved`
    saved: Span,
    /// backward temporaries (bytes), in `Plans::bytes`
    temporaries: Span,
    /// the backward kernel's scratch program (run before the gradients), in `Plans::scratch`
    scratch: Span,
    /// the order backward makes the input gradients in (`mm`: mat2 before mat1)
    grad_order: GradOrder,
    region: Option<usize>,
    /// whether autograd saved tensors for it: in a checkpointed region, the first such node
    /// backward runs triggers the recomputation (nodes without saved tensors run before it)
    saves: bool,
    /// gradients are computed like the output, then reduced / cast (`Op::grads_like_output`)
    grads_like_output: bool,
    /// the first inputs whose gradients the backward kernel always makes (`Op::kernel_grads`)
    kernel_grads: u8,
}

/// Buffers [`Sim::call`] reuses from one op call to the next (taken out of the `Sim` for the call).
#[derive(Debug, Default)]
struct CallScratch {
    eff: Vec<Rt>,
    eff_params: Vec<Rt>,
    casts: Vec<Rt>,
    extras: Vec<u32>,
    made: Vec<Option<u32>>,
    /// the extras made before the outputs (`Op::extras_made_first`), until they join `extras`
    early_extras: Vec<u32>,
    /// what autograd keeps for backward (the plan's saved list less what only a frozen input's
    /// gradient would need)
    kept: Vec<Saved>,
    /// the storages this call saves for backward (moved onto the tape's shared list)
    saved: Vec<u32>,
    /// scratch allocations autograd keeps (`Saved::Scratch`), held past the program's end
    scratch_saved: Vec<(usize, u32)>,
}

/// What an op's rules answered for one set of runtime inputs (shapes and dtypes after autocast,
/// whether each requires grad, whether autograd records the call): asked at the first call, reused
/// by every later call of the same op object with the same inputs (the second iteration,
/// recomputation, and the layers a front-end recorded once and copied, which share their op
/// objects). The lists are spans of [`Plans`]' vectors.
#[derive(Debug, Clone, Copy)]
struct OpPlan {
    /// the metadata of the inputs, then of the parameters (in `Plans::keys`)
    key: Span,
    n_inputs: u32,
    /// bit 0: autograd records the call; bit 1: it keeps the saved tensors
    /// (`OpCtx::keeps_saved`); bit 2: a recomputation's (`OpCtx::saved_unpacked`); one byte
    /// keeps the plan, copied per call, at its size
    recording: u8,
    /// the next plan of the same op object
    next: Option<u32>,
    /// in `Plans::metas`
    outputs: Span,
    alias: Alias,
    /// forward extras (or inference extras when not recording), in `Plans::metas`
    extras: Span,
    /// how many of the last extras are made before the outputs (`Op::extras_made_first`; a u8
    /// keeps the plan, copied per call, at its size)
    early_extras: u8,
    /// the first inputs whose gradients the backward kernel always makes (`Op::kernel_grads`)
    kernel_grads: u8,
    /// in `Plans::bytes`
    forward_temporaries: Span,
    /// in `Plans::scratch`
    forward_scratch: Span,
    sdpa: Option<SdpaBackend>,
    /// what autograd saves, each with the input whose gradient alone needs it (in
    /// `Plans::saved`); empty when not recording
    saved: Span,
    /// the gradient rule of each input (in `Plans::grads`)
    grads: Span,
    /// the gradient rule of each parameter (in `Plans::grads`); empty: new tensors
    param_grads: Span,
    /// in `Plans::bytes`
    backward_temporaries: Span,
    /// in `Plans::scratch`
    backward_scratch: Span,
}

/// Every [`OpPlan`] of a simulation.
#[derive(Debug, Default)]
struct Plans {
    list: Vec<OpPlan>,
    /// (metadata, requires grad) of each input, then of each parameter
    keys: Vec<(Meta, bool)>,
    metas: Vec<Meta>,
    bytes: Vec<u64>,
    scratch: Vec<Scratch>,
    saved: Vec<(Saved, Option<usize>)>,
    grads: Vec<GradIn>,
    /// for each graph node, the first node with the same op object
    rep_of_node: Vec<u32>,
    /// for each representative node, its newest plan
    first: Vec<Option<u32>>,
    /// for each representative node, its op's fixed answers (asked once, not per call)
    info: Vec<OpInfo>,
    /// `TensorMeta`s for the questions to the ops, whose shape vectors keep their capacity
    in_metas: Vec<TensorMeta>,
    p_metas: Vec<TensorMeta>,
    out_metas: Vec<TensorMeta>,
    in_rg: Vec<bool>,
}

impl Plans {
    fn for_graph(g: &Graph) -> Self {
        // op objects by address
        let mut rep: IntMap<usize, u32> =
            IntMap::with_capacity_and_hasher(g.nodes.len(), Default::default());
        let rep_of_node: Vec<u32> = g
            .nodes
            .iter()
            .enumerate()
            .map(|(n, node)| {
                let addr = Arc::as_ptr(&node.op).cast::<()>() as usize;
                *rep.entry(addr).or_insert(n as u32)
            })
            .collect();
        let info = g
            .nodes
            .iter()
            .zip(&rep_of_node)
            .enumerate()
            .map(|(n, (node, &r))| {
                if r as usize == n {
                    OpInfo::of(&*node.op)
                } else {
                    OpInfo::default()
                }
            })
            .collect();
        Plans {
            rep_of_node,
            first: vec![None; g.nodes.len()],
            info,
            ..Plans::default()
        }
    }
}

/// What `call_into` asks an op whatever its inputs (the `Op` trait's constant answers).
#[derive(Debug, Clone, Copy)]
struct OpInfo {
    kind: &'static str,
    autocast: Autocast,
    identity_in_eval: bool,
    differentiable: bool,
    is_kv_cache: bool,
    recasts_param: bool,
    leaf_requires_grad: bool,
    grad_order: GradOrder,
    grads_like_output: bool,
    extras_first: bool,
    replaced_input: Option<u8>,
    view_is_input: bool,
}

impl Default for OpInfo {
    fn default() -> Self {
        OpInfo {
            kind: "",
            autocast: Autocast::Unlisted,
            identity_in_eval: false,
            differentiable: false,
            is_kv_cache: false,
            recasts_param: false,
            leaf_requires_grad: false,
            grad_order: GradOrder::LeftToRight,
            grads_like_output: false,
            extras_first: false,
            replaced_input: None,
            view_is_input: false,
        }
    }
}

impl OpInfo {
    fn of(op: &dyn Op) -> Self {
        OpInfo {
            kind: op.kind(),
            autocast: op.autocast(),
            identity_in_eval: op.identity_in_eval(),
            differentiable: op.differentiable(),
            is_kv_cache: op.is_kv_cache(),
            recasts_param: op.recasts_param_to_input_1(),
            leaf_requires_grad: op.leaf_requires_grad(),
            grad_order: op.grad_order(),
            grads_like_output: op.grads_like_output(),
            extras_first: op.extras_before_outputs(),
            replaced_input: op.input_replaced_by_early_extras().map(|i| i as u8),
            view_is_input: op.view_is_its_input(),
        }
    }
}

/// Fills the first entries of `buf` with `metas` (reusing their shape vectors); returns how many.
fn fill_metas(
    buf: &mut Vec<TensorMeta>,
    metas: impl Iterator<Item = Meta>,
    shapes: &Shapes,
) -> usize {
    let mut n = 0;
    for m in metas {
        let dims = shapes.get(m.shape);
        match buf.get_mut(n) {
            Some(t) => {
                t.shape.clear();
                t.shape.extend_from_slice(dims);
                t.dtype = m.dtype;
            }
            None => buf.push(TensorMeta::new(dims.to_vec(), m.dtype)),
        }
        n += 1;
    }
    n
}

/// Buffers the backward pass reuses from one tape node to the next.
#[derive(Debug, Default)]
struct BackwardScratch {
    incoming: Vec<Option<u32>>,
    temps: Vec<u32>,
    produced: Vec<(Rt, u32)>,
    /// (index in produced, input index, the input's meta) of gradients `validate_outputs`
    /// reduces or casts to their input's
    to_cast: Vec<(usize, usize, Meta)>,
    /// the same for gradients narrowed to their input's shape after the node
    /// ([`GradIn::Narrowed`])
    narrowed: Vec<(usize, usize, Meta)>,
    made_for: Vec<Option<u32>>,
}

/// A non-parameter leaf that requires grad, with the `.grad` backward gave it.
#[derive(Debug, Clone)]
struct GraphLeaf {
    iteration: u32,
    rt: Rt,
    grad: Option<u32>,
}

#[derive(Debug, Clone)]
struct Region {
    first: usize,
    end: usize,
    inputs: Vec<TensorId>,
    /// the region's inputs as the checkpoint frame holds them (graph tensor, rt tensor)
    frame: Vec<(TensorId, Rt)>,
    recomputed: bool,
    lowest_tape: Option<usize>,
    /// the last node of the region whose autograd node saves a tensor: non-reentrant
    /// checkpointing stops recomputing once every saved tensor is back (early stop)
    last_saving: Option<usize>,
}

struct Sim<'g> {
    g: &'g Graph,
    cfg: &'g StepConfig,
    /// the allocator model and its accounting, told of every allocation, free and phase
    mem: MemoryFeed,
    storages: Vec<Storage>,
    rts: Vec<RtTensor>,
    shapes: Shapes,
    tape: Vec<TapeNode>,
    tape_inputs: Vec<(Option<Rt>, GradIn, Meta)>,
    tape_outputs: Vec<Rt>,
    tape_saved: Vec<u32>,
    plans: Plans,
    /// boxed so that taking it out for a call moves a pointer, not the buffers' headers
    scratch: Option<Box<CallScratch>>,
    backward_scratch: BackwardScratch,
    /// reused by `forward_nodes` for each node's inputs and outputs
    node_inputs: Vec<Rt>,
    node_outputs: Vec<Rt>,
    grad_buf: Vec<Option<u32>>,
    param_rt: Vec<Rt>,
    param_grad: Vec<Option<u32>>,
    opt_state: Vec<SmallVec<[u32; 2]>>,
    /// the phases' names, in order (the memory model keeps their figures)
    phase_names: Vec<String>,
    module_params: Vec<u64>,
    module_listed: Vec<bool>,
    module_has_children: Vec<bool>,
    last_layer_module: Option<ModuleId>,
    /// the bytes saved by the op that names the layer table's last row (a functional one)
    row_op_saved: u64,
    scaler_initialised: bool,
    /// which parameters had a `.grad` when the current backward started
    grad_existed_before_backward: Vec<bool>,
    /// the tape entry each graph node recorded in this iteration's forward
    tape_of_node: Vec<Option<usize>>,
    // forward bookkeeping
    release_after: ReleaseSchedule,
    /// `Graph::dropped_graphs` by the tensor whose release drops them: (tensor, index), sorted
    dropped_after: Vec<(u32, usize)>,
    /// the input a graph node's op may drop once its early extras exist (its last use, held by
    /// no one else: `Op::input_replaced_by_early_extras`), and whether the call dropped it
    early_release: Option<Rt>,
    early_released: bool,
    region_of_node: Vec<Option<usize>>,
    regions: Vec<Region>,
    autocast_cache: Vec<(ParamId, Rt)>,
    /// the entry of `autocast_cache` for each parameter, if any
    autocast_cached: Vec<Option<Rt>>,
    /// the node a running recomputation stops at
    recompute_stop: Option<usize>,
    grad_enabled: bool,
    training: bool,
    in_backward: bool,
    recomputing: bool,
    layers: Option<Vec<LayerStats>>,
    sdpa: Vec<SdpaBackend>,
    gradient_bytes: u64,
    first_layers: Vec<LayerStats>,
    /// the iteration running (1-based)
    iteration: u32,
    /// leaves that require grad and are not parameters (see `Op::leaf_requires_grad` and
    /// `Graph::grad_leaves`), kept by their iteration's autograd graph until its loss is released
    graph_leaves: Vec<GraphLeaf>,
}

const NO_GRAD: GradIn = GradIn::None;

/// A `tape_saved` slot whose tensor a backward program released early ([`Scratch::ReleaseSaved`]).
const RELEASED: u32 = u32::MAX;

impl<'g> Sim<'g> {
    fn phase(&mut self, name: &str) {
        self.phase_names.push(name.to_string());
        self.mem.send(Msg::Phase);
    }

    /// The largest tensors alive at the overall peak, as `model` found them.
    fn live_at_peak(&self, model: &memory::MemoryModel) -> Vec<LiveTensor> {
        model
            .largest_live_at_peak(|sid| self.storages[sid as usize].bytes)
            .into_iter()
            .map(|(bytes, sid)| {
                let s = &self.storages[sid as usize];
                LiveTensor {
                    bytes,
                    shape: self.shapes.get(s.meta.shape).to_vec(),
                    dtype: s.meta.dtype,
                    category: s.category,
                    label: Label {
                        what: s.label_what,
                        grad: s.label_grad,
                    },
                    module: s
                        .module
                        .map(|m| self.g.module_path(m).to_string())
                        .unwrap_or_default(),
                }
            })
            .collect()
    }

    /// The metadata of a tensor of `shape` and `dtype` (the shape is stored in the arena).
    fn meta(&mut self, shape: &[u64], dtype: DType) -> Meta {
        Meta {
            shape: self.shapes.add(shape),
            dtype,
        }
    }

    /// [`meta`](Self::meta) for a shape that is often the same as `like`'s (optimizer states of a
    /// parameter): shares `like` when it is.
    fn meta_like(&mut self, like: ShapeId, shape: &[u64], dtype: DType) -> Meta {
        if self.shapes.get(like) == shape {
            Meta { shape: like, dtype }
        } else {
            self.meta(shape, dtype)
        }
    }

    /// Allocates a storage with one reference.
    fn new_storage(
        &mut self,
        meta: Meta,
        category: Category,
        label: Label,
        module: Option<ModuleId>,
    ) -> u32 {
        let bytes = self.shapes.bytes(meta);
        self.storages.push(Storage {
            bytes,
            refs: 1,
            category,
            label_what: label.what,
            label_grad: label.grad,
            module,
            meta,
            alive: true,
            saved: false,
        });
        self.mem.send(Msg::Alloc { bytes, category });
        self.storages.len() as u32 - 1
    }

    /// A storage of `bytes` bytes (a temporary or scratch buffer: a `[bytes]` uint8 tensor).
    fn new_bytes(
        &mut self,
        bytes: u64,
        category: Category,
        label: Label,
        module: Option<ModuleId>,
    ) -> u32 {
        let meta = self.meta(&[bytes], DType::U8);
        self.new_storage(meta, category, label, module)
    }

    fn incref(&mut self, sid: u32) {
        self.storages[sid as usize].refs += 1;
    }

    fn decref(&mut self, sid: u32) {
        let s = &mut self.storages[sid as usize];
        debug_assert!(s.refs > 0, "storage {sid} over-released");
        s.refs = s.refs.saturating_sub(1);
        if s.refs == 0 && s.alive {
            s.alive = false;
            self.mem.send(Msg::Free(sid));
        }
    }

    fn new_rt(&mut self, storage: u32, meta: Meta, requires_grad: bool) -> Rt {
        self.rts.push(RtTensor {
            storage,
            meta,
            requires_grad,
            param: None,
        });
        self.grad_buf.push(None);
        self.rts.len() as Rt - 1
    }

    /// A fresh tensor (new storage) held once.
    fn fresh(
        &mut self,
        meta: Meta,
        category: Category,
        label: Label,
        module: Option<ModuleId>,
        rg: bool,
    ) -> Rt {
        let sid = self.new_storage(meta, category, label, module);
        self.new_rt(sid, meta, rg)
    }

    fn release_rt(&mut self, r: Rt) {
        let sid = self.rts[r as usize].storage;
        self.decref(sid);
    }

    fn forward_category(&self) -> Category {
        if self.recomputing {
            Category::Recomputed
        } else if self.in_backward {
            Category::Temporaries
        } else {
            Category::Activations
        }
    }

    /// Casts `r` to `dtype` (a `_to_copy` with a `ToCopyBackward0` node); parameters go through
    /// the autocast weight cache.
    fn cast(&mut self, r: Rt, dtype: DType, module: Option<ModuleId>, cacheable: bool) -> Rt {
        let param = self.rts[r as usize].param;
        if cacheable {
            if let Some(p) = param {
                if let Some(c) = self.autocast_cached[p.0 as usize] {
                    self.incref(self.rts[c as usize].storage);
                    return c;
                }
            }
        }
        let src = self.rts[r as usize];
        let meta = Meta {
            shape: src.meta.shape,
            dtype,
        };
        let rg = src.requires_grad && self.grad_enabled;
        let c = self.fresh(
            meta,
            self.forward_category(),
            Label::new("autocast cast"),
            module,
            rg,
        );
        if rg && !self.recomputing {
            self.tape_inputs.push((Some(r), GradIn::New, src.meta));
            self.tape_outputs.push(c);
            let saved = self.tape_saved.len();
            self.tape.push(TapeNode {
                label: Label::new("cast"),
                module,
                inputs: Span::since(self.tape_inputs.len() - 1, self.tape_inputs.len()),
                outputs: Span::since(self.tape_outputs.len() - 1, self.tape_outputs.len()),
                saved: Span::since(saved, saved),
                temporaries: Span::default(),
                scratch: Span::default(),
                grad_order: GradOrder::LeftToRight,
                region: None,
                saves: false,
                grads_like_output: false,
                kernel_grads: 0,
            });
        }
        if let (true, Some(p), true) = (cacheable, param, src.requires_grad) {
            // the cache keeps its own reference until the autocast block exits
            self.incref(self.rts[c as usize].storage);
            self.autocast_cache.push((p, c));
            self.autocast_cached[p.0 as usize] = Some(c);
        }
        c
    }

    /// Runs a kernel's scratch program (a span of `Plans::scratch`); leaves in `made` what it
    /// left allocated. `incoming`: a backward node's incoming gradients, which
    /// [`Scratch::DropIncoming`] releases (empty in forward). Stops at [`Scratch::Outputs`] and
    /// returns where to go on once the outputs exist ([`Sim::run_scratch_from`]).
    fn run_scratch(
        &mut self,
        program: Span,
        category: Category,
        module: Option<ModuleId>,
        made: &mut Vec<Option<u32>>,
        incoming: &mut [Option<u32>],
        saved: Span,
    ) -> Option<usize> {
        made.clear();
        self.run_scratch_from(program.range(), (category, module), made, incoming, saved)
    }

    /// Runs the steps `steps` of `Plans::scratch`, adding to `made` (see
    /// [`run_scratch`](Self::run_scratch)).
    fn run_scratch_from(
        &mut self,
        steps: std::ops::Range<usize>,
        (category, module): (Category, Option<ModuleId>),
        made: &mut Vec<Option<u32>>,
        incoming: &mut [Option<u32>],
        saved: Span,
    ) -> Option<usize> {
        for k in steps {
            match self.plans.scratch[k] {
                Scratch::Alloc { bytes, what } => made.push(Some(self.new_bytes(
                    bytes,
                    category,
                    Label::new(what),
                    module,
                ))),
                Scratch::Free(i) => {
                    if let Some(sid) = made.get_mut(i).and_then(Option::take) {
                        self.decref(sid);
                    }
                }
                Scratch::DropIncoming => {
                    for sid in incoming.iter_mut().filter_map(Option::take) {
                        self.decref(sid);
                    }
                }
                Scratch::ReleaseSaved(i) if i < saved.len as usize => {
                    let k = saved.start as usize + i;
                    let sid = std::mem::replace(&mut self.tape_saved[k], RELEASED);
                    if sid != RELEASED {
                        self.decref(sid);
                    }
                }
                Scratch::ReleaseSaved(_) => {}
                Scratch::Outputs => return Some(k + 1),
            }
        }
        None
    }

    /// Releases what [`run_scratch`](Self::run_scratch) left allocated.
    fn release_scratch(&mut self, made: &mut Vec<Option<u32>>) {
        for sid in made.drain(..).flatten() {
            self.decref(sid);
        }
    }

    /// Allocates the extra results `range` of `Plans::metas` (a call's, or the part of them made
    /// before its outputs) into `extras`.
    fn make_extras(
        &mut self,
        range: std::ops::Range<usize>,
        cat: Category,
        label: Label,
        module: Option<ModuleId>,
        extras: &mut Vec<u32>,
    ) {
        for k in range {
            let meta = self.plans.metas[k];
            extras.push(self.new_storage(meta, cat, label, module));
        }
    }

    fn clear_autocast_cache(&mut self) {
        for (p, c) in std::mem::take(&mut self.autocast_cache) {
            self.autocast_cached[p.0 as usize] = None;
            self.release_rt(c);
        }
    }

    /// Runs one op call. `inputs` are rt tensors (held by the caller); returns the outputs, each
    /// held once. Casts made for the call are released before returning.
    fn call(
        &mut self,
        op: &Arc<dyn Op>,
        inputs: &[Rt],
        params: &[ParamId],
        module: Option<ModuleId>,
        graph_node: Option<usize>,
        region: Option<usize>,
    ) -> Vec<Rt> {
        let mut outs = Vec::new();
        self.call_into(op, inputs, params, module, graph_node, region, &mut outs);
        outs
    }

    /// [`call`](Self::call) writing the outputs into `outs` (a buffer the caller reuses).
    #[allow(clippy::too_many_arguments)]
    fn call_into(
        &mut self,
        op: &Arc<dyn Op>,
        inputs: &[Rt],
        params: &[ParamId],
        module: Option<ModuleId>,
        graph_node: Option<usize>,
        region: Option<usize>,
        outs: &mut Vec<Rt>,
    ) {
        outs.clear();
        let info = match graph_node {
            Some(n) => self.plans.info[self.plans.rep_of_node[n] as usize],
            None => OpInfo::of(&**op),
        };
        if !self.training && info.identity_in_eval {
            let r = inputs[0];
            self.incref(self.rts[r as usize].storage);
            outs.push(r);
            return;
        }
        if info.recasts_param {
            self.recast_param(inputs, module);
        }
        let mut sc = self.scratch.take().unwrap_or_default();
        // 1. autocast
        sc.eff.clear();
        sc.eff.extend_from_slice(inputs);
        sc.eff_params.clear();
        sc.eff_params
            .extend(params.iter().map(|p| self.param_rt[p.0 as usize]));
        sc.casts.clear();
        if let Some(low) = self.cfg.precision.autocast_dtype() {
            let class = info.autocast;
            let target = match class {
                Autocast::LowerPrecision => Some(low),
                Autocast::Fp32 | Autocast::Fp32SetOptDtype => Some(DType::F32),
                Autocast::Promote => sc
                    .eff
                    .iter()
                    .chain(sc.eff_params.iter())
                    .map(|&r| self.rts[r as usize].meta.dtype)
                    .filter(|d| d.is_float())
                    .reduce(DType::promote),
                Autocast::Unlisted => None,
            };
            if let Some(t) = target {
                // the C++ autocast wrappers cast their arguments right to left (GCC's evaluation
                // order): bias, weight, then the activations, last first (truth traces)
                for slot in sc
                    .eff_params
                    .iter_mut()
                    .rev()
                    .chain(sc.eff.iter_mut().rev())
                {
                    let d = self.rts[*slot as usize].meta.dtype;
                    let castable = match class {
                        Autocast::Fp32 => d == DType::F16 || d == DType::BF16,
                        // float16 goes in as it is: `half_to_float`
                        Autocast::Fp32SetOptDtype => d == DType::BF16,
                        _ => d.is_float() && d != t,
                    };
                    if castable && d != t {
                        let cacheable = class == Autocast::LowerPrecision;
                        let c = self.cast(*slot, t, module, cacheable);
                        sc.casts.push(c);
                        *slot = c;
                    }
                }
            }
        }
        let any_rg = sc
            .eff
            .iter()
            .chain(sc.eff_params.iter())
            .any(|&r| self.rts[r as usize].requires_grad);
        let records = self.grad_enabled && any_rg && info.differentiable;
        // 2. the op's answers for these inputs
        // a checkpointed region's first forward records the op but drops what it saves
        let keeps_saved = records && (region.is_none() || self.recomputing);
        // the backward of a checkpointed region's node runs on what its recomputation saves
        let unpacked = records && region.is_some();
        let pi = self.plan(op, graph_node, &sc, (records, keeps_saved, unpacked));
        let plan = self.plans.list[pi];
        if info.view_is_input && plan.alias == Alias::View(0) && sc.casts.is_empty() {
            // `x.to(dtype)` of an `x` in that dtype returns `x` itself: no tensor, no autograd
            // node, so its gradient reaches x's buffer directly
            let r = sc.eff[0];
            self.incref(self.rts[r as usize].storage);
            outs.push(r);
            self.scratch = Some(sc);
            return;
        }
        let label = Label::new(info.kind);
        let cat = if info.is_kv_cache {
            Category::KvCache
        } else {
            self.forward_category()
        };
        // what autograd saves; saved only for the gradient of an input that needs none (a frozen
        // weight): not kept
        sc.kept.clear();
        for j in plan.saved.range() {
            let (s, only_for) = self.plans.saved[j];
            let kept = only_for.is_none_or(|k| {
                let r = sc
                    .eff
                    .get(k)
                    .or_else(|| sc.eff_params.get(k - sc.eff.len().min(k)));
                r.is_some_and(|&r| self.rts[r as usize].requires_grad)
            });
            if kept {
                sc.kept.push(s);
            }
        }
        let any_saved = !sc.kept.is_empty();
        let saves_only_inputs = sc
            .kept
            .iter()
            .all(|s| matches!(s, Saved::Input(_) | Saved::Param(_)));
        // a recomputation stops when its last saved tensor is packed; inputs are packed before
        // the kernel runs, so then no output is made
        let stop_before_kernel = self.recomputing
            && graph_node.is_some()
            && graph_node == self.recompute_stop
            && saves_only_inputs;
        sc.extras.clear();
        if !stop_before_kernel {
            // the extras made before the outputs: all of them, or the last few
            let all = plan.extras.range();
            let split = all.end - plan.early_extras as usize;
            if info.extras_first {
                self.make_extras(all.clone(), cat, label, module, &mut sc.extras);
            } else if split < all.end {
                sc.early_extras.clear();
                self.make_extras(split..all.end, cat, label, module, &mut sc.early_extras);
                // the input they stand in for goes now, when nothing else holds it (autograd
                // does not: it needs no gradient; an autocast copy stays the wrapper's argument)
                if let (Some(i), Some(r)) = (info.replaced_input, self.early_release.take()) {
                    let uncast = sc.eff.get(i as usize) == Some(&r);
                    if uncast && !self.rts[r as usize].requires_grad {
                        self.release_rt(r);
                        self.early_released = true;
                    }
                }
            }
            let no_saved = Span::default();
            let after_outputs = self.run_scratch(
                plan.forward_scratch,
                cat,
                module,
                &mut sc.made,
                &mut [],
                no_saved,
            );
            let leaf = info.leaf_requires_grad && self.grad_enabled;
            match plan.alias {
                Alias::None => {
                    for k in plan.outputs.range() {
                        let m = self.plans.metas[k];
                        let r = self.fresh(m, cat, label, module, records || leaf);
                        // a recomputed leaf belongs to the discarded recomputation graph
                        if leaf && !self.recomputing {
                            self.keep_graph_leaf(r);
                        }
                        outs.push(r);
                    }
                }
                Alias::View(i) | Alias::InPlace(i) => {
                    let sid = self.rts[sc.eff[i] as usize].storage;
                    for k in plan.outputs.range() {
                        let m = self.plans.metas[k];
                        self.incref(sid);
                        outs.push(self.new_rt(sid, m, records));
                    }
                }
                // the kernel's own results come first, then the view of one of them
                Alias::ViewOfExtra(i) => {
                    if !info.extras_first {
                        self.make_extras(all.start..split, cat, label, module, &mut sc.extras);
                    }
                    let sid = sc.extras[i];
                    for k in plan.outputs.range() {
                        let m = self.plans.metas[k];
                        self.incref(sid);
                        outs.push(self.new_rt(sid, m, records));
                    }
                }
            }
            if let Some(k) = after_outputs {
                let rest = k..plan.forward_scratch.range().end;
                self.run_scratch_from(rest, (cat, module), &mut sc.made, &mut [], no_saved);
            }
            // the program's allocations autograd keeps outlive it
            if !sc.made.is_empty() {
                for k in 0..sc.kept.len() {
                    if let Saved::Scratch(j) = sc.kept[k] {
                        if let Some(sid) = sc.made.get(j).copied().flatten() {
                            self.incref(sid);
                            sc.scratch_saved.push((j, sid));
                        }
                    }
                }
                self.release_scratch(&mut sc.made);
            }
            if let Some(b) = plan.sdpa {
                if !self.sdpa.contains(&b) {
                    self.sdpa.push(b);
                }
            }
            // 3. extras and temporaries
            if !info.extras_first {
                if !matches!(plan.alias, Alias::ViewOfExtra(_)) {
                    self.make_extras(all.start..split, cat, label, module, &mut sc.extras);
                }
                if split < all.end {
                    sc.extras.extend_from_slice(&sc.early_extras);
                }
            }
            for k in plan.forward_temporaries.range() {
                let bytes = self.plans.bytes[k];
                let s = self.new_bytes(bytes, cat, Label::new("temporary"), module);
                self.decref(s);
            }
        }
        // 4. autograd
        let keep_saved = records && (region.is_none() || self.recomputing);
        if let (false, Some(r), Some(n), true) = (self.recomputing, region, graph_node, any_saved) {
            let last = &mut self.regions[r].last_saving;
            *last = Some(last.map_or(n, |l| l.max(n)));
        }
        if records || (self.recomputing && graph_node.is_some()) {
            sc.saved.clear();
            // what this op saved that nothing saved before it (the layer table's count)
            let mut newly_saved = 0;
            if keep_saved {
                for k in 0..sc.kept.len() {
                    let sid = match sc.kept[k] {
                        Saved::Input(i) => sc.eff.get(i).map(|&r| self.rts[r as usize].storage),
                        Saved::Output(i) => outs.get(i).map(|&r| self.rts[r as usize].storage),
                        Saved::Param(i) => {
                            sc.eff_params.get(i).map(|&r| self.rts[r as usize].storage)
                        }
                        Saved::Extra(i) => sc.extras.get(i).copied(),
                        Saved::Scratch(j) => sc
                            .scratch_saved
                            .iter()
                            .find(|&&(k, _)| k == j)
                            .map(|&(_, sid)| sid),
                    };
                    if let Some(sid) = sid {
                        if !sc.saved.contains(&sid) {
                            self.incref(sid);
                            sc.saved.push(sid);
                            let st = &mut self.storages[sid as usize];
                            if !st.saved && st.category != Category::Parameters {
                                st.saved = true;
                                newly_saved += st.bytes;
                            }
                        }
                    }
                }
            }
            if let (Some(layers), Some(_), true) =
                (self.layers.as_mut(), graph_node, newly_saved > 0)
            {
                if let Some(l) = layers.last_mut() {
                    l.saved_bytes += newly_saved;
                    // a row of functional ops is named by the one that saved the most (the
                    // attention in `view, transpose, ..., scaled_dot_product_attention, reshape`)
                    if l.functional_op.is_some() && newly_saved > self.row_op_saved {
                        l.functional_op = Some(info.kind);
                        self.row_op_saved = newly_saved;
                    }
                }
            }
            if self.recomputing {
                // fill the saved tensors of the node recorded in the original forward
                if let Some(n) = graph_node {
                    match self.tape_of_node[n].filter(|&i| i < self.tape.len()) {
                        Some(i) => self.append_saved(i, &sc.saved),
                        None => {
                            for k in 0..sc.saved.len() {
                                self.decref(sc.saved[k]);
                            }
                        }
                    }
                }
            } else {
                let inputs_from = self.tape_inputs.len();
                for (i, &r) in sc.eff.iter().enumerate() {
                    let rg = self.rts[r as usize].requires_grad;
                    let gi = if i < plan.grads.len as usize {
                        self.plans.grads[plan.grads.start as usize + i]
                    } else {
                        GradIn::New
                    };
                    self.tape_inputs.push((
                        rg.then_some(r),
                        if rg { gi } else { NO_GRAD },
                        self.rts[r as usize].meta,
                    ));
                }
                for (j, &r) in sc.eff_params.iter().enumerate() {
                    let rg = self.rts[r as usize].requires_grad;
                    let gi = if j < plan.param_grads.len as usize {
                        self.plans.grads[plan.param_grads.start as usize + j]
                    } else {
                        GradIn::New
                    };
                    self.tape_inputs.push((
                        rg.then_some(r),
                        if rg { gi } else { NO_GRAD },
                        self.rts[r as usize].meta,
                    ));
                }
                if let Some(n) = graph_node {
                    self.tape_of_node[n] = Some(self.tape.len());
                }
                let outputs_from = self.tape_outputs.len();
                self.tape_outputs.extend_from_slice(outs);
                let saved_from = self.tape_saved.len();
                self.tape_saved.extend_from_slice(&sc.saved);
                self.tape.push(TapeNode {
                    label,
                    module,
                    inputs: Span::since(inputs_from, self.tape_inputs.len()),
                    outputs: Span::since(outputs_from, self.tape_outputs.len()),
                    saved: Span::since(saved_from, self.tape_saved.len()),
                    temporaries: plan.backward_temporaries,
                    scratch: plan.backward_scratch,
                    grad_order: info.grad_order,
                    region,
                    saves: any_saved,
                    grads_like_output: info.grads_like_output,
                    kernel_grads: plan.kernel_grads,
                });
            }
        }
        if !sc.scratch_saved.is_empty() {
            for k in 0..sc.scratch_saved.len() {
                self.decref(sc.scratch_saved[k].1);
            }
            sc.scratch_saved.clear();
        }
        // extras live only through saved references; the ones made before the outputs, a
        // composite's locals (`query_padded`, `key_padded`, `value_padded`), go last and in
        // reverse order of construction (truth traces of padded flash attention)
        let early = if stop_before_kernel || info.extras_first {
            0
        } else {
            plan.early_extras as usize
        };
        let late = sc.extras.len() - early.min(sc.extras.len());
        for k in (0..late).chain((late..sc.extras.len()).rev()) {
            self.decref(sc.extras[k]);
        }
        // the wrapper's casts are temporaries of its call expression, destroyed in reverse
        // order of construction: the activations' first, the weight's, then the bias's last
        // made, so the bias's goes first (truth traces of a checkpointed LoRA GPT-2's frozen
        // Conv1D: bias, input, weight)
        for k in (0..sc.casts.len()).rev() {
            self.release_rt(sc.casts[k]);
        }
        self.scratch = Some(sc);
    }

    /// The answers of `op`'s rules for the call whose (autocast) inputs and parameters are in
    /// `sc.eff` and `sc.eff_params`: the plan of an earlier call of graph node `graph_node`'s op
    /// object with the same inputs, else a new one (a call outside the graph, of an op that lives
    /// only for the call, gets a plan of its own).
    fn plan(
        &mut self,
        op: &Arc<dyn Op>,
        graph_node: Option<usize>,
        sc: &CallScratch,
        (records, keeps_saved, unpacked): (bool, bool, bool),
    ) -> usize {
        let recording =
            u8::from(records) | (u8::from(keeps_saved) << 1) | (u8::from(unpacked) << 2);
        let rep = graph_node.map(|n| self.plans.rep_of_node[n] as usize);
        let grad_enabled = self.grad_enabled;
        let rg = |s: &Self, r: Rt| grad_enabled && s.rts[r as usize].requires_grad;
        if let Some(rep) = rep {
            let mut next = self.plans.first[rep];
            while let Some(pi) = next {
                let p = &self.plans.list[pi as usize];
                let key = &self.plans.keys[p.key.range()];
                let same = p.recording == recording
                    && p.n_inputs as usize == sc.eff.len()
                    && key.len() == sc.eff.len() + sc.eff_params.len()
                    && sc
                        .eff
                        .iter()
                        .chain(&sc.eff_params)
                        .zip(key)
                        .all(|(&r, &(k, krg))| {
                            krg == rg(self, r) && self.shapes.same(self.rts[r as usize].meta, k)
                        });
                if same {
                    return pi as usize;
                }
                next = p.next;
            }
        }
        // ask the op
        let key_from = self.plans.keys.len();
        for &r in sc.eff.iter().chain(&sc.eff_params) {
            let k = (self.rts[r as usize].meta, rg(self, r));
            self.plans.keys.push(k);
        }
        let key = Span::since(key_from, self.plans.keys.len());
        let mut in_metas = std::mem::take(&mut self.plans.in_metas);
        let mut p_metas = std::mem::take(&mut self.plans.p_metas);
        let mut out_metas = std::mem::take(&mut self.plans.out_metas);
        let mut in_rg = std::mem::take(&mut self.plans.in_rg);
        let n_in = fill_metas(
            &mut in_metas,
            sc.eff.iter().map(|&r| self.rts[r as usize].meta),
            &self.shapes,
        );
        let n_params = fill_metas(
            &mut p_metas,
            sc.eff_params.iter().map(|&r| self.rts[r as usize].meta),
            &self.shapes,
        );
        in_rg.clear();
        in_rg.extend(sc.eff.iter().map(|&r| rg(self, r)));
        let ins = &in_metas[..n_in];
        let shapes_in: Vec<&[u64]> = ins.iter().map(|m| m.shape.as_slice()).collect();
        let out_shapes = op
            .output_shapes(&shapes_in)
            .unwrap_or_else(|_| vec![ins[0].shape.clone()]);
        drop(shapes_in);
        let mut dts: Vec<DType> = ins.iter().map(|m| m.dtype).collect();
        if dts.is_empty() {
            dts.push(DType::F32);
        }
        let mut out_dtypes = op.output_dtypes(&dts, out_shapes.len());
        // an `fp32_set_opt_dtype` op under autocast returns float32 (from a float16 input too)
        if dts[0] == DType::F16
            && self.cfg.precision.autocast_dtype().is_some()
            && op.autocast() == Autocast::Fp32SetOptDtype
        {
            out_dtypes.fill(DType::F32);
        }
        // a graph node's outputs usually have the shapes the graph recorded: share those
        let g = self.g;
        let graph_outputs = graph_node.map_or(&[][..], |n| g.nodes[n].outputs.as_slice());
        let outputs_from = self.plans.metas.len();
        for (k, (shape, &dtype)) in out_shapes.iter().zip(&out_dtypes).enumerate() {
            let id = match graph_outputs.get(k) {
                Some(&t) if g.tensor(t).shape[..] == shape[..] => Shapes::tensor(t),
                _ => self.shapes.add(shape),
            };
            self.plans.metas.push(Meta { shape: id, dtype });
        }
        let outputs = Span::since(outputs_from, self.plans.metas.len());
        let n_out = fill_metas(
            &mut out_metas,
            self.plans.metas[outputs.range()].iter().copied(),
            &self.shapes,
        );
        let ctx = OpCtx {
            inputs: &in_metas[..n_in],
            params: &p_metas[..n_params],
            outputs: &out_metas[..n_out],
            training: self.training,
            inputs_require_grad: &in_rg,
            keeps_saved,
            saved_unpacked: unpacked,
        };
        let alias = op.alias_for(&ctx);
        let sdpa = op.sdpa_backend(&ctx);
        let extras_meta = if records {
            op.forward_extras(&ctx)
        } else {
            op.inference_extras(&ctx)
        };
        let early_extras = op.extras_made_first(&ctx).min(extras_meta.len()).min(255) as u8;
        let kernel_grads = if records { op.kernel_grads(&ctx) } else { 0 };
        let extras_from = self.plans.metas.len();
        for m in &extras_meta {
            let meta = self.meta(&m.shape, m.dtype);
            self.plans.metas.push(meta);
        }
        let extras = Span::since(extras_from, self.plans.metas.len());
        let from = self.plans.bytes.len();
        self.plans.bytes.extend(op.forward_temporaries(&ctx));
        let forward_temporaries = Span::since(from, self.plans.bytes.len());
        let from = self.plans.scratch.len();
        self.plans.scratch.extend(op.forward_scratch(&ctx));
        let forward_scratch = Span::since(from, self.plans.scratch.len());
        let from = self.plans.saved.len();
        if records {
            for s in op.saved_for_backward(&ctx) {
                self.plans.saved.push((s, op.saved_only_for(s)));
            }
        }
        let saved = Span::since(from, self.plans.saved.len());
        let (mut grads, mut param_grads) = Default::default();
        let (mut backward_temporaries, mut backward_scratch) = Default::default();
        if records {
            let from = self.plans.grads.len();
            self.plans.grads.extend(op.input_grads(&ctx));
            grads = Span::since(from, self.plans.grads.len());
            let from = self.plans.grads.len();
            self.plans.grads.extend(op.param_grads(&ctx));
            param_grads = Span::since(from, self.plans.grads.len());
            let from = self.plans.bytes.len();
            self.plans.bytes.extend(op.backward_temporaries(&ctx));
            backward_temporaries = Span::since(from, self.plans.bytes.len());
            let from = self.plans.scratch.len();
            self.plans.scratch.extend(op.backward_scratch(&ctx));
            backward_scratch = Span::since(from, self.plans.scratch.len());
        }
        self.plans.in_metas = in_metas;
        self.plans.p_metas = p_metas;
        self.plans.out_metas = out_metas;
        self.plans.in_rg = in_rg;
        let pi = self.plans.list.len();
        self.plans.list.push(OpPlan {
            key,
            n_inputs: sc.eff.len() as u32,
            recording,
            next: None,
            outputs,
            alias,
            extras,
            early_extras,
            kernel_grads,
            forward_temporaries,
            forward_scratch,
            sdpa,
            saved,
            grads,
            param_grads,
            backward_temporaries,
            backward_scratch,
        });
        if let Some(rep) = rep {
            // newest first: the next call most likely repeats this one
            self.plans.list[pi].next = self.plans.first[rep];
            self.plans.first[rep] = Some(pi as u32);
        }
        pi
    }

    /// Adds `saved` to tape node `i`'s saved list (recomputation fills the saved tensors of a
    /// node recorded without them).
    fn append_saved(&mut self, i: usize, saved: &[u32]) {
        if saved.is_empty() {
            return;
        }
        let span = self.tape[i].saved;
        if span.start as usize + span.len as usize != self.tape_saved.len() {
            // not at the end of the list: move the node's list there first
            let start = self.tape_saved.len();
            self.tape_saved.extend_from_within(span.range());
            self.tape[i].saved = Span::since(start, self.tape_saved.len());
        }
        self.tape_saved.extend_from_slice(saved);
        self.tape[i].saved.len += saved.len() as u32;
    }

    fn param_meta(&self, p: ParamId) -> Meta {
        let d = &self.g.params[p.0 as usize];
        let dtype = match d.stored_dtype {
            Some(stored) => stored,
            None if d.dtype.is_float() => self.cfg.precision.param_dtype(),
            None => d.dtype,
        };
        Meta {
            shape: self.shapes.param(p),
            dtype,
        }
    }

    fn build_model(&mut self) {
        let mut order: Vec<usize> = (0..self.g.params.len()).collect();
        order.sort_by_key(|&i| self.g.params[i].init_rank);
        self.param_rt = vec![0; self.g.params.len()];
        let mut temps: Vec<Option<u32>> = vec![None; self.g.init_temporaries.len()];
        // the ordered temporaries' events (`InitTemporary::order`): (position, key, temporary,
        // whether it is the allocation), sorted
        let mut ordered: Vec<(u32, u32, usize, bool)> = Vec::new();
        for (i, t) in self.g.init_temporaries.iter().enumerate() {
            if let Some((alloc_key, free_key)) = t.order {
                ordered.push((t.alloc_at, alloc_key, i, true));
                ordered.push((t.free_at, free_key, i, false));
            }
        }
        ordered.sort_unstable();
        let mut next = 0;
        for (k, i) in order.into_iter().map(Some).chain([None]).enumerate() {
            let end = next + ordered[next..].partition_point(|e| e.0 <= k as u32);
            self.init_temporaries_at(k as u32, &mut temps, &ordered[next..end]);
            next = end;
            let Some(i) = i else { break };
            let p = &self.g.params[i];
            let meta = self.param_meta(ParamId(i as u32));
            let (cat, label) = match p.kind {
                ParamKind::Parameter => (Category::Parameters, "parameter"),
                ParamKind::Buffer => (Category::Buffers, "buffer"),
            };
            let sid = self.new_storage(meta, cat, Label::new(label), Some(p.module));
            let rg = p.kind == ParamKind::Parameter && p.trainable && meta.dtype.is_float();
            let r = self.new_rt(sid, meta, rg);
            self.rts[r as usize].param = Some(ParamId(i as u32));
            self.param_rt[i] = r;
        }
        self.param_grad = vec![None; self.g.params.len()];
    }

    /// The construction temporaries due after `k` parameters: those allocated earlier are freed
    /// (4-bit loading drops one weight's buffers before it loads the next), then the position's
    /// are allocated, then those of them already due are freed. After the last parameter every due
    /// one is freed, in call order, after the allocations: `post_init()` unties (T5's per-stack
    /// embeddings) only once `__init__` has made its last tensor (the untied head).
    fn init_temporaries_at(
        &mut self,
        k: u32,
        live: &mut [Option<u32>],
        ordered: &[(u32, u32, usize, bool)],
    ) {
        let g = self.g;
        let built = k as usize >= g.params.len();
        // the position's ordered events first, by their keys
        for &(_, _, i, alloc) in ordered {
            if alloc {
                live[i] = Some(self.new_init_temporary(&g.init_temporaries[i]));
            } else if let Some(sid) = live[i].take() {
                self.decref(sid);
            }
        }
        // `first`: those freed before the position's allocations (allocated earlier, and not
        // `freed_after_allocations`: `Some(true)`), the others (`Some(false)`), or all
        let free_where = |s: &mut Self, live: &mut [Option<u32>], first: Option<bool>| {
            for (t, slot) in g.init_temporaries.iter().zip(live.iter_mut()) {
                if t.order.is_some() {
                    continue;
                }
                let freed_first = t.alloc_at < k && !t.freed_after_allocations;
                if t.free_at == k && first.is_none_or(|f| freed_first == f) {
                    if let Some(sid) = slot.take() {
                        s.decref(sid);
                    }
                }
            }
        };
        if !built {
            free_where(self, live, Some(true));
        }
        for (t, slot) in g.init_temporaries.iter().zip(live.iter_mut()) {
            if t.alloc_at == k && t.order.is_none() && !t.allocated_after_frees {
                *slot = Some(self.new_init_temporary(t));
            }
        }
        free_where(self, live, if built { None } else { Some(false) });
        for (t, slot) in g.init_temporaries.iter().zip(live.iter_mut()) {
            if t.alloc_at == k && t.order.is_none() && t.allocated_after_frees {
                *slot = Some(self.new_init_temporary(t));
            }
        }
    }

    /// Allocates construction temporary `t` (its dtype, else the model's).
    fn new_init_temporary(&mut self, t: &InitTemporary) -> u32 {
        let meta = Meta {
            shape: self.shapes.add(&t.shape),
            dtype: t.dtype.unwrap_or(self.cfg.precision.param_dtype()),
        };
        self.new_storage(
            meta,
            Category::Temporaries,
            Label::new("construction temporary"),
            Some(t.module),
        )
    }

    /// Runs graph nodes `first..end` as a forward pass; `env` maps graph tensors to rt tensors.
    fn forward_nodes(&mut self, env: &mut [Option<Rt>], first: usize, end: usize, hold: &[bool]) {
        for n in first..end {
            let region = self.region_of_node[n];
            if !self.recomputing {
                if let Some(r) = region {
                    if self.regions[r].first == n {
                        // the checkpoint frame keeps the region's inputs
                        let ins = self.regions[r].inputs.clone();
                        let mut frame = Vec::new();
                        for t in ins {
                            if let Some(rt) = env[t.0 as usize] {
                                let sid = self.rts[rt as usize].storage;
                                self.incref(sid);
                                frame.push((t, rt));
                            }
                        }
                        self.regions[r].frame = frame;
                    }
                }
            }
            let node = &self.g.nodes[n];
            if !self.recomputing
                && self.layers.is_some()
                && self
                    .g
                    .layer_table
                    .as_ref()
                    .is_none_or(|r| r.contains(&(n as u32)))
                && self.last_layer_module != Some(node.module)
            {
                self.last_layer_module = Some(node.module);
                self.row_op_saved = 0;
                let mi = node.module.0 as usize;
                let parameters = if self.module_listed[mi] {
                    0
                } else {
                    self.module_params[mi]
                };
                self.module_listed[mi] = true;
                // a functional op inside a container (a residual `+=`) is named by the op
                let functional_op = self.module_has_children[mi].then(|| node.op.kind());
                if let Some(layers) = self.layers.as_mut() {
                    layers.push(LayerStats {
                        module: node.module,
                        functional_op,
                        output: None,
                        parameters,
                        saved_bytes: 0,
                    });
                }
            }
            let mut inputs = std::mem::take(&mut self.node_inputs);
            inputs.clear();
            inputs.extend(node.inputs.iter().filter_map(|t| {
                // validate_graph checked that every input is produced before use
                env[t.0 as usize]
                    .or_else(|| self.g.tensor(*t).param.map(|p| self.param_rt[p.0 as usize]))
            }));
            let mut outs = std::mem::take(&mut self.node_outputs);
            let g = self.g;
            let node = &g.nodes[n];
            // an input the op may drop inside the call: its last use, not held
            let replaced = self.plans.info[self.plans.rep_of_node[n] as usize].replaced_input;
            let early = replaced
                .and_then(|i| node.inputs.get(i as usize))
                .filter(|t| !hold[t.0 as usize])
                .filter(|t| self.release_after.tensors[self.release_after.range(n)].contains(t));
            if let Some(t) = early {
                self.early_release = env[t.0 as usize];
            }
            self.call_into(
                &node.op,
                &inputs,
                &node.params,
                Some(node.module),
                Some(n),
                region,
                &mut outs,
            );
            for (t, &r) in node.outputs.iter().zip(&outs) {
                env[t.0 as usize] = Some(r);
                let hooked =
                    self.grad_enabled && !self.recomputing && self.g.grad_leaves.contains(t);
                if hooked && !self.rts[r as usize].requires_grad {
                    // `output.requires_grad_(True)`: a leaf, which its AccumulateGrad node keeps
                    self.rts[r as usize].requires_grad = true;
                    self.keep_graph_leaf(r);
                }
            }
            if let Some(t) = early {
                self.early_release = None;
                if std::mem::take(&mut self.early_released) {
                    env[t.0 as usize] = None;
                }
            }
            self.node_inputs = inputs;
            self.node_outputs = outs;
            if let (Some(layers), Some(&t)) = (self.layers.as_mut(), node.outputs.first()) {
                if let Some(row) = layers.last_mut() {
                    row.output = Some(t);
                }
            }
            if self.recomputing && self.recompute_stop == Some(n) {
                // the recomputation stops inside this op, as its last saved tensor is packed:
                // unwinding frees the op's own results first; its callers' locals go once the
                // recomputation has left autocast (`recompute_region`; truth traces: GPT-2's
                // last dropout output, the autocast cache, then the `c_proj` output it was given)
                for t in &node.outputs {
                    if let Some(r) = env[t.0 as usize].take() {
                        self.release_rt(r);
                    }
                }
                return;
            }
            let drop_graphs = !self.recomputing;
            self.release_scheduled(env, hold, n, drop_graphs);
        }
    }

    /// Releases what `env` holds of the graph tensors whose last reference ends after node `n`
    /// (not those of `hold`), in the schedule's order; with `drop_graphs`, the autograd graphs
    /// dropped with each.
    fn release_scheduled(
        &mut self,
        env: &mut [Option<Rt>],
        hold: &[bool],
        n: usize,
        drop_graphs: bool,
    ) {
        for k in self.release_after.range(n) {
            let i = self.release_after.tensors[k].0 as usize;
            if hold[i] {
                continue;
            }
            if let Some(r) = env[i].take() {
                self.release_rt(r);
                if drop_graphs && !self.dropped_after.is_empty() {
                    self.drop_graphs_after(i as u32);
                }
            }
        }
    }

    /// Frees the saved tensors of the autograd graphs dropped once graph tensor `t` is released,
    /// last node first.
    fn drop_graphs_after(&mut self, t: u32) {
        let g = self.g;
        let first = self.dropped_after.partition_point(|&(a, _)| a < t);
        let end = first + self.dropped_after[first..].partition_point(|&(a, _)| a == t);
        for k in first..end {
            let d = &g.dropped_graphs[self.dropped_after[k].1];
            for m in d.nodes.clone().rev() {
                if let Some(i) = self.tape_of_node[m as usize].filter(|&i| i < self.tape.len()) {
                    self.release_saved(i, false);
                }
            }
        }
    }

    fn recompute_region(&mut self, r: usize) {
        // early stop: nothing after the last op that saves a tensor is recomputed
        let first = self.regions[r].first;
        let end = self.regions[r].last_saving.map_or(first, |l| l + 1);
        let mut env: Vec<Option<Rt>> = vec![None; self.g.tensors.len()];
        // region inputs: the originals, kept by the frame
        let mut hold = vec![false; self.g.tensors.len()];
        for (t, rt) in self.regions[r].frame.clone() {
            env[t.0 as usize] = Some(rt);
            self.incref(self.rts[rt as usize].storage);
        }
        for (i, h) in hold.iter_mut().enumerate() {
            *h = self.g.tensors[i]
                .producer
                .map(|p| (p.0 as usize) < first || p.0 as usize >= end)
                .unwrap_or(true);
        }
        let saved_grad = self.grad_enabled;
        self.grad_enabled = true;
        self.recomputing = true;
        self.recompute_stop = self.regions[r].last_saving;
        self.forward_nodes(&mut env, first, end, &hold);
        self.recompute_stop = None;
        self.recomputing = false;
        self.grad_enabled = saved_grad;
        self.clear_autocast_cache();
        // stopping early unwinds the block's frames, whose locals the exception's traceback
        // keeps until autocast has been left: they go in the order the forward would have
        // released them from the stop on (inner frames first, each frame's locals first to
        // last), then what outlives the block (and the frame's inputs), in graph order
        for n in self.regions[r].last_saving.unwrap_or(first)..self.regions[r].end {
            self.release_scheduled(&mut env, &hold, n, false);
        }
        for slot in env.iter_mut() {
            if let Some(rt) = slot.take() {
                self.release_rt(rt);
            }
        }
        self.regions[r].recomputed = true;
    }

    fn deliver(&mut self, target: Rt, grad_sid: u32) {
        if let Some(p) = self.rts[target as usize].param {
            let pi = p.0 as usize;
            match self.param_grad[pi] {
                None => {
                    if self.storages[grad_sid as usize].refs > 1
                        || self.storages[grad_sid as usize].meta.dtype
                            != self.rts[target as usize].meta.dtype
                    {
                        let meta = self.rts[target as usize].meta;
                        let c = self.new_storage(
                            meta,
                            Category::Gradients,
                            Label::new("grad"),
                            self.storages[grad_sid as usize].module,
                        );
                        self.decref(grad_sid);
                        self.param_grad[pi] = Some(c);
                    } else {
                        let cat = self.storages[grad_sid as usize].category;
                        if cat != Category::Gradients {
                            self.mem
                                .send(Msg::Recategorize(grad_sid, Category::Gradients));
                            self.storages[grad_sid as usize].category = Category::Gradients;
                        }
                        self.param_grad[pi] = Some(grad_sid);
                    }
                }
                // p.grad kept from the previous iteration (zero_grad(set_to_none=False)):
                // AccumulateGrad adds in place
                Some(_) if self.grad_existed_before_backward[pi] => self.decref(grad_sid),
                // a parameter used twice in one graph (tied embeddings): the engine sums its
                // gradients out of place before AccumulateGrad runs (truth traces)
                Some(old) => {
                    let meta = self.rts[target as usize].meta;
                    let module = self.storages[old as usize].module;
                    let sum =
                        self.new_storage(meta, Category::Gradients, Label::new("grad"), module);
                    self.decref(old);
                    self.decref(grad_sid);
                    self.param_grad[pi] = Some(sum);
                }
            }
            return;
        }
        match self.grad_buf[target as usize] {
            None => self.grad_buf[target as usize] = Some(grad_sid),
            Some(old) => {
                let meta = self.rts[target as usize].meta;
                let module = self.storages[old as usize].module;
                let sum = self.new_storage(
                    meta,
                    Category::Temporaries,
                    Label::new("gradient sum"),
                    module,
                );
                self.decref(old);
                self.decref(grad_sid);
                self.grad_buf[target as usize] = Some(sum);
            }
        }
    }

    fn backward(&mut self, loss: Rt) {
        self.grad_existed_before_backward = self.param_grad.iter().map(Option::is_some).collect();
        self.in_backward = true;
        let root_meta = self.meta(&[], self.rts[loss as usize].meta.dtype);
        let mut extra_roots = Vec::new();
        if self.cfg.precision.uses_grad_scaler() && !self.scaler_initialised {
            // GradScaler creates _scale and _growth_tracker at its first scale()
            for _ in 0..2 {
                self.new_storage(
                    root_meta,
                    Category::Temporaries,
                    Label::new("GradScaler state"),
                    None,
                );
            }
            self.scaler_initialised = true;
        }
        if self.cfg.precision.uses_grad_scaler() {
            // scaler.scale(loss): loss * _scale; the engine seeds the scaled loss, MulBackward
            // hands the loss its gradient
            let scaled = self.new_storage(
                root_meta,
                Category::Temporaries,
                Label::new("scaled loss"),
                None,
            );
            extra_roots.push(scaled);
        }
        let root = self.new_storage(
            root_meta,
            Category::Temporaries,
            Label::new("ones_like(loss)"),
            None,
        );
        if self.cfg.precision.uses_grad_scaler() {
            let g = self.new_storage(
                root_meta,
                Category::Temporaries,
                Label::new("grad of loss"),
                None,
            );
            self.deliver(loss, g);
        } else {
            self.incref(root);
            self.deliver(loss, root);
        }
        let mut bs = std::mem::take(&mut self.backward_scratch);
        let mut made = Vec::new();
        let leaves_ready = self.leaves_ready();
        let mut i = self.tape.len();
        while i > 0 {
            if !leaves_ready.is_empty() {
                self.accumulate_leaves_read_first_by(i, &leaves_ready);
            }
            i -= 1;
            let node = self.tape[i];
            // a checkpointed region is recomputed when backward first unpacks one of its saved
            // tensors: when a node that saved some runs (it has an incoming gradient)
            if let (Some(r), true) = (node.region, node.saves) {
                let runs = self.tape_outputs[node.outputs.range()]
                    .iter()
                    .any(|&o| self.grad_buf[o as usize].is_some());
                if runs && !self.regions[r].recomputed {
                    self.recompute_region(r);
                }
            }
            bs.incoming.clear();
            for k in node.outputs.range() {
                let o = self.tape_outputs[k];
                bs.incoming.push(self.grad_buf[o as usize].take());
            }
            if bs.incoming.iter().all(Option::is_none) {
                self.release_saved(i, false);
                self.finish_region_node(i);
                continue;
            }
            self.run_scratch(
                node.scratch,
                Category::Temporaries,
                node.module,
                &mut made,
                &mut bs.incoming,
                node.saved,
            );
            bs.temps.clear();
            for k in node.temporaries.range() {
                let bytes = self.plans.bytes[k];
                let t = self.new_bytes(
                    bytes,
                    Category::Temporaries,
                    Label::new("backward temporary"),
                    node.module,
                );
                bs.temps.push(t);
            }
            bs.produced.clear();
            bs.to_cast.clear();
            bs.narrowed.clear();
            let out_meta = (!node.outputs.is_empty())
                .then(|| self.rts[self.tape_outputs[node.outputs.start as usize] as usize].meta);
            bs.made_for.clear();
            bs.made_for.resize(node.inputs.len as usize, None);
            let n_inputs = node.inputs.len as usize;
            for step in 0..n_inputs {
                let k = node.grad_order.input_at(step, n_inputs);
                let (inp, gi, meta) = self.tape_inputs[node.inputs.start as usize + k];
                let Some(target) = inp else {
                    // the kernel makes it anyway; it goes with the node's temporaries
                    if k < node.kernel_grads as usize {
                        let label = Label::grad_of(node.label.what);
                        let t = self.new_storage(meta, Category::Temporaries, label, node.module);
                        bs.temps.push(t);
                    }
                    continue;
                };
                let shared = match gi {
                    GradIn::SameAs(j) => bs.made_for.get(j).copied().flatten(),
                    _ => None,
                };
                let sid = match gi {
                    GradIn::None => continue,
                    GradIn::SameAs(_) if shared.is_some() => {
                        let s = shared.unwrap_or(0);
                        self.incref(s);
                        s
                    }
                    GradIn::PassThrough(o) => match bs.incoming.get(o).copied().flatten() {
                        Some(s) => {
                            self.incref(s);
                            s
                        }
                        None => continue,
                    },
                    GradIn::Reduced(o) => match bs.incoming.get(o).copied().flatten() {
                        Some(s) => {
                            self.incref(s);
                            bs.to_cast.push((bs.produced.len(), k, meta));
                            s
                        }
                        None => continue,
                    },
                    GradIn::Scratch(j) => match made.get(j).copied().flatten() {
                        Some(s) => {
                            self.incref(s);
                            // the allocation had bytes only; the gradient is the input's
                            self.storages[s as usize].meta = meta;
                            s
                        }
                        None => continue,
                    },
                    GradIn::ReducedScratch(j) => match made.get(j).copied().flatten() {
                        Some(s) => {
                            self.incref(s);
                            bs.to_cast.push((bs.produced.len(), k, meta));
                            s
                        }
                        None => continue,
                    },
                    GradIn::Narrowed(j) => match made.get(j).copied().flatten() {
                        Some(s) => {
                            self.incref(s);
                            bs.narrowed.push((bs.produced.len(), k, meta));
                            s
                        }
                        None => continue,
                    },
                    GradIn::New | GradIn::SameAs(_) => {
                        let cat = if self.rts[target as usize].param.is_some() {
                            Category::Gradients
                        } else {
                            Category::Temporaries
                        };
                        let label = Label::grad_of(node.label.what);
                        match out_meta {
                            Some(m) if node.grads_like_output && !self.shapes.same(m, meta) => {
                                bs.to_cast.push((bs.produced.len(), k, meta));
                                self.new_storage(m, Category::Temporaries, label, node.module)
                            }
                            _ => self.new_storage(meta, cat, label, node.module),
                        }
                    }
                };
                bs.made_for[k] = Some(sid);
                bs.produced.push((target, sid));
            }
            // a backward formula's temporaries die at the end of its full-expression, the last
            // made first (C++ destroys temporaries in reverse order of construction)
            for k in (0..bs.temps.len()).rev() {
                self.decref(bs.temps[k]);
            }
            self.release_scratch(&mut made);
            // saved tensors of a recomputed region are the node's own unpacked copies (the
            // checkpoint's unpack hook drops its reference), locals of its `apply` that C++
            // destroys as it returns, the last unpacked first: the saved list backwards (truth
            // traces: MmBackward0's input, then its weight); other saved tensors are released in
            // list order after the engine is done with the node
            if node.region.is_some() {
                self.release_saved(i, true);
            }
            // validate_outputs: in input order, each gradient reduced to its input's shape and
            // cast to its dtype
            bs.to_cast.sort_by_key(|&(_, input, _)| input);
            for c in 0..bs.to_cast.len() {
                let (k, input, meta) = bs.to_cast[c];
                let rule = self.tape_inputs[node.inputs.start as usize + input].1;
                let reduced_only = matches!(rule, GradIn::Reduced(_) | GradIn::ReducedScratch(_));
                // a scratch allocation has bytes, not a shape: summed straight to the input's
                let from_scratch = matches!(rule, GradIn::ReducedScratch(_));
                let (target, computed) = bs.produced[k];
                let cat = if self.rts[target as usize].param.is_some() {
                    Category::Gradients
                } else {
                    Category::Temporaries
                };
                // a gradient the node handed on as is (a bias) is named for the node's op
                let label = if reduced_only {
                    Label::grad_of(node.label.what)
                } else {
                    Label::new("grad reduced / cast")
                };
                // sum_to, then the cast: a gradient both broadcast and wider than its input is
                // summed in the computed dtype first (truth traces of the MoE experts' float32
                // output times the routing weights under autocast)
                let from = self.storages[computed as usize].meta;
                let computed = if !from_scratch
                    && from.dtype != meta.dtype
                    && from.shape != meta.shape
                    && self.shapes.get(from.shape) != self.shapes.get(meta.shape)
                {
                    let summed = Meta {
                        shape: meta.shape,
                        dtype: from.dtype,
                    };
                    let summed = self.new_storage(summed, cat, label, node.module);
                    self.decref(computed);
                    summed
                } else {
                    computed
                };
                let fitted = self.new_storage(meta, cat, label, node.module);
                self.decref(computed);
                bs.produced[k] = (target, fitted);
            }
            for k in 0..bs.incoming.len() {
                if let Some(s) = bs.incoming[k] {
                    self.decref(s);
                }
            }
            self.release_saved(i, false);
            // the region's last node to run released the last saved tensor whose hooks hold
            // the checkpoint frame: the frame (and the region's inputs it keeps) goes before the
            // engine adds the node's gradients into its inputs' buffers
            self.finish_region_node(i);
            // the nodes that made the padded copies run next, the last made first: each makes
            // its input's gradient and frees the padded one
            if bs.narrowed.len() > 1 {
                bs.narrowed
                    .sort_by_key(|&(_, input, _)| std::cmp::Reverse(input));
            }
            for c in 0..bs.narrowed.len() {
                let (k, _, meta) = bs.narrowed[c];
                let (target, padded) = bs.produced[k];
                let cat = if self.rts[target as usize].param.is_some() {
                    Category::Gradients
                } else {
                    Category::Temporaries
                };
                let label = Label::grad_of(node.label.what);
                let narrowed = self.new_storage(meta, cat, label, node.module);
                self.decref(padded);
                bs.produced[k] = (target, narrowed);
            }
            for k in 0..bs.produced.len() {
                let (target, sid) = bs.produced[k];
                self.deliver(target, sid);
            }
        }
        self.backward_scratch = bs;
        if !leaves_ready.is_empty() {
            self.accumulate_leaves_read_first_by(0, &leaves_ready);
        }
        self.decref(root);
        for s in extra_roots {
            self.decref(s);
        }
        // gradients that reached no parameter (e.g. the input's) are dropped with the graph
        for i in 0..self.grad_buf.len() {
            if let Some(s) = self.grad_buf[i].take() {
                self.decref(s);
            }
        }
        self.tape.clear();
        self.tape_inputs.clear();
        self.tape_outputs.clear();
        self.tape_saved.clear();
        self.in_backward = false;
    }

    /// `param.data = param.data.to(other.dtype)` for `inputs` `[param, other]`, a frozen
    /// parameter of another float dtype: its new tensor, then the old one freed (the parameter's
    /// runtime tensor now has the new dtype, so later calls see it).
    fn recast_param(&mut self, inputs: &[Rt], module: Option<ModuleId>) {
        let (Some(&p), Some(&x)) = (inputs.first(), inputs.get(1)) else {
            return;
        };
        let (pm, to) = (self.rts[p as usize].meta, self.rts[x as usize].meta.dtype);
        // (a trainable one would need its gradient and optimizer state recast too: left as is)
        let frozen_param = self.rts[p as usize].param.is_some()
            && (!self.rts[p as usize].requires_grad || !self.grad_enabled);
        if !frozen_param || pm.dtype == to || !pm.dtype.is_float() || !to.is_float() {
            return;
        }
        let meta = Meta {
            shape: pm.shape,
            dtype: to,
        };
        let old = self.rts[p as usize].storage;
        let new = self.new_storage(meta, Category::Parameters, Label::new("parameter"), module);
        self.rts[p as usize].storage = new;
        self.rts[p as usize].meta = meta;
        self.decref(old);
    }

    /// Releases tape node `i`'s saved tensors (once: its list is emptied), in list order or,
    /// `last_first`, backwards.
    fn release_saved(&mut self, i: usize, last_first: bool) {
        let span = std::mem::take(&mut self.tape[i].saved);
        let range = span.range();
        if last_first {
            for k in range.rev() {
                self.release_saved_slot(k);
            }
        } else {
            for k in range {
                self.release_saved_slot(k);
            }
        }
    }

    /// Releases the saved tensor in slot `k` of `tape_saved`, unless a backward program released
    /// it already ([`Scratch::ReleaseSaved`]).
    fn release_saved_slot(&mut self, k: usize) {
        let sid = self.tape_saved[k];
        if sid != RELEASED {
            self.decref(sid);
        }
    }

    /// For each non-parameter leaf of this iteration's graph, the tape node that read it first
    /// (its last gradient arrives from that node's backward): (tape index, leaf).
    fn leaves_ready(&self) -> Vec<(usize, usize)> {
        let mut ready = Vec::new();
        for (k, l) in self.graph_leaves.iter().enumerate() {
            if l.iteration != self.iteration {
                continue;
            }
            let first = self.tape.iter().position(|node| {
                self.tape_inputs[node.inputs.range()]
                    .iter()
                    .any(|&(r, _, _)| r == Some(l.rt))
            });
            if let Some(f) = first {
                ready.push((f, k));
            }
        }
        ready
    }

    /// Runs the AccumulateGrad node of the leaves whose first reader is tape node `i`, once its
    /// backward has delivered: the engine runs an AccumulateGrad as soon as its gradient is
    /// complete. The first gradient becomes the leaf's `.grad` (later ones are added in place:
    /// grad mode is off in backward); one whose layout breaks the
    /// leaf's (the padded rows of a mem-efficient attention bias gradient) is copied into a
    /// tensor shaped like the leaf first (`clone_obey_contract`), then freed.
    fn accumulate_leaves_read_first_by(&mut self, i: usize, ready: &[(usize, usize)]) {
        for &(first, k) in ready {
            if first != i {
                continue;
            }
            let r = self.graph_leaves[k].rt as usize;
            let Some(g) = self.grad_buf.get_mut(r).and_then(Option::take) else {
                continue;
            };
            if self.graph_leaves[k].grad.is_some() {
                self.decref(g);
                continue;
            }
            let meta = self.rts[r].meta;
            let g = if self.storages[g as usize].bytes != self.shapes.bytes(meta) {
                let category = self.storages[g as usize].category;
                let module = self.storages[g as usize].module;
                let copy =
                    self.new_storage(meta, category, Label::new("AccumulateGrad copy"), module);
                self.decref(g);
                copy
            } else {
                g
            };
            self.graph_leaves[k].grad = Some(g);
        }
    }

    /// Keeps `r` as a leaf of this iteration's autograd graph (its AccumulateGrad node holds it).
    fn keep_graph_leaf(&mut self, r: Rt) {
        self.incref(self.rts[r as usize].storage);
        self.graph_leaves.push(GraphLeaf {
            iteration: self.iteration,
            rt: r,
            grad: None,
        });
    }

    /// Releases the graph leaves (and their `.grad`) of iterations before `before`.
    fn release_graph_leaves(&mut self, before: u32) {
        let (old, keep): (Vec<GraphLeaf>, Vec<GraphLeaf>) = std::mem::take(&mut self.graph_leaves)
            .into_iter()
            .partition(|l| l.iteration < before);
        self.graph_leaves = keep;
        for l in old {
            if let Some(g) = l.grad {
                self.decref(g);
            }
            self.release_rt(l.rt);
        }
    }

    /// `F.cross_entropy(logits, labels)` = `nll_loss(log_softmax(logits), labels)`.
    fn cross_entropy(&mut self, logits: Rt, labels: Rt) -> Rt {
        let log_softmax: Arc<dyn Op> = Arc::new(LogSoftmax::of_cross_entropy(1));
        let nll: Arc<dyn Op> = Arc::new(NllLoss);
        let lp = self.call(&log_softmax, &[logits], &[], None, None, None);
        let l = self.call(&nll, &[lp[0], labels], &[], None, None, None);
        for r in lp {
            self.release_rt(r);
        }
        l[0]
    }

    /// Hugging Face's `ForCausalLMLoss` (`causal`) or `ForMaskedLMLoss` over `[B, S, V]` logits:
    /// `logits.float()` (a copy unless already float32), for the causal loss `pad(labels, (0, 1),
    /// value=-100)[..., 1:].contiguous()`, then `cross_entropy(logits.view(-1, V), labels.view(-1))`.
    /// The padded labels and the float copy are freed when the loss function returns.
    fn lm_loss(&mut self, logits: Rt, labels: Rt, vocab: u64, causal: bool) -> Rt {
        let meta = self.rts[logits as usize].meta;
        let upcast = if meta.dtype == DType::F32 {
            self.incref(self.rts[logits as usize].storage);
            logits
        } else {
            self.cast(logits, DType::F32, None, false)
        };
        let lab_shape = self
            .shapes
            .get(self.rts[labels as usize].meta.shape)
            .to_vec();
        let n = crate::ir::numel(&lab_shape);
        let mut locals = Vec::new();
        let target = if causal {
            let mut padded_shape = lab_shape.clone();
            if let Some(last) = padded_shape.last_mut() {
                *last += 1;
            }
            let pad: Arc<dyn Op> = Arc::new(
                crate::ops::Aten::new("constant_pad_nd", padded_shape).not_differentiable(),
            );
            let padded = self.call(&pad, &[labels], &[], None, None, None)[0];
            // `[..., 1:].contiguous()` copies, except with one row, where the slice is already
            // contiguous and stays a view of the padded labels
            let rows: u64 = lab_shape[..lab_shape.len().saturating_sub(1)]
                .iter()
                .product();
            let shift = if rows == 1 {
                crate::ops::Aten::view("slice", lab_shape.clone()).not_differentiable()
            } else {
                crate::ops::Aten::new("clone", lab_shape.clone()).not_differentiable()
            };
            let clone: Arc<dyn Op> = Arc::new(shift);
            let shifted = self.call(&clone, &[padded], &[], None, None, None)[0];
            locals.push(padded);
            shifted
        } else {
            self.incref(self.rts[labels as usize].storage);
            labels
        };
        let flat: Arc<dyn Op> = Arc::new(crate::ops::Aten::view("view", vec![n, vocab]));
        let flat_logits = self.call(&flat, &[upcast], &[], None, None, None)[0];
        let flat_t: Arc<dyn Op> = Arc::new(crate::ops::Aten::view("view", vec![n]));
        let flat_target = self.call(&flat_t, &[target], &[], None, None, None)[0];
        let loss = self.cross_entropy(flat_logits, flat_target);
        for r in [flat_target, target, flat_logits, upcast]
            .into_iter()
            .chain(locals)
        {
            self.release_rt(r);
        }
        loss
    }

    fn finish_region_node(&mut self, i: usize) {
        if let Some(r) = self.tape[i].region {
            if self.regions[r].lowest_tape == Some(i) {
                // the keyword arguments go before the positional hidden states (truth traces of
                // checkpointed Gemma3 and Llama layers: the position embeddings, then the input)
                let frame = std::mem::take(&mut self.regions[r].frame);
                if let Some((first, rest)) = frame.split_first() {
                    for &(_, rt) in rest {
                        self.release_rt(rt);
                    }
                    self.release_rt(first.1);
                }
            }
        }
    }

    /// Creates the optimizer state of `params`, one parameter's states in a row.
    fn create_optimizer_states(&mut self, params: &[usize]) {
        let opt = self.cfg.optimizer;
        let mut shared = opt.shared_state();
        for &i in params {
            let meta = self.param_meta(ParamId(i as u32));
            if !shared.is_empty() && opt.uses_shared_state(self.shapes.get(meta.shape)) {
                for (n, shape, dtype) in std::mem::take(&mut shared) {
                    // held for the rest of the run: never released
                    let meta = self.meta(&shape, dtype);
                    self.new_storage(meta, Category::OptimizerStates, Label::new(n), None);
                }
            }
            let module = Some(self.g.params[i].module);
            let states = opt.state_tensors(self.shapes.get(meta.shape), meta.dtype);
            self.opt_state[i] = states
                .into_iter()
                .map(|(n, shape, dtype)| {
                    let m = self.meta_like(meta.shape, &shape, dtype);
                    self.new_storage(m, Category::OptimizerStates, Label::new(n), module)
                })
                .collect();
        }
    }

    /// `scaler.step(opt)` with a fused optimizer, up to its `step` (torch/amp/grad_scaler.py):
    /// `_check_inf_per_device` runs `_unscale_grads_` with a dummy scale of 1 (a 0-d one and a
    /// found-inf flag, each copied per device; the flag's copy is kept until `update()`), then
    /// `found_inf = sum(per-device flags)` and `grad_scale = _scale * 1` are handed to the fused
    /// kernel. Returns the kept flag, and `grad_scale` and `found_inf` (freed after the step, in
    /// that order: `del optimizer.grad_scale; del optimizer.found_inf`).
    fn fused_scaler_step_start(&mut self) -> (u32, [u32; 2]) {
        let scalar = Meta {
            shape: self.shapes.add(&[]),
            dtype: DType::F32,
        };
        let new = |s: &mut Self| {
            s.new_storage(
                scalar,
                Category::Temporaries,
                Label::new("GradScaler"),
                None,
            )
        };
        let dummy_inv_scale = new(self);
        let found_inf = new(self);
        // `_MultiDeviceReplicator.get(device)` copies: the flag's first (an argument evaluated
        // first), kept in `found_inf_per_device`; the scale's, dropped with the replicator
        let kept = new(self);
        let inv_copy = new(self);
        // `_unscale_grads_` returns (its replicators go), then `_check_inf_per_device`'s locals
        self.decref(inv_copy);
        self.decref(dummy_inv_scale);
        self.decref(found_inf);
        let found_sum = new(self);
        let grad_scale = new(self);
        (kept, [grad_scale, found_sum])
    }

    /// A per-parameter step loop ([`Optimizer::parameter_loop`]): each temporary held by its
    /// local until the local is rebound, the locals cleared in order when the loop's function
    /// returns.
    fn parameter_loop(&mut self, trainable: &[usize]) {
        let opt = self.cfg.optimizer;
        let names = opt.loop_locals();
        let mut locals: Vec<Option<u32>> = vec![None; names.len()];
        for &i in trainable {
            let meta = self.param_meta(ParamId(i as u32));
            let module = Some(self.g.params[i].module);
            for step in opt.parameter_loop(self.shapes.get(meta.shape)) {
                // the local rebound, and what it held before
                let (local, value) = match step {
                    LoopStep::Bind(local, shape) => {
                        let m = self.meta_like(meta.shape, &shape, meta.dtype);
                        let lbl = Label::new(names[local]);
                        (
                            local,
                            Some(self.new_storage(m, Category::Temporaries, lbl, module)),
                        )
                    }
                    LoopStep::Alias(local, from) => {
                        let value = locals[from];
                        if let Some(t) = value {
                            self.incref(t);
                        }
                        (local, value)
                    }
                    LoopStep::Transient(shape) => {
                        let m = self.meta_like(meta.shape, &shape, meta.dtype);
                        let lbl = Label::new("step temporary");
                        let t = self.new_storage(m, Category::Temporaries, lbl, module);
                        self.decref(t);
                        continue;
                    }
                };
                if let Some(old) = std::mem::replace(&mut locals[local], value) {
                    self.decref(old);
                }
            }
        }
        for t in locals.into_iter().flatten() {
            self.decref(t);
        }
    }

    fn optimizer_step(&mut self, first: bool) {
        let opt = self.cfg.optimizer;
        let trainable: Vec<usize> = (0..self.g.params.len())
            .filter(|&i| self.param_grad[i].is_some())
            .collect();
        let mut scaler_tmp = Vec::new();
        let mut fused_args = None;
        if self.cfg.precision.uses_grad_scaler() && opt.is_fused() {
            let (kept, args) = self.fused_scaler_step_start();
            scaler_tmp.push(kept);
            fused_args = Some(args);
        } else if self.cfg.precision.uses_grad_scaler() {
            // scaler.unscale_(opt): inv_scale = _scale.double().reciprocal().float(); found_inf;
            // _amp_foreach_non_finite_check_and_unscale_ works in place; two scalar copies for
            // the per-device bookkeeping, one of which lives until scaler.update()
            let scalar_shape = self.shapes.add(&[]);
            let scalar = |dtype| Meta {
                shape: scalar_shape,
                dtype,
            };
            let lbl = Label::new("GradScaler");
            let d = self.new_storage(scalar(DType::F64), Category::Temporaries, lbl, None);
            let rcp = self.new_storage(scalar(DType::F64), Category::Temporaries, lbl, None);
            self.decref(d);
            let inv = self.new_storage(scalar(DType::F32), Category::Temporaries, lbl, None);
            self.decref(rcp);
            let found = self.new_storage(scalar(DType::F32), Category::Temporaries, lbl, None);
            let kept = self.new_storage(scalar(DType::F32), Category::Temporaries, lbl, None);
            let copy = self.new_storage(scalar(DType::F32), Category::Temporaries, lbl, None);
            self.decref(copy);
            self.decref(inv);
            self.decref(found);
            scaler_tmp.push(kept);
        }
        if first && opt.state_init() == StateInit::FirstStep {
            self.create_optimizer_states(&trainable);
        }
        // after the fused step; the inf flag kept for scaler.update() goes last, below
        for t in fused_args.into_iter().flatten() {
            self.decref(t);
        }
        if opt.step_temporaries() == StepTemporaries::PerParameter {
            self.parameter_loop(&trainable);
        }
        let lists = opt.step_temporary_lists();
        let mut temps = Vec::with_capacity(lists as usize * trainable.len());
        for _ in 0..lists {
            for &i in &trainable {
                let meta = self.param_meta(ParamId(i as u32));
                temps.push(self.new_storage(
                    meta,
                    Category::Temporaries,
                    Label::new("foreach step temporary"),
                    Some(self.g.params[i].module),
                ));
            }
        }
        // each list is a Python list the step function drops when it returns: lists in the
        // order they were made, each one's tensors last first (CPython's list_dealloc walks
        // back; truth traces of AdamW's exp_avg_sq_sqrt)
        for list in temps.chunks(trainable.len().max(1)) {
            for &t in list.iter().rev() {
                self.decref(t);
            }
        }
        for t in scaler_tmp {
            self.decref(t);
        }
    }
}

/// Computes, for every node, the graph tensors whose last reference ends after it.
fn release_schedule(g: &Graph) -> ReleaseSchedule {
    let n_t = g.tensors.len();
    let mut last: Vec<Option<usize>> = vec![None; n_t];
    for (i, node) in g.nodes.iter().enumerate() {
        for t in node.inputs.iter().chain(node.outputs.iter()) {
            let l = &mut last[t.0 as usize];
            *l = Some(l.map_or(i, |x| x.max(i)));
        }
    }
    for s in &g.scopes {
        if s.end == 0 {
            continue;
        }
        for t in &s.inputs {
            let l = &mut last[t.0 as usize];
            let e = s.end as usize - 1;
            *l = Some(l.map_or(e, |x| x.max(e)));
        }
    }
    for &(t, end) in &g.holds {
        if end == 0 {
            continue;
        }
        let l = &mut last[t.0 as usize];
        let e = end as usize - 1;
        *l = Some(l.map_or(e, |x| x.max(e)));
    }
    // the hold whose frame's return is a tensor's last reference (the outermost, when frames
    // return together)
    let mut by_hold: Vec<Option<u32>> = vec![None; n_t];
    for (h, &(t, end)) in g.holds.iter().enumerate() {
        if end > 0 && last[t.0 as usize] == Some(end as usize - 1) {
            by_hold[t.0 as usize] = Some(h as u32);
        }
    }
    // by node: the arguments an op used last, in argument order (CPython drops a call's
    // arguments first to last, a binary operator's left operand before its right), then other
    // tensors whose last reference is the op (outputs nobody reads), newest first; then what
    // frames release as they return: inner frames first (their holds were recorded first), each
    // frame's in the order it took them (CPython clears a frame's locals first to last); then
    // module calls' arguments that only the caller's variable kept, which the caller rebinds
    // once the call has returned (truth traces: a decoder layer's normed input goes after the
    // attention's `query_states`)
    // parameters used as activations, the model's inputs and outputs are never released here
    for t in g.inputs.iter().chain(&g.outputs) {
        last[t.0 as usize] = None;
    }
    for (l, td) in last.iter_mut().zip(&g.tensors) {
        if td.param.is_some() {
            *l = None;
        }
    }
    // the module call whose argument a tensor is when the call's return is its last reference
    // (the outermost of calls returning together)
    let mut by_scope: Vec<Option<u32>> = vec![None; n_t];
    for (k, s) in g.scopes.iter().enumerate() {
        for t in &s.inputs {
            let i = t.0 as usize;
            // a call of one node (a leaf module) has no frame of its own whose locals go first
            if s.end > s.first + 1 && last[i] == Some(s.end as usize - 1) && by_hold[i].is_none() {
                by_scope[i] = Some(k as u32);
            }
        }
    }
    let mut starts = vec![0u32; g.nodes.len() + 1];
    for l in last.iter().flatten() {
        starts[l + 1] += 1;
    }
    for n in 0..g.nodes.len() {
        starts[n + 1] += starts[n];
    }
    let mut fill = starts.clone();
    let mut tensors = vec![TensorId(0); starts[g.nodes.len()] as usize];
    let mut placed = vec![false; n_t];
    for (n, node) in g.nodes.iter().enumerate() {
        for t in &node.inputs {
            let i = t.0 as usize;
            if last[i] == Some(n) && by_hold[i].is_none() && by_scope[i].is_none() && !placed[i] {
                placed[i] = true;
                tensors[fill[n] as usize] = *t;
                fill[n] += 1;
            }
        }
    }
    for (t, l) in last.iter().enumerate().rev() {
        if let (Some(l), None, None, false) = (*l, by_hold[t], by_scope[t], placed[t]) {
            tensors[fill[l] as usize] = TensorId(t as u32);
            fill[l] += 1;
        }
    }
    for (h, &(t, _)) in g.holds.iter().enumerate() {
        let t = t.0 as usize;
        if let (Some(l), true) = (last[t], by_hold[t] == Some(h as u32)) {
            tensors[fill[l] as usize] = TensorId(t as u32);
            fill[l] += 1;
        }
    }
    for (k, s) in g.scopes.iter().enumerate() {
        for t in &s.inputs {
            let i = t.0 as usize;
            if let (Some(l), Some(true)) = (last[i], by_scope[i].map(|b| b == k as u32)) {
                if !placed[i] {
                    placed[i] = true;
                    tensors[fill[l] as usize] = *t;
                    fill[l] += 1;
                }
            }
        }
    }
    ReleaseSchedule { starts, tensors }
}

/// For every node, the graph tensors whose last reference ends after it: node `n`'s are
/// `tensors[starts[n]..starts[n + 1]]`.
#[derive(Debug, Default)]
struct ReleaseSchedule {
    starts: Vec<u32>,
    tensors: Vec<TensorId>,
}

impl ReleaseSchedule {
    fn range(&self, n: usize) -> std::ops::Range<usize> {
        self.starts[n] as usize..self.starts[n + 1] as usize
    }
}

/// Resolves the checkpoint configuration into node ranges.
fn checkpoint_regions(g: &Graph, specs: &[Checkpoint]) -> Result<Vec<Region>, SimError> {
    let available = || {
        g.top_level_children()
            .iter()
            .map(|m| m.path.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut regions = Vec::new();
    let mut push = |first: u32, end: u32, mut inputs: Vec<TensorId>| {
        // tensors the region reads that were made before it and are not among the call's
        // arguments (a closure's captures, or a container such as a ModuleList that Python never
        // calls) are kept for the recomputation too
        for node in &g.nodes[first as usize..end as usize] {
            for &t in &node.inputs {
                let outside = g.tensor(t).param.is_none()
                    && g.tensor(t)
                        .producer
                        .is_none_or(|p| p.0 < first || p.0 >= end);
                if outside && !inputs.contains(&t) {
                    inputs.push(t);
                }
            }
        }
        if end > first {
            regions.push(Region {
                first: first as usize,
                end: end as usize,
                inputs,
                frame: Vec::new(),
                recomputed: false,
                lowest_tape: None,
                last_saving: None,
            });
        }
    };
    for spec in specs {
        match spec {
            Checkpoint::Module(name) => {
                let m = g
                    .find_module(name)
                    .ok_or_else(|| SimError::UnknownCheckpointModule {
                        name: name.clone(),
                        available: available(),
                    })?;
                for s in g.scopes.iter().filter(|s| s.module == m) {
                    push(s.first, s.end, s.inputs.to_vec());
                }
            }
            Checkpoint::Sequential { module, segments } => {
                let m = g
                    .find_module(module)
                    .ok_or_else(|| SimError::UnknownCheckpointModule {
                        name: module.clone(),
                        available: available(),
                    })?;
                let children: Vec<&crate::ir::Scope> = g
                    .scopes
                    .iter()
                    .filter(|s| g.modules[s.module.0 as usize].parent == Some(m))
                    .collect();
                let mut children = children;
                children.sort_by_key(|s| s.first);
                if *segments == 0 || children.is_empty() {
                    return Err(SimError::BadSegments {
                        name: module.clone(),
                        segments: *segments,
                        reason: "needs at least one segment and a module with children".into(),
                    });
                }
                // torch.utils.checkpoint.checkpoint_sequential: segment_size = len // segments;
                // the first segments - 1 segments are checkpointed, the rest runs normally
                let n = children.len();
                let seg = n / *segments as usize;
                if seg == 0 {
                    return Err(SimError::BadSegments {
                        name: module.clone(),
                        segments: *segments,
                        reason: format!("`{module}` has only {n} children"),
                    });
                }
                for k in 0..(*segments as usize - 1) {
                    let (a, b) = (k * seg, (k + 1) * seg);
                    push(
                        children[a].first,
                        children[b - 1].end,
                        children[a].inputs.to_vec(),
                    );
                }
            }
        }
    }
    regions.sort_by_key(|r| r.first);
    // nested or overlapping regions: keep the outermost
    let mut kept: Vec<Region> = Vec::new();
    for r in regions {
        if kept.last().map(|k| r.first < k.end).unwrap_or(false) {
            continue;
        }
        kept.push(r);
    }
    Ok(kept)
}

/// Simulates `cfg` over `graph`. The caching-allocator model moves to a second thread once it has
/// had a few milliseconds of work on the caller's ([`simulate_on_this_thread`] gives the same
/// results on the caller's alone).
pub fn simulate(graph: &Graph, cfg: &StepConfig) -> Result<Simulation, SimError> {
    validate_graph(graph)?;
    run(graph, cfg, ModelThread::Auto)
}

/// [`simulate`] without a second thread: for callers that already run simulations in parallel,
/// and for the test that the two agree.
pub fn simulate_on_this_thread(graph: &Graph, cfg: &StepConfig) -> Result<Simulation, SimError> {
    validate_graph(graph)?;
    run(graph, cfg, ModelThread::Never)
}

/// [`simulate`] with the allocator model on a second thread from the start whatever the model's
/// work and the CPUs: for the test that the threaded path agrees with [`simulate_on_this_thread`].
#[doc(hidden)]
pub fn simulate_with_allocator_thread(
    graph: &Graph,
    cfg: &StepConfig,
) -> Result<Simulation, SimError> {
    validate_graph(graph)?;
    run(graph, cfg, ModelThread::Always)
}

/// Checks what the simulator relies on: every node input exists and is produced before use (or
/// is a graph input or a parameter), and the graph has an output.
fn validate_graph(g: &Graph) -> Result<(), SimError> {
    let n_t = g.tensors.len();
    let mut ready = vec![false; n_t];
    for &t in &g.inputs {
        if (t.0 as usize) < n_t {
            ready[t.0 as usize] = true;
        }
    }
    for (i, t) in g.tensors.iter().enumerate() {
        if t.param.is_some() {
            ready[i] = true;
        }
    }
    for (n, node) in g.nodes.iter().enumerate() {
        for t in &node.inputs {
            if !ready.get(t.0 as usize).copied().unwrap_or(false) {
                return Err(SimError::InvalidGraph(format!(
                    "node {n} ({}) in `{}` reads tensor {} before it is produced",
                    node.op.kind(),
                    g.module_path(node.module),
                    t.0
                )));
            }
        }
        for t in &node.outputs {
            if let Some(r) = ready.get_mut(t.0 as usize) {
                *r = true;
            }
        }
    }
    if g.outputs.is_empty()
        || g.outputs
            .iter()
            .any(|t| !ready.get(t.0 as usize).copied().unwrap_or(false))
    {
        return Err(SimError::InvalidGraph(
            "the graph has no produced output".into(),
        ));
    }
    Ok(())
}

fn run(g: &Graph, cfg: &StepConfig, thread: ModelThread) -> Result<Simulation, SimError> {
    let regions = if cfg.mode == Mode::Train {
        checkpoint_regions(g, &cfg.checkpoint)?
    } else {
        Vec::new()
    };
    let mut region_of_node = vec![None; g.nodes.len()];
    for (i, r) in regions.iter().enumerate() {
        for slot in &mut region_of_node[r.first..r.end] {
            *slot = Some(i);
        }
    }
    // room for what a training step makes (about 3 storages per node and iteration, a
    // parameter's own, its gradient and optimizer states; a generation makes more), so that the
    // lists are seldom copied as they grow, and not much more: what is reserved and never touched
    // still widens the heap (a copy is only slower, never wrong)
    let iterations = cfg.iterations.max(1) as usize;
    let storages = (3 * g.nodes.len() * iterations + 4 * g.params.len() + 64).min(1 << 22);
    let mut s = Sim {
        g,
        cfg,
        mem: MemoryFeed::new(
            {
                let mut model = MemoryModel::new(
                    storages,
                    // blocks: a segment or a split remainder per allocation at most, and far
                    // fewer live
                    4 * g.params.len() + 2 * g.nodes.len() + 1024,
                    cfg.record_events,
                );
                model.alloc.set_reserved_limit(cfg.reserved_limit);
                model
            },
            thread,
        ),
        storages: Vec::with_capacity(storages),
        rts: Vec::with_capacity(storages / 2),
        shapes: Shapes::for_graph(g),
        // autocast casts of the parameters add a tape node each
        // a tape node per recorded op and per autocast cast (up to one per op)
        tape: Vec::with_capacity(2 * g.nodes.len() + g.params.len() + 16),
        tape_inputs: Vec::with_capacity(3 * g.nodes.len() + g.params.len() + 16),
        tape_outputs: Vec::with_capacity(2 * g.nodes.len() + g.params.len() + 16),
        tape_saved: Vec::with_capacity(2 * g.nodes.len() + 16),
        plans: Plans::for_graph(g),
        scratch: None,
        backward_scratch: BackwardScratch::default(),
        node_inputs: Vec::new(),
        node_outputs: Vec::new(),
        grad_buf: Vec::with_capacity(storages / 2),
        param_rt: Vec::new(),
        param_grad: Vec::new(),
        opt_state: vec![SmallVec::new(); g.params.len()],
        phase_names: Vec::new(),
        module_params: {
            let mut v = vec![0; g.modules.len()];
            for p in g.params.iter().filter(|p| p.kind == ParamKind::Parameter) {
                v[p.module.0 as usize] += p.numel();
            }
            v
        },
        module_listed: vec![false; g.modules.len()],
        module_has_children: {
            let mut v = vec![false; g.modules.len()];
            for m in &g.modules {
                if let Some(p) = m.parent {
                    v[p.0 as usize] = true;
                }
            }
            v
        },
        last_layer_module: None,
        row_op_saved: 0,
        tape_of_node: vec![None; g.nodes.len()],
        scaler_initialised: false,
        grad_existed_before_backward: vec![false; g.params.len()],
        release_after: release_schedule(g),
        dropped_after: {
            let mut v: Vec<(u32, usize)> = g
                .dropped_graphs
                .iter()
                .enumerate()
                .map(|(k, d)| (d.after.0, k))
                .collect();
            v.sort_unstable();
            v
        },
        early_release: None,
        early_released: false,
        region_of_node,
        regions,
        autocast_cache: Vec::new(),
        autocast_cached: vec![None; g.params.len()],
        recompute_stop: None,
        grad_enabled: false,
        training: cfg.mode == Mode::Train,
        in_backward: false,
        recomputing: false,
        layers: Some(Vec::with_capacity(g.modules.len() + g.scopes.len())),
        sdpa: Vec::new(),
        gradient_bytes: 0,
        first_layers: Vec::new(),
        iteration: 0,
        graph_leaves: Vec::new(),
    };
    s.phase("init");
    s.phase("model");
    s.build_model();
    let train = cfg.mode == Mode::Train;
    if train {
        s.phase("optimizer");
        if cfg.optimizer.state_init() == StateInit::Constructor {
            let trainable: Vec<usize> = (0..g.params.len())
                .filter(|&i| s.rts[s.param_rt[i] as usize].requires_grad)
                .collect();
            s.create_optimizer_states(&trainable);
        }
    }
    let input_dtype = |d: DType| {
        if d.is_float() {
            cfg.precision.param_dtype()
        } else {
            d
        }
    };
    let mut x: Vec<Rt> = Vec::new();
    let mut y: Option<Rt> = None;
    let mut out: Vec<Rt> = Vec::new();
    let mut loss: Option<Rt> = None;
    let hold = vec![false; g.tensors.len()];
    let batch = g
        .inputs
        .first()
        .map(|t| g.tensor(*t).shape.first().copied().unwrap_or(1))
        .unwrap_or(1);
    for it in 1..=cfg.iterations.max(1) {
        s.iteration = it;
        s.phase(&format!("it{it}.data"));
        let mut new_x = Vec::new();
        for &t in &g.inputs {
            let d = g.tensor(t);
            let meta = Meta {
                shape: Shapes::tensor(t),
                dtype: input_dtype(d.dtype),
            };
            new_x.push(s.fresh(meta, Category::Inputs, Label::new("input"), None, false));
        }
        // a data loader yields labels with the images, in inference too
        let batch_labels = s.meta(&[batch], DType::I64);
        let new_y = match g.task {
            Task::Classification { .. } => Some(s.fresh(
                batch_labels,
                Category::Inputs,
                Label::new("labels"),
                None,
                false,
            )),
            // `labels = input_ids`: the same tensor
            Task::CausalLm { .. } => Some(match new_x.first() {
                Some(&r) => {
                    s.incref(s.rts[r as usize].storage);
                    r
                }
                None => s.fresh(
                    batch_labels,
                    Category::Inputs,
                    Label::new("labels"),
                    None,
                    false,
                ),
            }),
            Task::MaskedLm { .. } => {
                let shape = g
                    .inputs
                    .first()
                    .map(|t| g.tensor(*t).shape.clone())
                    .unwrap_or_else(|| [batch].into_iter().collect());
                let meta = s.meta(&shape, DType::I64);
                Some(s.fresh(meta, Category::Inputs, Label::new("labels"), None, false))
            }
            // the labels are graph inputs, made with the other inputs above; features have none
            Task::LossInForward | Task::Features => None,
        };
        for r in std::mem::replace(&mut x, new_x) {
            s.release_rt(r);
        }
        if let Some(r) = std::mem::replace(&mut y, new_y) {
            s.release_rt(r);
        }
        s.phase(&format!("it{it}.forward"));
        s.grad_enabled = train;
        let mut env: Vec<Option<Rt>> = vec![None; g.tensors.len()];
        for (t, &r) in g.inputs.iter().zip(&x) {
            env[t.0 as usize] = Some(r);
            s.incref(s.rts[r as usize].storage);
        }
        s.tape_of_node.fill(None);
        s.forward_nodes(&mut env, 0, g.nodes.len(), &hold);
        if let Some(l) = s.layers.take() {
            s.first_layers = l;
        }
        let new_out: Vec<Rt> = g.outputs.iter().filter_map(|t| env[t.0 as usize]).collect();
        for t in &g.inputs {
            if let Some(r) = env[t.0 as usize].take() {
                s.release_rt(r);
            }
        }
        for r in std::mem::replace(&mut out, new_out) {
            s.release_rt(r);
        }
        let has_loss = y.is_some() || g.task == Task::LossInForward;
        if let (true, true, Some(&logits)) = (train, has_loss, out.first()) {
            s.phase(&format!("it{it}.loss"));
            let label_rt = y.unwrap_or(logits);
            let l = match g.task {
                Task::Classification { .. } => vec![s.cross_entropy(logits, label_rt)],
                Task::CausalLm { vocab } => vec![s.lm_loss(logits, label_rt, vocab, true)],
                Task::MaskedLm { vocab } => vec![s.lm_loss(logits, label_rt, vocab, false)],
                // `loss = out.loss`: one more reference to the forward's first output (features
                // never get here: without labels there is no loss)
                Task::LossInForward | Task::Features => {
                    s.incref(s.rts[logits as usize].storage);
                    vec![logits]
                }
            };
            // `loss = ...` rebinds inside the autocast block; its weight cache goes at the exit
            if let Some(old) = loss.replace(l[0]) {
                // the old loss was the last reference to the previous iteration's graph, which
                // its TensorImpl drops (`autograd_meta_`) before its storage (truth traces of a
                // checkpointed T5's leaf position bias and its gradient, then the loss)
                s.release_graph_leaves(it);
                s.release_rt(old);
            }
            s.clear_autocast_cache();
            s.phase(&format!("it{it}.zero_grad"));
            for i in (0..s.param_grad.len()).filter(|_| cfg.zero_grad_set_to_none) {
                if let Some(g) = s.param_grad[i].take() {
                    s.decref(g);
                }
            }
            s.phase(&format!("it{it}.backward"));
            // the saved tensors' pack hooks hold a region's frame: it goes with the last of them,
            // at the region's lowest saving node (one that saves nothing: its lowest node)
            let mut lowest: Vec<(Option<usize>, Option<usize>)> =
                vec![(None, None); s.regions.len()];
            for (i, t) in s.tape.iter().enumerate() {
                if let Some(l) = t.region.and_then(|r| lowest.get_mut(r)) {
                    l.0 = l.0.or(Some(i));
                    if t.saves {
                        l.1 = l.1.or(Some(i));
                    }
                }
            }
            for (r, (any, saving)) in lowest.into_iter().enumerate() {
                s.regions[r].recomputed = false;
                s.regions[r].lowest_tape = saving.or(any);
            }
            s.grad_enabled = false;
            s.backward(l[0]);
            if it == 1 {
                s.gradient_bytes = s
                    .param_grad
                    .iter()
                    .flatten()
                    .map(|&g| s.storages[g as usize].bytes)
                    .sum();
            }
            s.phase(&format!("it{it}.step"));
            s.optimizer_step(it == 1);
        } else {
            s.clear_autocast_cache();
        }
        s.grad_enabled = false;
        if cfg.free_output {
            for r in std::mem::take(&mut out).into_iter().chain(loss.take()) {
                s.release_rt(r);
            }
            s.release_graph_leaves(it + 1);
        }
    }
    let parameter_bytes = g
        .params
        .iter()
        .enumerate()
        .filter(|(_, p)| p.kind == ParamKind::Parameter)
        .map(|(i, _)| s.shapes.bytes(s.param_meta(ParamId(i as u32))))
        .sum();
    let buffer_bytes = g
        .params
        .iter()
        .enumerate()
        .filter(|(_, p)| p.kind == ParamKind::Buffer)
        .map(|(i, _)| s.shapes.bytes(s.param_meta(ParamId(i as u32))))
        .sum();
    let optimizer_state_bytes = s
        .opt_state
        .iter()
        .flatten()
        .map(|&x| s.storages[x as usize].bytes)
        .sum();
    let mut model = s.mem.finish();
    let mut phases = std::mem::take(&mut model.phases);
    for (p, name) in phases.iter_mut().zip(&mut s.phase_names) {
        p.name = std::mem::take(name);
    }
    let mut events = std::mem::take(&mut model.events);
    for e in &mut events {
        let st = &s.storages[e.storage as usize];
        e.bytes = st.bytes;
        e.label = Label {
            what: st.label_what,
            grad: st.label_grad,
        };
        e.module = st.module;
    }
    let sim = Simulation {
        peak_allocated: model.peak_allocated,
        peak_reserved: model.peak_reserved,
        out_of_memory: model.alloc.out_of_memory(),
        peak_phase: model.peak_phase,
        breakdown_at_peak: phases
            .get(model.peak_phase)
            .map_or_else(Breakdown::default, |p| p.breakdown_at_peak),
        phases,
        live_at_peak: s.live_at_peak(&model),
        layers: std::mem::take(&mut s.first_layers),
        events,
        sdpa_backends: s.sdpa.clone(),
        parameter_bytes,
        buffer_bytes,
        gradient_bytes: s.gradient_bytes,
        optimizer_state_bytes,
        segments: model.segments(),
    };
    Ok(sim)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{Add, Linear};
    use crate::GraphBuilder;

    /// x -> a = lin0(x), c = lin2(x); blk(a) reads a view of c too (as an attention reads its
    /// caller's cos/sin) -> head
    fn captured() -> Graph {
        let mut b = GraphBuilder::new("cap", "Cap");
        let x = b.input(vec![4, 16], DType::F32);
        let a = b.layer("lin0", Linear::new(16, 16), &[x]);
        let c = b.layer("lin2", Linear::new(16, 16), &[x]);
        let y = b.module("blk", "Block", &[a], |b| {
            let v = b.op(crate::ops::Aten::view("view", vec![4, 16]), &[c]);
            let h = b.layer("lin1", Linear::new(16, 16), &[a]);
            b.op(Add { inplace: false }, &[h, v])
        });
        let y = b.layer("head", Linear::new(16, 4), &[y]);
        b.finish(&[y], Task::Classification { num_classes: 4 })
            .expect("graph")
    }

    #[test]
    fn a_checkpointed_module_may_read_tensors_its_caller_did_not_pass() {
        let g = captured();
        let plain = simulate(&g, &StepConfig::default()).expect("plain");
        let step = StepConfig {
            checkpoint: vec![Checkpoint::Module("blk".into())],
            ..StepConfig::default()
        };
        let ckpt = simulate(&g, &step).expect("checkpointed");
        // the frame keeps c (one 512-byte block) until the recomputation
        assert!(ckpt.peak_allocated <= plain.peak_allocated + 512);
        assert_eq!(ckpt.gradient_bytes, plain.gradient_bytes);
    }

    /// The index of phase `name` in `sim.phases`.
    fn phase_index(sim: &Simulation, name: &str) -> u16 {
        sim.phases
            .iter()
            .position(|p| p.name == name)
            .expect("phase") as u16
    }

    /// Gradients one backward node makes in `phase`, allocated and freed, for op `what`.
    fn grads_made(sim: &Simulation, phase: &str, what: &str) -> (usize, usize) {
        let p = phase_index(sim, phase);
        let of = |alloc: bool| {
            sim.events
                .iter()
                .filter(|e| e.phase == p && e.alloc == alloc && e.label.grad)
                .filter(|e| e.label.what == what)
                .count()
        };
        (of(true), of(false))
    }

    #[test]
    fn fused_attention_makes_every_gradient_of_q_k_v() {
        // q requires grad (a Linear's output), k and v (graph inputs) do not: the mem-efficient
        // kernel still makes all three, and the two nobody needs go as the node returns
        let mut b = GraphBuilder::new("attn", "Attn");
        let x = b.input(vec![2, 4, 8, 16], DType::F32);
        let k = b.input(vec![2, 4, 8, 16], DType::F32);
        let v = b.input(vec![2, 4, 8, 16], DType::F32);
        let q = b.layer("q", Linear::new(16, 16), &[x]);
        let sdpa = crate::ops::ScaledDotProductAttention {
            dropout_p: 0.0,
            causal: true,
            row_stats_temporary: false,
            kv_contiguous: false,
        };
        let o = b.op(sdpa, &[q, k, v]);
        let o = b.op(crate::ops::Aten::view("reshape", vec![64, 16]), &[o]);
        let y = b.layer("head", Linear::new(16, 4), &[o]);
        let g = b
            .finish(&[y], Task::Classification { num_classes: 4 })
            .expect("graph");
        let step = StepConfig {
            record_events: true,
            ..StepConfig::default()
        };
        let sim = simulate(&g, &step).expect("simulation");
        let what = "scaled_dot_product_attention";
        // q's gradient lives on into q's Linear; k's and v's are freed with the node
        assert_eq!(grads_made(&sim, "it1.backward", what), (3, 3));
    }

    #[test]
    fn autocast_softmax_reads_float16_directly_and_casts_bfloat16() {
        // lin (autocast dtype) -> softmax -> head: under float16 autocast a plain softmax or
        // log_softmax makes its float32 output from the half input (`half_to_float`), under
        // bfloat16 autocast it casts the input up first; cross_entropy's log_softmax (its dtype
        // given) runs in the half dtype with no cast
        let rows = 64 * 256;
        type AddOp = fn(&mut GraphBuilder, TensorId) -> TensorId;
        let forward_allocs = |add: AddOp, precision: Precision| {
            let mut b = GraphBuilder::new("sm", "Sm");
            let x = b.input(vec![64, 256], DType::F32);
            let h = b.layer("lin", Linear::new(256, 256), &[x]);
            let p = add(&mut b, h);
            let y = b.layer("head", Linear::new(256, 4), &[p]);
            let g = b
                .finish(&[y], Task::Classification { num_classes: 4 })
                .expect("graph");
            let step = StepConfig {
                record_events: true,
                precision,
                ..StepConfig::default()
            };
            let sim = simulate(&g, &step).expect("simulation");
            let p = phase_index(&sim, "it1.forward");
            let events: Vec<_> = sim
                .events
                .iter()
                .filter(|e| e.phase == p && e.alloc)
                .collect();
            let made: Vec<u64> = events
                .iter()
                .filter(|e| e.label.what.ends_with("softmax"))
                .map(|e| e.bytes)
                .collect();
            // the one cast of an activation that size (the weights' casts are smaller)
            let input_casts = events
                .iter()
                .filter(|e| e.label.what == "autocast cast" && e.bytes == rows * 4)
                .count();
            (made, input_casts)
        };
        let softmax: AddOp = |b, h| b.op(crate::ops::Softmax { dim: 1 }, &[h]);
        let log_softmax: AddOp = |b, h| {
            let op = LogSoftmax {
                dim: 1,
                dtype_given: false,
            };
            b.op(op, &[h])
        };
        for add in [softmax, log_softmax] {
            assert_eq!(forward_allocs(add, Precision::AmpFp16), (vec![rows * 4], 0));
            assert_eq!(forward_allocs(add, Precision::AmpBf16), (vec![rows * 4], 1));
        }
        let of_loss: AddOp = |b, h| b.op(LogSoftmax::of_cross_entropy(1), &[h]);
        assert_eq!(
            forward_allocs(of_loss, Precision::AmpFp16),
            (vec![rows * 2], 0)
        );
    }
}
