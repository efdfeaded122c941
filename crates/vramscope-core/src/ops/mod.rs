//! The op library: one op per file, each holding its shape rule, its parameters, what autograd
//! saves for backward, its temporaries and its autocast class side by side.
//!
//! Ops are described at the level of the aten calls PyTorch issues on CUDA (an `nn.Conv2d` is one
//! `convolution`, a cuDNN batch norm returns `save_mean`/`save_invstd`/`reserve` besides its output),
//! because that is the granularity at which `torch.cuda.memory_allocated()` moves.

use std::fmt::Debug;

use crate::dtype::DType;
use crate::ir::Shape;

mod activation;
mod adaptive_avg_pool;
mod add;
mod aten;
mod attention;
mod attention_bias;
mod attention_heads;
mod attention_input;
mod attention_math;
mod attention_output;
mod avg_pool;
mod batch_norm;
mod cat;
mod conv2d;
mod conv_nd;
mod conv_transpose2d;
mod copy_slices;
mod dropout;
mod dropout_inplace;
mod elementwise;
mod grad_order;
mod group_norm;
mod gru_cell;
mod kv_cache;
mod layer_norm;
mod linear;
mod linear_strided;
mod log_softmax;
mod lstm_cell;
mod matmul;
mod matmul_4bit;
mod matmul_copy;
mod max_pool;
mod mean;
mod mul;
mod mul_scalar;
mod nll_loss;
mod pad;
mod relative_position_bias;
mod roll;
mod select;
mod shifted_window_mask;
mod softmax;
mod to_dtype;
mod view;
mod view_strided_grad;

pub use activation::{Activation, ActivationKind};
pub use adaptive_avg_pool::AdaptiveAvgPool2d;
pub use add::Add;
pub use aten::{Aten, DTypeRule, TensorRule};
pub use attention::{ScaledDotProductAttention, SdpaBackend, SdpaCall, FLASH_HEAD_DIM_ALIGNMENT};
pub use attention_bias::{ScaledDotProductAttentionBias, MEM_EFF_MASK_ALIGNMENT};
pub use attention_heads::{AttentionHeadsMerge, AttentionHeadsView};
pub use attention_input::{HeadsOf, SdpaHeadsView};
pub use attention_output::SdpaOutputMerge;
pub use avg_pool::AvgPool2d;
pub use batch_norm::BatchNorm2d;
pub use cat::Cat;
pub use conv2d::Conv2d;
pub use conv_nd::ConvNd;
pub use conv_transpose2d::ConvTranspose2d;
pub use copy_slices::CopySlices;
pub use dropout::{Dropout, StochasticDepth};
pub use dropout_inplace::DropoutInplace;
pub use elementwise::Elementwise;
pub use grad_order::GradOrder;
pub use group_norm::GroupNorm;
pub use gru_cell::GruCell;
pub use kv_cache::KvCacheUpdate;
pub use layer_norm::LayerNorm;
pub use linear::Linear;
pub use linear_strided::LinearStrided;
pub use log_softmax::LogSoftmax;
pub use lstm_cell::LstmCell;
pub use matmul::MatMul;
pub use matmul_4bit::{FourBitQuant, MatMul4Bit};
pub use matmul_copy::MatMulCopy;
pub use max_pool::MaxPool2d;
pub use mean::Mean;
pub use mul::Mul;
pub use mul_scalar::MulScalar;
pub use nll_loss::NllLoss;
pub use pad::ConstantPad;
pub use relative_position_bias::RelativePositionBias;
pub use roll::Roll;
pub use select::{Select, Slice};
pub use shifted_window_mask::ShiftedWindowMask;
pub use softmax::Softmax;
pub use to_dtype::{DTypeTarget, ToDtype};
pub use view::{Contiguous, View};
pub use view_strided_grad::ViewStridedGrad;

/// Shape and dtype of one tensor as an op sees it at run time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorMeta {
    /// Sizes.
    pub shape: Shape,
    /// Element type.
    pub dtype: DType,
}

impl TensorMeta {
    /// A tensor of this shape and dtype.
    pub fn new(shape: Shape, dtype: DType) -> Self {
        TensorMeta { shape, dtype }
    }

    /// Exact storage bytes.
    pub fn bytes(&self) -> u64 {
        crate::ir::numel(&self.shape) * self.dtype.size()
    }
}

