//! The graph IR: tensors, parameters, modules and the op nodes that connect them, in execution order.
//!
//! A graph is the forward program of one model for one input shape, recorded the way PyTorch eager
//! runs it: nodes in call order, each tagged with the module whose `forward` issued it, so that
//! module paths (`layer1.0.conv1`) and per-module scopes (what a `Sequential` keeps alive) survive.

use std::sync::Arc;

use smallvec::SmallVec;

use crate::dtype::DType;
use crate::ops::Op;

/// A tensor shape (sizes only; every tensor the IR creates is contiguous unless it is a view).
pub type Shape = Vec<u64>;

/// The sizes of a graph tensor or parameter: inline up to four dimensions (nearly every tensor),
/// so that building and dropping a large model's graph is not one heap allocation per tensor.
pub type Dims = SmallVec<[u64; 4]>;

/// Number of elements of a shape.
pub fn numel(shape: &[u64]) -> u64 {
    shape.iter().product()
}

/// Index of a tensor in [`Graph::tensors`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub u32);

/// Index of a parameter or buffer in [`Graph::params`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ParamId(pub u32);

/// Index of a module in [`Graph::modules`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ModuleId(pub u32);

/// Index of a node in [`Graph::nodes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

/// A tensor of the forward program, with the shape and dtype it has in an fp32 run.
#[derive(Debug, Clone)]
pub struct TensorDef {
    /// Sizes.
    pub shape: Dims,
    /// Element type in an fp32 run (precision passes decide the runtime dtype).
    pub dtype: DType,
    /// The node that produced it; `None` for graph inputs and parameters.
    pub producer: Option<NodeId>,
    /// Set when this tensor *is* a parameter used as an activation (ViT's `class_token`).
    pub param: Option<ParamId>,
}

/// Whether a tensor owned by a module is a trainable parameter or a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    /// `nn.Parameter` (gets a gradient and optimizer state when trainable).
    Parameter,
    /// `register_buffer` (running statistics, `num_batches_tracked`).
    Buffer,
}

/// A parameter or buffer, named as `named_parameters()` / `named_buffers()` name it.
#[derive(Debug, Clone)]
pub struct ParamDef {
    /// Full dotted name, e.g. `layer1.0.conv1.weight`.
    pub name: String,
    /// Sizes.
    pub shape: Dims,
    /// Element type when the model is built in fp32 (`num_batches_tracked` stays int64).
    pub dtype: DType,
    /// The dtype the tensor is held in whatever the step's precision: a 4-bit weight's uint8
    /// packing and its float32 quantization state, QLoRA's float32 adapters, the dtypes a
    /// checkpoint stores (`--weights-dtype from-files`). `None`: float tensors follow the
    /// precision, integer ones keep `dtype`.
    pub stored_dtype: Option<DType>,
    /// Parameter or buffer.
    pub kind: ParamKind,
    /// Whether it requires grad (a frozen parameter does not).
    pub trainable: bool,
    /// The module that owns it.
    pub module: ModuleId,
    /// Position in the order `Module.__init__` creates tensors (on the device, that is the
    /// allocation order), which can differ from the registration order (ResNet builds a block's
    /// `downsample` before the block).
    pub init_rank: u32,
}

impl ParamDef {
    /// Number of elements.
    pub fn numel(&self) -> u64 {
        numel(&self.shape)
    }
}

/// An `nn.Module` of the model, named as `named_modules()` names it.
#[derive(Debug, Clone)]
pub struct ModuleDef {
    /// Dotted path (`""` for the root).
    pub path: String,
    /// Class name (`Conv2d`, `Bottleneck`); shared by a model's many modules of one class.
    pub type_name: Arc<str>,
    /// The containing module.
    pub parent: Option<ModuleId>,
}

/// A node's activation inputs or outputs: held inline up to four (nearly every op), so that a
/// large model's graph is not thousands of tiny heap allocations.
pub type TensorList = SmallVec<[TensorId; 4]>;

/// The parameters and buffers a node reads, inline up to two.
pub type ParamList = SmallVec<[ParamId; 2]>;

