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

use crate::allocator::{BlockId, CachingAllocator};
use crate::dtype::{DType, Precision};
use crate::ir::{Graph, ModuleId, ParamId, ParamKind, Shape, Task, TensorId};
use crate::ops::{
    Alias, Autocast, GradIn, LogSoftmax, NllLoss, Op, OpCtx, Saved, Scratch, SdpaBackend,
    TensorMeta,
};
use crate::optim::{Optimizer, StateInit, StepTemporaries};

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

/// Per-module-call figures for the layer table (first iteration).
#[derive(Debug, Clone)]
pub struct LayerStats {
    /// Module path.
    pub name: String,
    /// Module class.
    pub op: String,
    /// Output shape of the call.
    pub output_shape: Shape,
    /// Parameters owned directly by the module (first call only, 0 after).
    pub parameters: u64,
    /// Bytes that autograd saved for backward in this call (first saver of a storage counts it).
    pub saved_bytes: u64,
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

#[derive(Debug, Clone)]
struct Storage {
    bytes: u64,
    block: Option<BlockId>,
    refs: u32,
    category: Category,
    label: Label,
    module: Option<ModuleId>,
    meta: TensorMeta,
    alive: bool,
    saved: bool,
}

#[derive(Debug, Clone)]
struct RtTensor {
    storage: u32,
    meta: TensorMeta,
    requires_grad: bool,
    param: Option<ParamId>,
}

#[derive(Debug, Clone)]
struct TapeNode {
    label: Label,
    module: Option<ModuleId>,
    /// rt ids of the inputs (activations then parameters) with their gradient rule
    inputs: Vec<(Option<Rt>, GradIn, TensorMeta)>,
    outputs: Vec<Rt>,
    saved: Vec<u32>,
    temporaries: Vec<u64>,
    /// the backward kernel's scratch program (run before the gradients)
    scratch: Vec<Scratch>,
    /// allocate input gradients last argument first (`mm`: mat2 before mat1)
    grads_right_to_left: bool,
    region: Option<usize>,
    /// whether autograd saved tensors for it: in a checkpointed region, the first such node
    /// backward runs triggers the recomputation (nodes without saved tensors run before it)
    saves: bool,
    /// gradients are computed like the output, then reduced / cast (`Op::grads_like_output`)
    grads_like_output: bool,
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
    alloc: CachingAllocator,
    storages: Vec<Storage>,
    rts: Vec<RtTensor>,
    tape: Vec<TapeNode>,
    grad_buf: Vec<Option<u32>>,
    param_rt: Vec<Rt>,
    param_grad: Vec<Option<u32>>,
    opt_state: Vec<Vec<u32>>,
    phases: Vec<PhaseStats>,
    cur_cat: Breakdown,
    peak_allocated: u64,
    peak_reserved: u64,
    peak_phase: usize,
    peak_cat: Breakdown,
    events: Vec<Event>,
    /// (storage, allocated?) for every block event, to rebuild what is alive at the peak
    trail: Vec<(u32, bool)>,
    module_params: Vec<u64>,
    module_listed: Vec<bool>,
    module_has_children: Vec<bool>,
    last_layer_module: Option<ModuleId>,
    scaler_initialised: bool,
    /// which parameters had a `.grad` when the current backward started
    grad_existed_before_backward: Vec<bool>,
    /// the tape entry each graph node recorded in this iteration's forward
    tape_of_node: Vec<Option<usize>>,
    // forward bookkeeping
    release_after: Vec<Vec<TensorId>>,
    region_of_node: Vec<Option<usize>>,
    regions: Vec<Region>,
    autocast_cache: Vec<(ParamId, Rt)>,
    /// the node a running recomputation stops at
    recompute_stop: Option<usize>,
    grad_enabled: bool,
    training: bool,
    in_backward: bool,
    recomputing: bool,
    layers: Option<Vec<LayerStats>>,
    sdpa: Vec<SdpaBackend>,
    gradient_bytes: u64,
    peak_event: u64,
    first_layers: Vec<LayerStats>,
    /// the iteration running (1-based)
    iteration: u32,
    /// leaves that require grad and are not parameters (see `Op::leaf_requires_grad` and
    /// `Graph::grad_leaves`), kept by their iteration's autograd graph until its loss is released
    graph_leaves: Vec<GraphLeaf>,
}

const NO_GRAD: GradIn = GradIn::None;

impl<'g> Sim<'g> {
    fn phase(&mut self, name: &str) {
        let a = self.alloc.allocated();
        let r = self.alloc.reserved();
        self.phases.push(PhaseStats {
            name: name.to_string(),
            allocated_after: a,
            peak_allocated: a,
            reserved_after: r,
            peak_reserved: r,
            allocated_bytes: 0,
            freed_bytes: 0,
            breakdown_at_peak: self.cur_cat,
        });
    }