/// A parameter or buffer an op owns (its module registers it under `name`).
#[derive(Debug, Clone)]
pub struct ParamSpec {
    /// Attribute name (`weight`, `running_mean`).
    pub name: &'static str,
    /// Sizes.
    pub shape: Shape,
    /// `true` for `register_buffer` tensors.
    pub is_buffer: bool,
    /// A fixed dtype (e.g. int64 `num_batches_tracked`); `None` follows the model's dtype.
    pub fixed_dtype: Option<DType>,
}

impl ParamSpec {
    /// A trainable parameter.
    pub fn param(name: &'static str, shape: Shape) -> Self {
        ParamSpec {
            name,
            shape,
            is_buffer: false,
            fixed_dtype: None,
        }
    }

    /// A buffer.
    pub fn buffer(name: &'static str, shape: Shape) -> Self {
        ParamSpec {
            name,
            shape,
            is_buffer: true,
            fixed_dtype: None,
        }
    }
}

/// Whether an op's output is new memory, a view of an input, or an input written in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alias {
    /// Output 0 is a new allocation.
    None,
    /// Output 0 is a view of input `i` (no allocation).
    View(usize),
    /// Output 0 is input `i` modified in place (no allocation).
    InPlace(usize),
    /// Output 0 is a view of the op's extra result `i` ([`Op::forward_extras`] or
    /// [`Op::inference_extras`], made before the view): a kernel that writes a larger tensor
    /// and returns a slice of it (flash attention over head dims padded to a multiple of 8).
    ViewOfExtra(usize),
}

/// A tensor an autograd node keeps for backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Saved {
    /// The (possibly autocast-cast) input `i`.
    Input(usize),
    /// Output `i`.
    Output(usize),
    /// Parameter `i` (or its autocast copy).
    Param(usize),
    /// Extra forward result `i` (see [`Op::forward_extras`]).
    Extra(usize),
    /// Allocation `i` of the forward scratch program ([`Op::forward_scratch`]): an intermediate
    /// of a composite op that one of its autograd nodes keeps (the math attention's contiguous
    /// copies of q, k and v and its probabilities).
    Scratch(usize),
}

/// Where the gradient of an input comes from in backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GradIn {
    /// A new tensor of the input's shape and dtype.
    New,
    /// The incoming gradient of output `i`, passed on as is (add, views).
    PassThrough(usize),
    /// No gradient (integer input, or the op is not differentiable in it).
    None,
    /// The same tensor as the gradient of input `i` (one kernel result handed to several
    /// inputs: the fused LSTM cell's gate gradient serves both gate inputs, its bias gradient
    /// both biases); a new tensor when input `i` gets none.
    SameAs(usize),
    /// The incoming gradient of output `i`, summed to the input's shape by the engine after the
    /// node's `apply` returned (`validate_outputs`' `sum_to`): `AddmmBackward0` hands the bias
    /// the output's gradient as is, so the reduced tensor comes after the node has freed the
    /// locals of its `apply` (a recomputed region's unpacked saved tensors).
    Reduced(usize),
    /// Allocation `i` of the node's backward scratch program ([`Op::backward_scratch`]), still
    /// allocated when the program ends: a gradient computed with another shape (a divisor's
    /// `-grad * self / other²`, full size), which `validate_outputs` sums to the input's shape
    /// after the node's `apply` returned, as for [`GradIn::Reduced`].
    ReducedScratch(usize),
    /// Allocation `i` of the node's backward scratch program, a gradient with a larger shape
    /// (the padded copy the op made of this input), which the node that made the copy
    /// (`ConstantPadNdBackward0`) narrows to the input's shape once this node is done: its
    /// saved tensors released, each such input from the last to the first, a new tensor of the
    /// input's size, then the padded one freed.
    Narrowed(usize),
    /// Allocation `i` of the node's backward scratch program, handed on as the gradient as it
    /// is (its bytes are the input's): a kernel result the formula scales before it frees its
    /// intermediate (`BaddbmmBackward0`'s `maybe_multiply(grad.bmm(...), alpha)`: the product,
    /// the scaled gradient, then the product freed, for one input after the other).
    Scratch(usize),
}

/// How `torch.autocast` treats an op (the CUDA autocast lists of `autocast_mode.cpp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Autocast {
    /// Runs in the autocast dtype: float inputs are cast down (weights through the autocast cache).
    LowerPrecision,
    /// Runs in float32: half inputs are cast up.
    Fp32,
    /// `fp32_set_opt_dtype` (`softmax`, `log_softmax`): called with `dtype=float32`, so its output
    /// is float32; on CUDA a float16 input is read as it is (`_softmax(x, dim, half_to_float)`, no
    /// copy) while a bfloat16 one is cast up first.
    Fp32SetOptDtype,
    /// Runs in the widest input dtype: narrower inputs are cast up.
    Promote,
    /// Not on any list: runs in whatever dtype its inputs have.
    Unlisted,
}