/// One op call of the forward program.
#[derive(Debug, Clone)]
pub struct Node {
    /// What the op is, with its rules.
    pub op: Arc<dyn Op>,
    /// The innermost module whose forward issued it.
    pub module: ModuleId,
    /// Activation inputs.
    pub inputs: TensorList,
    /// Parameters and buffers it reads.
    pub params: ParamList,
    /// Outputs.
    pub outputs: TensorList,
}

/// A span of nodes that a module call covers, and the tensors that call kept referenced until it
/// returned (Python keeps a module's arguments alive for the whole call).
#[derive(Debug, Clone)]
pub struct Scope {
    /// The module.
    pub module: ModuleId,
    /// First node of the call.
    pub first: u32,
    /// One past the last node of the call.
    pub end: u32,
    /// Tensors passed in.
    pub inputs: TensorList,
}

/// A tensor model construction allocates and frees (see [`Graph::init_temporaries`]). Positions
/// count the parameters and buffers allocated before the event (in `init_rank` order). At one
/// position, the temporaries allocated at an earlier position that are due are freed first
/// (unless [`freed_after_allocations`](Self::freed_after_allocations)), then the position's
/// temporaries are allocated, then the rest of those due are freed, each step in list order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitTemporary {
    /// Sizes.
    pub shape: Shape,
    /// A fixed dtype; `None` is the model's parameter dtype.
    pub dtype: Option<DType>,
    /// Allocated after this many parameters and buffers.
    pub alloc_at: u32,
    /// Freed after this many parameters and buffers.
    pub free_at: u32,
    /// Freed with the temporaries allocated at its `free_at` position, after their allocations,
    /// though it was allocated earlier (`post_init` makes a new tensor before it drops this one:
    /// XLM-RoBERTa's encoder recomputes its `position_ids` before the untied head is dropped).
    pub freed_after_allocations: bool,
    /// Allocated after every free due at its `alloc_at` position, `freed_after_allocations` ones
    /// included: made once the model is complete (PEFT's half-precision adapters, after
    /// `post_init()` has dropped an untied head).
    pub allocated_after_frees: bool,
    /// The module whose `__init__` made it.
    pub module: ModuleId,
    /// Where its allocation and its free fall among the events of their positions: `Some((alloc,
    /// free))` runs the position's ordered events by these keys, before the others (a rotary
    /// module's `inv_freq` computed step by step around its buffers; see
    /// `GraphBuilder::init_program`).
    pub order: Option<(u32, u32)>,
}

/// What the model's output is trained against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Task {
    /// `F.cross_entropy(logits [B, K], labels [B])`.
    Classification {
        /// Number of classes K.
        num_classes: u64,
    },
    /// Hugging Face's `ForCausalLMLoss(logits [B, S, V], labels = input_ids)`: logits upcast to
    /// float32, labels padded with -100 and shifted (`pad` + `[..., 1:].contiguous()`), then
    /// `cross_entropy` over `[B·S, V]`.
    CausalLm {
        /// Vocabulary size V.
        vocab: u64,
    },
    /// Hugging Face's `ForMaskedLMLoss(logits [B, S, V], labels [B, S])`: logits upcast to float32,
    /// `cross_entropy` over `[B·S, V]`.
    MaskedLm {
        /// Vocabulary size V.
        vocab: u64,
    },
    /// The model computes its own loss inside its forward (`T5ForConditionalGeneration(input_ids,
    /// labels=labels)`): the labels are among the graph's inputs, the graph's first output is the
    /// scalar loss, and the loss phase only reads it (`loss = out.loss`).
    LossInForward,
    /// A bare model (`AutoModel`: `BertModel`, ...): its outputs are features nothing is trained
    /// on. Run in inference only; the data loader yields no labels.
    Features,
}