    fn bump(&mut self) {
        let a = self.alloc.allocated();
        let r = self.alloc.reserved();
        let ph = self.phases.len() - 1;
        let p = &mut self.phases[ph];
        if a > p.peak_allocated {
            p.peak_allocated = a;
            p.breakdown_at_peak = self.cur_cat;
        }
        p.peak_reserved = p.peak_reserved.max(r);
        p.allocated_after = a;
        p.reserved_after = r;
        if a > self.peak_allocated {
            self.peak_allocated = a;
            self.peak_event = self.trail.len() as u64;
            self.peak_phase = ph;
            self.peak_cat = self.cur_cat;
        }
        self.peak_reserved = self.peak_reserved.max(r);
    }

    /// The largest tensors alive after the first `n` block events.
    fn live_after(&self, n: usize) -> Vec<LiveTensor> {
        let mut alive = vec![false; self.storages.len()];
        for &(sid, a) in &self.trail[..n.min(self.trail.len())] {
            alive[sid as usize] = a;
        }
        let mut live: Vec<LiveTensor> = alive
            .iter()
            .enumerate()
            .filter(|(_, &a)| a)
            .map(|(i, _)| {
                let s = &self.storages[i];
                LiveTensor {
                    bytes: crate::allocator::round_size(s.bytes),
                    shape: s.meta.shape.clone(),
                    dtype: s.meta.dtype,
                    category: s.category,
                    label: s.label,
                    module: s
                        .module
                        .map(|m| self.g.module_path(m).to_string())
                        .unwrap_or_default(),
                }
            })
            .collect();
        live.sort_by_key(|l| std::cmp::Reverse(l.bytes));
        live.truncate(20);
        live
    }

    fn record(&mut self, alloc: bool, sid: u32, block: u64) {
        if !self.cfg.record_events {
            return;
        }
        let s = &self.storages[sid as usize];
        self.events.push(Event {
            phase: (self.phases.len() - 1) as u16,
            alloc,
            storage: sid,
            bytes: s.bytes,
            block,
            category: s.category,
            label: s.label,
            module: s.module,
            allocated: self.alloc.allocated(),
            reserved: self.alloc.reserved(),
        });
    }

    /// Allocates a storage with one reference.
    fn new_storage(
        &mut self,
        meta: TensorMeta,
        category: Category,
        label: Label,
        module: Option<ModuleId>,
    ) -> u32 {
        let bytes = meta.bytes();
        let block = self.alloc.malloc(bytes);
        let bsize = block.map(|b| self.alloc.block_size(b)).unwrap_or(0);
        self.cur_cat.0[category.index()] += bsize;
        let ph = self.phases.len() - 1;
        self.phases[ph].allocated_bytes += bsize;
        self.storages.push(Storage {
            bytes,
            block,
            refs: 1,
            category,
            label,
            module,
            meta,
            alive: true,
            saved: false,
        });
        let sid = self.storages.len() as u32 - 1;
        if block.is_some() {
            self.trail.push((sid, true));
            self.bump();
            self.record(true, sid, bsize);
        }
        sid
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
            if let Some(b) = s.block {
                let size = self.alloc.block_size(b);
                let cat = s.category;
                self.alloc.free(b);
                self.cur_cat.0[cat.index()] -= size;
                let ph = self.phases.len() - 1;
                self.phases[ph].freed_bytes += size;
                self.trail.push((sid, false));
                self.bump();
                self.record(false, sid, size);
            }
        }
    }