/// One step of a kernel's scratch-memory program (see [`Op::forward_scratch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scratch {
    /// Allocates this many bytes; `what` names the tensor in traces.
    Alloc {
        /// Exact bytes.
        bytes: u64,
        /// What the tensor is (`dequantized weight`).
        what: &'static str,
    },
    /// Frees the allocation made by the program's `i`-th `Alloc`.
    Free(usize),
    /// In a backward program: drops the node's incoming gradients now rather than when the node
    /// is done (a composite's first autograd node, `SliceBackward0`, has copied its gradient into
    /// a new tensor and releases it before the next node's kernel runs).
    DropIncoming,
    /// In a backward program: releases the node's saved tensor `i` (in [`Op::saved_for_backward`]
    /// order) now, as the composite's autograd node that kept it finishes.
    ReleaseSaved(usize),
    /// In a forward program: the op's outputs are made here, and the steps after run once they
    /// exist (a composite's frees after its result: the return expression's temporaries, then
    /// its locals in reverse order of construction).
    Outputs,
}

/// What an op sees when the simulator asks it a question: runtime shapes and dtypes.
#[derive(Debug, Clone, Copy)]
pub struct OpCtx<'a> {
    /// Inputs as the op receives them (after autocast casts).
    pub inputs: &'a [TensorMeta],
    /// Parameters as the op receives them (after autocast casts).
    pub params: &'a [TensorMeta],
    /// Outputs.
    pub outputs: &'a [TensorMeta],
    /// `module.training` (train mode: batch norm uses batch statistics, dropout is active).
    pub training: bool,
    /// Whether each activation input requires grad (autograd records a gradient for it); empty
    /// when not known (graph passes that look at the program without running it).
    pub inputs_require_grad: &'a [bool],
    /// Autograd keeps what the op saves for backward: false where it records the op but drops
    /// its saved tensors (a checkpointed region's forward packs them for nothing), so a
    /// composite's intermediates die as they would without grad.
    pub keeps_saved: bool,
    /// The call is in a checkpointed region, so its backward runs on what the recomputation
    /// saves: each backward node unpacks its own reference (the checkpoint's unpack hook drops
    /// the region's), a local of the node's `apply` that C++ destroys as it returns, before the
    /// engine releases the node's incoming gradients.
    pub saved_unpacked: bool,
}

/// [`Op::input_grads`]' default: a new tensor for every float input, none for the others.
pub(crate) fn new_grads_for_float_inputs(ctx: &OpCtx) -> Vec<GradIn> {
    ctx.inputs
        .iter()
        .map(|t| {
            if t.dtype.is_float() {
                GradIn::New
            } else {
                GradIn::None
            }
        })
        .collect()
}

/// An error from an op's shape rule, naming what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{op}: {message}")]
pub struct ShapeError {
    /// The op kind.
    pub op: &'static str,
    /// What was wrong and what was expected.
    pub message: String,
}

impl ShapeError {
    /// A shape error for `op`.
    pub fn new(op: &'static str, message: impl Into<String>) -> Self {
        ShapeError {
            op,
            message: message.into(),
        }
    }
}

/// One op: its rules, as trait methods with defaults for the common case.
pub trait Op: Debug + Send + Sync {
    /// Display name (`Conv2d`, `add`).
    fn kind(&self) -> &'static str;

    /// Output shapes for the given input shapes (the shape rule).
    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError>;

    /// Output dtypes for the given runtime input dtypes: by default the first input's.
    fn output_dtypes(&self, inputs: &[DType], n_outputs: usize) -> Vec<DType> {
        vec![inputs.first().copied().unwrap_or(DType::F32); n_outputs]
    }

    /// Parameters and buffers the op's module owns (the module registers them).
    fn param_specs(&self) -> Vec<ParamSpec> {
        Vec::new()
    }

    /// Whether output 0 is new memory, a view, or in-place.
    fn alias(&self) -> Alias {
        Alias::None
    }

    /// [`alias`](Self::alias) for the runtime call: `x.to(dtype)` returns `x` itself when it
    /// already has that dtype; an attention output is a view or a copy as the kernel laid it
    /// out.
    fn alias_for(&self, _ctx: &OpCtx) -> Alias {
        self.alias()
    }

    /// The op's autocast class.
    fn autocast(&self) -> Autocast {
        Autocast::Unlisted
    }