/// The autograd graph a run of nodes recorded that no loss reads, dropped with the object that
/// referenced its result (a Mixture-of-Experts model's auxiliary loss, returned in an output the
/// caller discards): the saved tensors of `nodes` are freed, last node first, right after the
/// forward releases `after` (the output's previous item).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DroppedGraph {
    /// The nodes whose autograd records the graph holds.
    pub nodes: std::ops::Range<u32>,
    /// The tensor whose release the drop follows.
    pub after: TensorId,
}

/// The forward program of a model for one input shape.
#[derive(Debug, Clone)]
pub struct Graph {
    /// Model name (`resnet50`).
    pub name: String,
    /// All tensors.
    pub tensors: Vec<TensorDef>,
    /// All parameters and buffers in registration order (the order `Module.__init__` creates them).
    pub params: Vec<ParamDef>,
    /// All modules in `named_modules()` order.
    pub modules: Vec<ModuleDef>,
    /// Nodes in execution order.
    pub nodes: Vec<Node>,
    /// Module calls.
    pub scopes: Vec<Scope>,
    /// Tensors a Python frame keeps referenced past their last use: (tensor, node index the frame
    /// ends before).
    pub holds: Vec<(TensorId, u32)>,
    /// Autograd graphs no loss reads, dropped before backward (see [`DroppedGraph`]).
    pub dropped_graphs: Vec<DroppedGraph>,
    /// Tensors `__init__` allocates on the device and frees before it returns (the weights a tied
    /// head creates and then drops for the embedding's; a loaded weight before 4-bit quantization).
    pub init_temporaries: Vec<InitTemporary>,
    /// Tensors a forward hook makes require grad (transformers' `enable_input_require_grads`, which
    /// `gradient_checkpointing_enable()` calls, on the input embeddings' output): when nothing
    /// before them needs a gradient they become leaves, whose `.grad` autograd keeps, with the
    /// tensor, until the iteration's graph (its loss) is dropped.
    pub grad_leaves: Vec<TensorId>,
    /// The model's inputs (the batch).
    pub inputs: Vec<TensorId>,
    /// The model's outputs.
    pub outputs: Vec<TensorId>,
    /// What the loss is.
    pub task: Task,
    /// The nodes listed in the layer table (a generation lists its prefill, not its own tensor
    /// bookkeeping nor the decode steps that call the same modules again); `None` lists every
    /// node.
    pub layer_table: Option<std::ops::Range<u32>>,
}

impl Graph {
    /// The tensor definition.
    pub fn tensor(&self, t: TensorId) -> &TensorDef {
        &self.tensors[t.0 as usize]
    }

    /// The parameter definition.
    pub fn param(&self, p: ParamId) -> &ParamDef {
        &self.params[p.0 as usize]
    }

    /// The module path.
    pub fn module_path(&self, m: ModuleId) -> &str {
        &self.modules[m.0 as usize].path
    }

    /// Total number of parameter elements (buffers excluded), shared parameters counted once.
    pub fn parameter_count(&self) -> u64 {
        self.params
            .iter()
            .filter(|p| p.kind == ParamKind::Parameter)
            .map(ParamDef::numel)
            .sum()
    }

    /// Number of trainable parameter elements.
    pub fn trainable_parameter_count(&self) -> u64 {
        self.params
            .iter()
            .filter(|p| p.kind == ParamKind::Parameter && p.trainable)
            .map(ParamDef::numel)
            .sum()
    }

    /// Finds a module by its path.
    pub fn find_module(&self, path: &str) -> Option<ModuleId> {
        self.modules
            .iter()
            .position(|m| m.path == path)
            .map(|i| ModuleId(i as u32))
    }

    /// Whether module `m` is `ancestor` or inside it.
    pub fn module_within(&self, mut m: ModuleId, ancestor: ModuleId) -> bool {
        loop {
            if m == ancestor {
                return true;
            }
            match self.modules[m.0 as usize].parent {
                Some(p) => m = p,
                None => return false,
            }
        }
    }

    /// The top-level children of the root module, in registration order.
    pub fn top_level_children(&self) -> Vec<&ModuleDef> {
        self.modules
            .iter()
            .filter(|m| m.parent == Some(ModuleId(0)))
            .collect()
    }
}