    fn new_rt(&mut self, storage: u32, meta: TensorMeta, requires_grad: bool) -> Rt {
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
        meta: TensorMeta,
        category: Category,
        label: Label,
        module: Option<ModuleId>,
        rg: bool,
    ) -> Rt {
        let sid = self.new_storage(meta.clone(), category, label, module);
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
                if let Some(&(_, c)) = self.autocast_cache.iter().find(|(q, _)| *q == p) {
                    self.incref(self.rts[c as usize].storage);
                    return c;
                }
            }
        }
        let src = self.rts[r as usize].clone();
        let meta = TensorMeta::new(src.meta.shape.clone(), dtype);
        let rg = src.requires_grad && self.grad_enabled;
        let c = self.fresh(
            meta.clone(),
            self.forward_category(),
            Label::new("autocast cast"),
            module,
            rg,
        );
        if rg && !self.recomputing {
            let grad = GradIn::New;
            self.tape.push(TapeNode {
                label: Label::new("cast"),
                module,
                inputs: vec![(Some(r), grad, src.meta.clone())],
                outputs: vec![c],
                saved: Vec::new(),
                temporaries: Vec::new(),
                scratch: Vec::new(),
                grads_right_to_left: false,
                region: None,
                saves: false,
                grads_like_output: false,
            });
        }
        if let (true, Some(p), true) = (cacheable, param, self.rts[r as usize].requires_grad) {
            // the cache keeps its own reference until the autocast block exits
            self.incref(self.rts[c as usize].storage);
            self.autocast_cache.push((p, c));
        }
        c
    }

    /// Runs a kernel's scratch program; returns what it left allocated.
    fn run_scratch(
        &mut self,
        program: &[Scratch],
        category: Category,
        module: Option<ModuleId>,
    ) -> Vec<u32> {
        let mut made: Vec<Option<u32>> = Vec::new();
        for step in program {
            match *step {
                Scratch::Alloc { bytes, what } => made.push(Some(self.new_storage(
                    TensorMeta::new(vec![bytes], DType::U8),
                    category,
                    Label::new(what),
                    module,
                ))),
                Scratch::Free(i) => {
                    if let Some(sid) = made.get_mut(i).and_then(Option::take) {
                        self.decref(sid);
                    }
                }
            }
        }
        made.into_iter().flatten().collect()
    }

    fn clear_autocast_cache(&mut self) {
        for (_, c) in std::mem::take(&mut self.autocast_cache) {
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
        if !self.training && op.identity_in_eval() {
            let r = inputs[0];
            self.incref(self.rts[r as usize].storage);
            return vec![r];
        }
        // 1. autocast
        let ac = self.cfg.precision.autocast_dtype();
        let mut eff: Vec<Rt> = inputs.to_vec();
        let mut eff_params: Vec<Rt> = params.iter().map(|p| self.param_rt[p.0 as usize]).collect();
        let mut casts: Vec<Rt> = Vec::new();
        if let Some(low) = ac {
            let class = op.autocast();
            let all: Vec<DType> = eff
                .iter()
                .chain(eff_params.iter())
                .map(|&r| self.rts[r as usize].meta.dtype)
                .collect();
            let target = match class {
                Autocast::LowerPrecision => Some(low),
                Autocast::Fp32 => Some(DType::F32),
                Autocast::Promote => all
                    .iter()
                    .copied()
                    .filter(|d| d.is_float())
                    .reduce(DType::promote),
                Autocast::Unlisted => None,
            };
            if let Some(t) = target {
                // the C++ autocast wrappers cast their arguments right to left (GCC's evaluation
                // order): bias, weight, then the activations, last first (truth traces)
                for slot in eff_params.iter_mut().rev().chain(eff.iter_mut().rev()) {
                    let d = self.rts[*slot as usize].meta.dtype;
                    let castable = match class {
                        Autocast::Fp32 => d == DType::F16 || d == DType::BF16,
                        _ => d.is_float() && d != t,
                    };
                    if castable && d != t {
                        let cacheable = class == Autocast::LowerPrecision;
                        let c = self.cast(*slot, t, module, cacheable);
                        casts.push(c);
                        *slot = c;
                    }
                }
            }
        }
        let in_metas: Vec<TensorMeta> = eff
            .iter()
            .map(|&r| self.rts[r as usize].meta.clone())
            .collect();
        let p_metas: Vec<TensorMeta> = eff_params
            .iter()
            .map(|&r| self.rts[r as usize].meta.clone())
            .collect();
        // 2. outputs
        let shapes_in: Vec<&[u64]> = in_metas.iter().map(|m| m.shape.as_slice()).collect();
        let out_shapes = op
            .output_shapes(&shapes_in)
            .unwrap_or_else(|_| vec![in_metas[0].shape.clone()]);
        let mut dts: Vec<DType> = in_metas.iter().map(|m| m.dtype).collect();
        if dts.is_empty() {
            dts.push(DType::F32);
        }
        let out_dtypes = op.output_dtypes(&dts, out_shapes.len());
        let out_metas: Vec<TensorMeta> = out_shapes
            .into_iter()
            .zip(out_dtypes)
            .map(|(s, d)| TensorMeta::new(s, d))
            .collect();
        let in_rg: Vec<bool> = eff
            .iter()
            .map(|&r| self.grad_enabled && self.rts[r as usize].requires_grad)
            .collect();
        let ctx = OpCtx {
            inputs: &in_metas,
            params: &p_metas,
            outputs: &out_metas,
            training: self.training,
            inputs_require_grad: &in_rg,
        };
        let any_rg = eff
            .iter()
            .chain(eff_params.iter())
            .any(|&r| self.rts[r as usize].requires_grad);
        let records = self.grad_enabled && any_rg && op.differentiable();
        let label = Label::new(op.kind());
        let cat = if op.is_kv_cache() {
            Category::KvCache
        } else {
            self.forward_category()
        };
        // saved only for the gradient of an input that needs none (a frozen weight): not kept
        let to_save: Vec<Saved> = if records {
            op.saved_for_backward(&ctx)
                .into_iter()
                .filter(|&s| match op.saved_only_for(s) {
                    Some(k) => {
                        let r = eff.get(k).or_else(|| eff_params.get(k - eff.len().min(k)));
                        r.is_some_and(|&r| self.rts[r as usize].requires_grad)
                    }
                    None => true,
                })
                .collect()
        } else {
            Vec::new()
        };
        // a recomputation stops when its last saved tensor is packed; inputs are packed before
        // the kernel runs, so then no output is made
        let stop_before_kernel = self.recomputing
            && graph_node.is_some()
            && graph_node == self.recompute_stop
            && to_save
                .iter()
                .all(|s| matches!(s, Saved::Input(_) | Saved::Param(_)));
        let mut outs = Vec::with_capacity(out_metas.len());
        let mut extras: Vec<u32> = Vec::new();
        if !stop_before_kernel {
            let scratch = self.run_scratch(&op.forward_scratch(&ctx), cat, module);
            let leaf = op.leaf_requires_grad() && self.grad_enabled;
            match op.alias_for(&in_metas) {
                Alias::None => {
                    for m in &out_metas {
                        let r = self.fresh(m.clone(), cat, label, module, records || leaf);
                        // a recomputed leaf belongs to the discarded recomputation graph
                        if leaf && !self.recomputing {
                            self.keep_graph_leaf(r);
                        }
                        outs.push(r);
                    }
                }
                Alias::View(i) | Alias::InPlace(i) => {
                    let sid = self.rts[eff[i] as usize].storage;
                    for m in &out_metas {
                        self.incref(sid);
                        outs.push(self.new_rt(sid, m.clone(), records));
                    }
                }
            }
            for sid in scratch {
                self.decref(sid);
            }
            if let Some(b) = op.sdpa_backend(&ctx) {
                if !self.sdpa.contains(&b) {
                    self.sdpa.push(b);
                }
            }
            // 3. extras and temporaries
            let extras_meta = if records {
                op.forward_extras(&ctx)
            } else {
                op.inference_extras(&ctx)
            };
            extras = extras_meta
                .iter()
                .map(|m| self.new_storage(m.clone(), cat, label, module))
                .collect();
            for t in op.forward_temporaries(&ctx) {
                let s = self.new_storage(
                    TensorMeta::new(vec![t], DType::U8),
                    cat,
                    Label::new("temporary"),
                    module,
                );
                self.decref(s);
            }
        }
        // 4. autograd
        let keep_saved = records && (region.is_none() || self.recomputing);
        if let (false, Some(r), Some(n)) = (self.recomputing, region, graph_node) {
            if !to_save.is_empty() {
                let last = &mut self.regions[r].last_saving;
                *last = Some(last.map_or(n, |l| l.max(n)));
            }
        }
        let saves = !to_save.is_empty();
        if records || (self.recomputing && graph_node.is_some()) {
            let mut saved = Vec::new();
            if keep_saved {
                for s in to_save {
                    let sid = match s {
                        Saved::Input(i) => eff.get(i).map(|&r| self.rts[r as usize].storage),
                        Saved::Output(i) => outs.get(i).map(|&r| self.rts[r as usize].storage),
                        Saved::Param(i) => eff_params.get(i).map(|&r| self.rts[r as usize].storage),
                        Saved::Extra(i) => extras.get(i).copied(),
                    };
                    if let Some(sid) = sid {
                        if !saved.contains(&sid) {
                            self.incref(sid);
                            saved.push(sid);
                            let st = &mut self.storages[sid as usize];
                            if !st.saved && st.category != Category::Parameters {
                                st.saved = true;
                                let bytes = st.bytes;
                                if let (Some(layers), Some(_)) = (self.layers.as_mut(), graph_node)
                                {
                                    if let Some(l) = layers.last_mut() {
                                        l.saved_bytes += bytes;
                                    }
                                }
                            }
                        }
                    }
                }
            }
            if self.recomputing {
                // fill the saved tensors of the node recorded in the original forward
                if let Some(n) = graph_node {
                    if let Some(t) = self.tape_of_node[n].and_then(|i| self.tape.get_mut(i)) {
                        t.saved.extend(saved);
                    } else {
                        for s in saved {
                            self.decref(s);
                        }
                    }
                }
            } else {
                let grads = op.input_grads(&ctx);
                let mut tin = Vec::new();
                for (i, &r) in eff.iter().enumerate() {
                    let rg = self.rts[r as usize].requires_grad;
                    let gi = grads.get(i).copied().unwrap_or(GradIn::New);
                    tin.push((
                        rg.then_some(r),
                        if rg { gi } else { NO_GRAD },
                        in_metas[i].clone(),
                    ));
                }
                for (j, &r) in eff_params.iter().enumerate() {
                    let rg = self.rts[r as usize].requires_grad;
                    tin.push((
                        rg.then_some(r),
                        if rg { GradIn::New } else { NO_GRAD },
                        p_metas[j].clone(),
                    ));
                }
                if let Some(n) = graph_node {
                    self.tape_of_node[n] = Some(self.tape.len());
                }
                self.tape.push(TapeNode {
                    label,
                    module,
                    inputs: tin,
                    outputs: outs.clone(),
                    saved,
                    temporaries: op.backward_temporaries(&ctx),
                    scratch: op.backward_scratch(&ctx),
                    grads_right_to_left: op.grads_right_to_left(),
                    region,
                    saves,
                    grads_like_output: op.grads_like_output(),
                });
            }
        }
        // extras live only through saved references
        for e in extras {
            self.decref(e);
        }
        for c in casts {
            self.release_rt(c);
        }
        outs
    }

    fn param_meta(&self, p: ParamId) -> TensorMeta {
        let d = &self.g.params[p.0 as usize];
        let dtype = match d.stored_dtype {
            Some(stored) => stored,
            None if d.dtype.is_float() => self.cfg.precision.param_dtype(),
            None => d.dtype,
        };
        TensorMeta::new(d.shape.clone(), dtype)
    }

    fn build_model(&mut self) {
        let mut order: Vec<usize> = (0..self.g.params.len()).collect();
        order.sort_by_key(|&i| self.g.params[i].init_rank);
        self.param_rt = vec![0; self.g.params.len()];
        let mut temps: Vec<Option<u32>> = vec![None; self.g.init_temporaries.len()];
        for (k, i) in order.into_iter().map(Some).chain([None]).enumerate() {
            self.init_temporaries_at(k as u32, &mut temps);
            let Some(i) = i else { break };
            let p = &self.g.params[i];
            let meta = self.param_meta(ParamId(i as u32));
            let (cat, label) = match p.kind {
                ParamKind::Parameter => (Category::Parameters, "parameter"),
                ParamKind::Buffer => (Category::Buffers, "buffer"),
            };
            let sid = self.new_storage(meta.clone(), cat, Label::new(label), Some(p.module));
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
    fn init_temporaries_at(&mut self, k: u32, live: &mut [Option<u32>]) {
        let model_dtype = self.cfg.precision.param_dtype();
        let g = self.g;
        let built = k as usize >= g.params.len();
        // `earlier`: only those allocated before `k` (`Some(true)`), only the others, or all
        let free_where = |s: &mut Self, live: &mut [Option<u32>], earlier: Option<bool>| {
            for (t, slot) in g.init_temporaries.iter().zip(live.iter_mut()) {
                if t.free_at == k && earlier.is_none_or(|e| (t.alloc_at < k) == e) {
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
            if t.alloc_at == k {
                *slot = Some(self.new_storage(
                    TensorMeta::new(t.shape.clone(), t.dtype.unwrap_or(model_dtype)),
                    Category::Temporaries,
                    Label::new("construction temporary"),
                    Some(t.module),
                ));
            }
        }
        free_where(self, live, if built { None } else { Some(false) });
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
                let mi = node.module.0 as usize;
                let parameters = if self.module_listed[mi] {
                    0
                } else {
                    self.module_params[mi]
                };
                self.module_listed[mi] = true;
                let m = &self.g.modules[mi];
                // a functional op inside a container (a residual `+=`) is named by the op
                let op = if self.module_has_children[mi] {
                    node.op.kind().to_string()
                } else {
                    m.type_name.clone()
                };
                if let Some(layers) = self.layers.as_mut() {
                    layers.push(LayerStats {
                        name: m.path.clone(),
                        op,
                        output_shape: Vec::new(),
                        parameters,
                        saved_bytes: 0,
                    });
                }
            }
            let inputs: Vec<Rt> = node
                .inputs
                .iter()
                .filter_map(|t| {
                    // validate_graph checked that every input is produced before use
                    env[t.0 as usize]
                        .or_else(|| self.g.tensor(*t).param.map(|p| self.param_rt[p.0 as usize]))
                })
                .collect();
            let op = node.op.clone();
            let outs = self.call(
                &op,
                &inputs,
                &node.params,
                Some(node.module),
                Some(n),
                region,
            );
            for (t, r) in node.outputs.iter().zip(outs) {
                env[t.0 as usize] = Some(r);
                let hooked =
                    self.grad_enabled && !self.recomputing && self.g.grad_leaves.contains(t);
                if hooked && !self.rts[r as usize].requires_grad {
                    // `output.requires_grad_(True)`: a leaf, which its AccumulateGrad node keeps
                    self.rts[r as usize].requires_grad = true;
                    self.keep_graph_leaf(r);
                }
            }
            if let Some(layers) = self.layers.as_mut() {
                if let (Some(l), Some(t)) = (layers.last_mut(), node.outputs.first()) {
                    l.output_shape = self.g.tensor(*t).shape.clone();
                }
            }
            for k in 0..self.release_after[n].len() {
                let i = self.release_after[n][k].0 as usize;
                if hold[i] {
                    continue;
                }
                if let Some(r) = env[i].take() {
                    self.release_rt(r);
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
                        let meta = self.rts[target as usize].meta.clone();
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
                            if let Some(b) = self.storages[grad_sid as usize].block {
                                let sz = self.alloc.block_size(b);
                                self.cur_cat.0[cat.index()] -= sz;
                                self.cur_cat.0[Category::Gradients.index()] += sz;
                            }
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
                    let meta = self.rts[target as usize].meta.clone();
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
                let meta = self.rts[target as usize].meta.clone();
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
        let root_meta = TensorMeta::new(vec![], self.rts[loss as usize].meta.dtype);
        let mut extra_roots = Vec::new();
        if self.cfg.precision.uses_grad_scaler() && !self.scaler_initialised {
            // GradScaler creates _scale and _growth_tracker at its first scale()
            for _ in 0..2 {
                self.new_storage(
                    root_meta.clone(),
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
                root_meta.clone(),
                Category::Temporaries,
                Label::new("scaled loss"),
                None,
            );
            extra_roots.push(scaled);
        }
        let root = self.new_storage(
            root_meta.clone(),
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
        let mut i = self.tape.len();
        while i > 0 {
            i -= 1;
            // a checkpointed region is recomputed when backward first unpacks one of its saved
            // tensors: when a node that saved some runs (it has an incoming gradient)
            if let (Some(r), true) = (self.tape[i].region, self.tape[i].saves) {
                let runs = self.tape[i]
                    .outputs
                    .iter()
                    .any(|&o| self.grad_buf[o as usize].is_some());
                if runs && !self.regions[r].recomputed {
                    self.recompute_region(r);
                }
            }
            // each tape node runs once: move its lists out instead of cloning them
            let t = &mut self.tape[i];
            let node = TapeNode {
                label: t.label,
                module: t.module,
                inputs: std::mem::take(&mut t.inputs),
                outputs: std::mem::take(&mut t.outputs),
                saved: Vec::new(),
                temporaries: std::mem::take(&mut t.temporaries),
                scratch: std::mem::take(&mut t.scratch),
                grads_right_to_left: t.grads_right_to_left,
                region: t.region,
                saves: t.saves,
                grads_like_output: t.grads_like_output,
            };
            let incoming: Vec<Option<u32>> = node
                .outputs
                .iter()
                .map(|&o| self.grad_buf[o as usize].take())
                .collect();
            if incoming.iter().all(Option::is_none) {
                for s in std::mem::take(&mut self.tape[i].saved) {
                    self.decref(s);
                }
                self.finish_region_node(i);
                continue;
            }
            let scratch = self.run_scratch(&node.scratch, Category::Temporaries, node.module);
            let temps: Vec<u32> = node
                .temporaries
                .iter()
                .map(|&b| {
                    self.new_storage(
                        TensorMeta::new(vec![b], DType::U8),
                        Category::Temporaries,
                        Label::new("backward temporary"),
                        node.module,
                    )
                })
                .collect();
            let mut produced: Vec<(Rt, u32)> = Vec::new();
            // (index in produced, input index, the input's meta) of gradients made like the
            // output, to be reduced or cast by validate_outputs
            let mut to_cast: Vec<(usize, usize, TensorMeta)> = Vec::new();
            let out_meta = node
                .outputs
                .first()
                .map(|&o| self.rts[o as usize].meta.clone());
            let mut made_for: Vec<Option<u32>> = vec![None; node.inputs.len()];
            let order: Vec<usize> = if node.grads_right_to_left {
                (0..node.inputs.len()).rev().collect()
            } else {
                (0..node.inputs.len()).collect()
            };
            for &k in &order {
                let (inp, gi, meta) = &node.inputs[k];
                let Some(target) = *inp else { continue };
                let shared = match gi {
                    GradIn::SameAs(j) => made_for.get(*j).copied().flatten(),
                    _ => None,
                };
                let sid = match gi {
                    GradIn::None => continue,
                    GradIn::SameAs(_) if shared.is_some() => {
                        let s = shared.unwrap_or(0);
                        self.incref(s);
                        s
                    }
                    GradIn::PassThrough(o) => match incoming.get(*o).copied().flatten() {
                        Some(s) => {
                            self.incref(s);
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
                        match &out_meta {
                            Some(m) if node.grads_like_output && m != meta => {
                                to_cast.push((produced.len(), k, meta.clone()));
                                let m = m.clone();
                                self.new_storage(m, Category::Temporaries, label, node.module)
                            }
                            _ => self.new_storage(meta.clone(), cat, label, node.module),
                        }
                    }
                };
                made_for[k] = Some(sid);
                produced.push((target, sid));
            }
            for t in temps.into_iter().chain(scratch) {
                self.decref(t);
            }
            // saved tensors of a recomputed region are the node's own unpacked copies, dropped
            // when its backward function returns; other saved tensors are released after the
            // engine is done with the node
            let saved = std::mem::take(&mut self.tape[i].saved);
            let saved_after = if node.region.is_some() {
                for s in saved {
                    self.decref(s);
                }
                Vec::new()
            } else {
                saved
            };
            // validate_outputs: in input order, each gradient reduced to its input's shape and
            // cast to its dtype
            to_cast.sort_by_key(|&(_, input, _)| input);
            for (k, _, meta) in to_cast {
                let (target, computed) = produced[k];
                let cat = if self.rts[target as usize].param.is_some() {
                    Category::Gradients
                } else {
                    Category::Temporaries
                };
                let label = Label::new("grad reduced / cast");
                let fitted = self.new_storage(meta, cat, label, node.module);
                self.decref(computed);
                produced[k] = (target, fitted);
            }
            for s in incoming.into_iter().flatten().chain(saved_after) {
                self.decref(s);
            }
            for (target, sid) in produced {
                self.deliver(target, sid);
            }
            self.finish_region_node(i);
        }
        self.decref(root);
        for s in extra_roots {
            self.decref(s);
        }
        // AccumulateGrad of a non-parameter leaf: the first gradient becomes its `.grad`, later
        // ones are added in place (grad mode is off in backward)
        for k in 0..self.graph_leaves.len() {
            let r = self.graph_leaves[k].rt as usize;
            if let Some(g) = self.grad_buf.get_mut(r).and_then(Option::take) {
                match self.graph_leaves[k].grad {
                    None => self.graph_leaves[k].grad = Some(g),
                    Some(_) => self.decref(g),
                }
            }
        }
        // gradients that reached no parameter (e.g. the input's) are dropped with the graph
        for i in 0..self.grad_buf.len() {
            if let Some(s) = self.grad_buf[i].take() {
                self.decref(s);
            }
        }
        self.tape.clear();
        self.in_backward = false;
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
        let log_softmax: Arc<dyn Op> = Arc::new(LogSoftmax { dim: 1 });
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
        let meta = self.rts[logits as usize].meta.clone();
        let upcast = if meta.dtype == DType::F32 {
            self.incref(self.rts[logits as usize].storage);
            logits
        } else {
            self.cast(logits, DType::F32, None, false)
        };
        let lab_shape = self.rts[labels as usize].meta.shape.clone();
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
                for (_, rt) in std::mem::take(&mut self.regions[r].frame) {
                    self.release_rt(rt);
                }
            }
        }
    }

    /// Creates the optimizer state of `params`, one parameter's states in a row.
    fn create_optimizer_states(&mut self, params: &[usize]) {
        let opt = self.cfg.optimizer;
        for (n, shape, dtype) in opt.shared_state() {
            // held for the rest of the run: never released
            let meta = TensorMeta::new(shape, dtype);
            self.new_storage(meta, Category::OptimizerStates, Label::new(n), None);
        }
        for &i in params {
            let meta = self.param_meta(ParamId(i as u32));
            let module = Some(self.g.params[i].module);
            self.opt_state[i] = opt
                .state_tensors(&meta.shape, meta.dtype)
                .into_iter()
                .map(|(n, shape, dtype)| {
                    let m = TensorMeta::new(shape, dtype);
                    self.new_storage(m, Category::OptimizerStates, Label::new(n), module)
                })
                .collect();
        }
    }

    fn optimizer_step(&mut self, first: bool) {
        let opt = self.cfg.optimizer;
        let trainable: Vec<usize> = (0..self.g.params.len())
            .filter(|&i| self.param_grad[i].is_some())
            .collect();
        let mut scaler_tmp = Vec::new();
        if self.cfg.precision.uses_grad_scaler() {
            // scaler.unscale_(opt): inv_scale = _scale.double().reciprocal().float(); found_inf;
            // _amp_foreach_non_finite_check_and_unscale_ works in place; two scalar copies for
            // the per-device bookkeeping, one of which lives until scaler.update()
            let scalar = |d| TensorMeta::new(vec![], d);
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
        if opt.step_temporaries() == StepTemporaries::PerParameter {
            for &i in &trainable {
                let meta = self.param_meta(ParamId(i as u32));
                let module = Some(self.g.params[i].module);
                let lbl = Label::new("step temporary");
                let temps: Vec<u32> = opt
                    .parameter_temporaries(&meta.shape, meta.dtype)
                    .into_iter()
                    .map(|(s, d)| {
                        let m = TensorMeta::new(s, d);
                        self.new_storage(m, Category::Temporaries, lbl, module)
                    })
                    .collect();
                for t in temps {
                    self.decref(t);
                }
            }
        }
        let lists = opt.step_temporary_lists();
        let mut temps = Vec::new();
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
        for t in temps {
            self.decref(t);
        }
        for t in scaler_tmp {
            self.decref(t);
        }
    }
}

/// Computes, for every node, the graph tensors whose last reference ends after it.
fn release_schedule(g: &Graph) -> Vec<Vec<TensorId>> {
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
    let mut out = vec![Vec::new(); g.nodes.len()];
    for (t, l) in last.iter().enumerate() {
        let td = &g.tensors[t];
        if td.param.is_some()
            || g.inputs.contains(&TensorId(t as u32))
            || g.outputs.contains(&TensorId(t as u32))
        {
            continue;
        }
        if let Some(l) = l {
            out[*l].push(TensorId(t as u32));
        }
    }
    // inner frames return first, and their locals are the newer tensors
    for v in &mut out {
        v.sort_by(|a, b| b.cmp(a));
    }
    out
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
                    push(s.first, s.end, s.inputs.clone());
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
                        children[a].inputs.clone(),
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

/// Simulates `cfg` over `graph`.
pub fn simulate(graph: &Graph, cfg: &StepConfig) -> Result<Simulation, SimError> {
    validate_graph(graph)?;
    run(graph, cfg)
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

fn run(g: &Graph, cfg: &StepConfig) -> Result<Simulation, SimError> {
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
    let mut s = Sim {
        g,
        cfg,
        alloc: CachingAllocator::new(),
        storages: Vec::new(),
        rts: Vec::new(),
        tape: Vec::new(),
        grad_buf: Vec::new(),
        param_rt: Vec::new(),
        param_grad: Vec::new(),
        opt_state: vec![Vec::new(); g.params.len()],
        phases: Vec::new(),
        cur_cat: Breakdown::default(),
        peak_allocated: 0,
        peak_reserved: 0,
        peak_phase: 0,
        peak_cat: Breakdown::default(),
        events: Vec::new(),
        trail: Vec::new(),
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
        tape_of_node: vec![None; g.nodes.len()],
        scaler_initialised: false,
        grad_existed_before_backward: vec![false; g.params.len()],
        release_after: release_schedule(g),
        region_of_node,
        regions,
        autocast_cache: Vec::new(),
        recompute_stop: None,
        grad_enabled: false,
        training: cfg.mode == Mode::Train,
        in_backward: false,
        recomputing: false,
        layers: Some(Vec::new()),
        sdpa: Vec::new(),
        gradient_bytes: 0,
        peak_event: 0,
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
            new_x.push(s.fresh(
                TensorMeta::new(d.shape.clone(), input_dtype(d.dtype)),
                Category::Inputs,
                Label::new("input"),
                None,
                false,
            ));
        }
        // a data loader yields labels with the images, in inference too
        let new_y = match g.task {
            Task::Classification { .. } => Some(s.fresh(
                TensorMeta::new(vec![batch], DType::I64),
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
                    TensorMeta::new(vec![batch], DType::I64),
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
                    .unwrap_or_else(|| vec![batch]);
                Some(s.fresh(
                    TensorMeta::new(shape, DType::I64),
                    Category::Inputs,
                    Label::new("labels"),
                    None,
                    false,
                ))
            }
            // the labels are graph inputs, made with the other inputs above
            Task::LossInForward => None,
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
                // `loss = out.loss`: one more reference to the forward's first output
                Task::LossInForward => {
                    s.incref(s.rts[logits as usize].storage);
                    vec![logits]
                }
            };
            // `loss = ...` rebinds inside the autocast block; its weight cache goes at the exit
            if let Some(old) = loss.replace(l[0]) {
                s.release_rt(old);
                // the old loss was the last reference to the previous iteration's graph
                s.release_graph_leaves(it);
            }
            s.clear_autocast_cache();
            s.phase(&format!("it{it}.zero_grad"));
            for i in (0..s.param_grad.len()).filter(|_| cfg.zero_grad_set_to_none) {
                if let Some(g) = s.param_grad[i].take() {
                    s.decref(g);
                }
            }
            s.phase(&format!("it{it}.backward"));
            for r in 0..s.regions.len() {
                s.regions[r].recomputed = false;
                s.regions[r].lowest_tape = s.tape.iter().position(|t| t.region == Some(r));
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
        .map(|(i, _)| s.param_meta(ParamId(i as u32)).bytes())
        .sum();
    let buffer_bytes = g
        .params
        .iter()
        .enumerate()
        .filter(|(_, p)| p.kind == ParamKind::Buffer)
        .map(|(i, _)| s.param_meta(ParamId(i as u32)).bytes())
        .sum();
    let optimizer_state_bytes = s
        .opt_state
        .iter()
        .flatten()
        .map(|&x| s.storages[x as usize].bytes)
        .sum();
    let sim = Simulation {
        phases: s.phases.clone(),
        peak_allocated: s.peak_allocated,
        peak_reserved: s.peak_reserved,
        peak_phase: s.peak_phase,
        breakdown_at_peak: s.peak_cat,
        live_at_peak: s.live_after(s.peak_event as usize),
        layers: std::mem::take(&mut s.first_layers),
        events: std::mem::take(&mut s.events),
        sdpa_backends: s.sdpa.clone(),
        parameter_bytes,
        buffer_bytes,
        gradient_bytes: s.gradient_bytes,
        optimizer_state_bytes,
        segments: s.alloc.segments(),
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
}