    /// Extra results allocated in forward and kept only for backward (max-pool indices, dropout
    /// masks, batch-norm statistics). Only asked when autograd records the op.
    fn forward_extras(&self, _ctx: &OpCtx) -> Vec<TensorMeta> {
        Vec::new()
    }

    /// Extra results allocated in forward even under `no_grad` (and freed right after the op).
    fn inference_extras(&self, _ctx: &OpCtx) -> Vec<TensorMeta> {
        Vec::new()
    }

    /// Whether the extras are made before the outputs: a composite op's intermediates that its
    /// last kernel reads (`matmul`'s contiguous copies of its operands, which `bmm` keeps). Like
    /// every extra they go when the op returns unless autograd saved them, so before the op's
    /// autocast casts.
    fn extras_before_outputs(&self) -> bool {
        false
    }

    /// How many of the last extras are made before the outputs when the others come after them
    /// (mem-efficient attention's padded mask: `preprocess_mask` pads it before the kernel makes
    /// its output and statistics).
    fn extras_made_first(&self, _ctx: &OpCtx) -> usize {
        0
    }

    /// The input the early extras ([`Op::extras_made_first`]) stand in for: `preprocess_mask`
    /// rebinds `attn_mask` to its padded copy, so a mask the call alone holds (SDPA's own
    /// conversion of a boolean mask) goes before the kernel runs.
    fn input_replaced_by_early_extras(&self) -> Option<usize> {
        None
    }

    /// Whether a call whose answer is a view of input 0 ([`Op::alias_for`]) returns input 0
    /// itself, with no autograd node of its own (`x.to(dtype)` when x has that dtype).
    fn view_is_its_input(&self) -> bool {
        false
    }

    /// Transient allocations inside the forward op, in bytes (allocated after the outputs, freed
    /// before the op returns).
    fn forward_temporaries(&self, _ctx: &OpCtx) -> Vec<u64> {
        Vec::new()
    }

    /// Transient allocations the call makes before its outputs, as a program of allocations and
    /// frees (bitsandbytes dequantizes a 4-bit weight into a temporary, possibly casts it, then
    /// runs the matmul); whatever the program leaves allocated is freed once the outputs exist.
    fn forward_scratch(&self, _ctx: &OpCtx) -> Vec<Scratch> {
        Vec::new()
    }

    /// The same for backward: run before the input gradients are allocated, its leftovers freed
    /// with the [`backward_temporaries`](Self::backward_temporaries).
    fn backward_scratch(&self, _ctx: &OpCtx) -> Vec<Scratch> {
        Vec::new()
    }

    /// What autograd keeps for backward (derivatives.yaml).
    fn saved_for_backward(&self, _ctx: &OpCtx) -> Vec<Saved> {
        Vec::new()
    }

    /// The input whose gradient alone needs saved tensor `s`, counting activation inputs first,
    /// then parameters: autograd's generated code saves it only when that input requires grad
    /// (`mm` keeps `self` only for `mat2`'s gradient, `mul` each factor only for the other's).
    /// `None` (the default): saved whenever the node is recorded.
    fn saved_only_for(&self, _s: Saved) -> Option<usize> {
        None
    }

    /// Where each parameter's gradient comes from, in [`Op::param_specs`] order; empty (the
    /// default): a new tensor for each.
    fn param_grads(&self, _ctx: &OpCtx) -> Vec<GradIn> {
        Vec::new()
    }

    /// Where each input's gradient comes from; by default a new tensor for every float input
    /// ([`new_grads_for_float_inputs`]).
    fn input_grads(&self, ctx: &OpCtx) -> Vec<GradIn> {
        new_grads_for_float_inputs(ctx)
    }

    /// Transient allocations of the backward kernels, in bytes (alive together with the new
    /// gradients, freed before the node finishes).
    fn backward_temporaries(&self, _ctx: &OpCtx) -> Vec<u64> {
        Vec::new()
    }

    /// The order in which backward makes the input gradients (inputs first, then parameters).
    fn grad_order(&self) -> GradOrder {
        GradOrder::LeftToRight
    }

    /// Whether the op returns its input unchanged (no allocation, no autograd node) when the module
    /// is in eval mode (dropout, stochastic depth).
    fn identity_in_eval(&self) -> bool {
        false
    }

    /// The fused attention kernel this call runs, for attention ops.
    fn sdpa_backend(&self, _ctx: &OpCtx) -> Option<SdpaBackend> {
        None
    }

    /// The `inplace=True` variant of this op, when PyTorch's module offers one and this op is
    /// not in place already (the in-place pass asks; `None` for most ops).
    fn inplace_variant(&self) -> Option<std::sync::Arc<dyn Op>> {
        None
    }

    /// Whether the op makes an autograd node at all (views of non-grad tensors still do).
    fn differentiable(&self) -> bool {
        true
    }

    /// Whether, before it runs, the op converts its input 0, a frozen parameter, for good to the
    /// dtype of its input 1 when they differ (bitsandbytes' `Linear4bit`: `self.bias.data =
    /// self.bias.data.to(x.dtype)`): the parameter's new tensor is allocated, then its old one
    /// freed.
    fn recasts_param_to_input_1(&self) -> bool {
        false
    }

    /// Whether the outputs are the key/value cache of a generation (reported as their own
    /// category).
    fn is_kv_cache(&self) -> bool {
        false
    }

    /// Whether backward computes each input's gradient with the output's shape and dtype (a
    /// product's `grad * other`); autograd's `validate_outputs` then reduces the gradient of a
    /// broadcast input to its shape (`sum_to`) and casts that of a narrower input (a bf16 factor
    /// of a float32 product under autocast) to its dtype: a full-size gradient first, then the
    /// input's. Ops whose gradient rule already is the input's (`add`, autocast-cast inputs)
    /// leave it false.
    fn grads_like_output(&self) -> bool {
        false
    }

    /// How many of the first inputs get a gradient from the backward kernel whenever the node
    /// runs, needed or not (the fused attention kernels make q's, k's and v's together); one
    /// whose input does not require grad is dropped with the node's temporaries.
    fn kernel_grads(&self, _ctx: &OpCtx) -> u8 {
        0
    }

    /// Whether its output is a new leaf tensor with `requires_grad = True` while grad is enabled
    /// (T5's zero position bias under gradient checkpointing): backward accumulates its `.grad`,
    /// and the autograd graph, which the loss keeps alive, holds the leaf and that `.grad`.
    fn leaf_requires_grad(&self) -> bool {
        false
    }
}

/// Checks the rank of input `i` and returns its shape.
pub(crate) fn expect_rank<'a>(
    op: &'static str,
    inputs: &[&'a [u64]],
    i: usize,
    rank: usize,
) -> Result<&'a [u64], ShapeError> {
    let s = inputs
        .get(i)
        .ok_or_else(|| ShapeError::new(op, format!("missing input {i}")))?;
    if s.len() != rank {
        return Err(ShapeError::new(
            op,
            format!("input {i} has shape {s:?}, expected {rank} dimensions"),
        ));
    }
    Ok(s)
}

/// Output size of a sliding window (conv, pooling) along one dimension, or an error naming it.
pub(crate) fn window_out(
    op: &'static str,
    size: u64,
    kernel: u64,
    stride: u64,
    padding: u64,
    dilation: u64,
    ceil_mode: bool,
) -> Result<u64, ShapeError> {
    let eff = dilation * (kernel - 1) + 1;
    let padded = size + 2 * padding;
    // PyTorch's pooling_output_shape: floor division of a possibly negative numerator; in
    // ceil_mode an input smaller than the kernel can still give one window (SqueezeNet at 17x17)
    let num = padded as i128 - eff as i128 + if ceil_mode { stride as i128 - 1 } else { 0 };
    let mut out = num.div_euclid(stride.max(1) as i128) + 1;
    // PyTorch: the last window must start inside the input or left padding
    if ceil_mode && out > 0 && (out - 1) * stride as i128 >= (size + padding) as i128 {
        out -= 1;
    }
    if out < 1 {
        return Err(ShapeError::new(
            op,
            format!(
                "input size {size} (padding {padding}) is smaller than the kernel extent {eff}; the input is too small for this network"
            ),
        ));
    }
    Ok(out as u64)
}

/// Broadcasts two shapes (numpy rules); `None` when they do not broadcast.
pub fn broadcast_shapes(a: &[u64], b: &[u64]) -> Option<Shape> {
    let n = a.len().max(b.len());
    let dim = |s: &[u64], i: usize| {
        if i + s.len() >= n {
            s[i + s.len() - n]
        } else {
            1
        }
    };
    (0..n)
        .map(|i| match (dim(a, i), dim(b, i)) {
            (da, db) if da == db || db == 1 => Some(da),
            (1, db) => Some(db),
            _ => None,
        })
        .collect()
}

/// Broadcasts two shapes (numpy rules), or a shape error naming `op`.
pub(crate) fn broadcast(op: &'static str, a: &[u64], b: &[u64]) -> Result<Shape, ShapeError> {
    broadcast_shapes(a, b)
        .ok_or_else(|| ShapeError::new(op, format!("shapes {a:?} and {b:?} do not broadcast")))
}
