//! Optimizers as PyTorch's CUDA default (`foreach`) implementations run them: which state tensors
//! each creates (lazily, at the first `step`), and which temporaries a step allocates
//! (torch/optim/{sgd,adam,adamw,adagrad,rmsprop}.py, `_multi_tensor_*`); Adam and AdamW with
//! `fused=True` (`_fused_adam`, Hugging Face Trainer's default `adamw_torch_fused`); bitsandbytes' 8-bit
//! Adam (bitsandbytes/optim/optimizer.py, `Optimizer2State`, blockwise) and torch's Adafactor
//! (torch/optim/_adafactor.py, whose default is the single-tensor loop).

use serde::Serialize;

use crate::dtype::DType;
use smallvec::{smallvec, SmallVec};

use crate::ir::{numel, Dims, Shape};

/// bitsandbytes quantises blocks of 256 values, each with an fp32 absmax.
pub const BNB_BLOCK: u64 = 256;
/// bitsandbytes keeps fp32 states for parameters smaller than this (`min_8bit_size`).
pub const BNB_MIN_8BIT_SIZE: u64 = 4096;

/// A parameter's optimizer state tensors: (name, sizes, dtype), in creation order.
pub type StateTensors = SmallVec<[(&'static str, Dims, DType); 4]>;

/// An optimizer with PyTorch's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Optimizer {
    /// `SGD(lr)`: no state.
    #[serde(rename = "sgd")]
    Sgd,
    /// `SGD(lr, momentum=0.9)`: a momentum buffer per parameter (a clone of the first gradient).
    #[serde(rename = "sgd-momentum")]
    SgdMomentum,
    /// `Adam`: exp_avg and exp_avg_sq; a step allocates `sqrt(exp_avg_sq)` for every parameter.
    #[serde(rename = "adam")]
    Adam,
    /// `AdamW`: as Adam (weight decay is applied in place).
    #[serde(rename = "adamw")]
    AdamW,
    /// `Adam(fused=True)`: exp_avg and exp_avg_sq, and the step count as a float32 scalar on the
    /// device (created first); one fused kernel updates everything in place (no temporaries).
    #[serde(rename = "adam-fused")]
    AdamFused,
    /// `AdamW(fused=True)`: as fused Adam (Hugging Face Trainer's default optimizer,
    /// `adamw_torch_fused`, with torch 2.8 or newer).
    #[serde(rename = "adamw-fused")]
    AdamWFused,
    /// `Adagrad`: a running sum of squares; a step allocates `std` and the scaled numerator.
    #[serde(rename = "adagrad")]
    Adagrad,
    /// `RMSprop`: square_avg; a step allocates `sqrt(square_avg)`.
    #[serde(rename = "rmsprop")]
    RmsProp,
    /// `bitsandbytes.optim.Adam8bit` (blockwise): uint8 `state1`/`state2` (1 byte per element
    /// each) plus one fp32 `absmax` per 256-element block per state; fp32 states for parameters
    /// under 4096 elements; two shared 256-entry fp32 quantisation maps. The step is one fused
    /// kernel per parameter (no temporaries).
    #[serde(rename = "adam8bit")]
    Adam8bit,
    /// `torch.optim.Adafactor`: factored second moments for parameters of 2 or more dimensions
    /// (`row_var` with the last dimension 1, `col_var` with the second-to-last 1), a full
    /// `variance` for vectors. Single-tensor loop (torch's default for Adafactor), whose
    /// temporaries are Python locals: a parameter's `var_estimate` lives until the next one's is
    /// made ([`Optimizer::parameter_loop`]).
    #[serde(rename = "adafactor")]
    Adafactor,
}

/// What an optimizer step allocates besides the states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepTemporaries {
    /// Foreach: this many parameter-sized tensor lists, all alive at the step's peak.
    Foreach(u32),
    /// A loop over parameters whose temporaries are the step function's locals
    /// ([`Optimizer::parameter_loop`]).
    PerParameter,
}

/// One allocation of a per-parameter step loop, as CPython runs it: a temporary bound to a local
/// of the step function lives until that local is rebound (in the next parameter's iteration)
/// or the function returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoopStep {
    /// A new tensor of this shape (the parameter's dtype) bound to local number `.0` of
    /// [`Optimizer::loop_locals`]; what the local held is released.
    Bind(usize, Shape),
    /// Local `.0` rebound to the tensor local `.1` holds (`update = var_estimate.clamp_(..)`,
    /// an in-place op returning its input); what `.0` held is released.
    Alias(usize, usize),
    /// A tensor freed as soon as it is made (a `.item()` read's norm, a divisor).
    Transient(Shape),
}

/// When the state tensors are created (all of one parameter's states in a row, each the
/// parameter's size and dtype).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateInit {
    /// Lazily, at the first `step` (`zeros_like(p)`, or `clone(grad)` for SGD momentum).
    FirstStep,
    /// Eagerly in the optimizer's constructor (Adagrad's `full_like(p, initial_accumulator_value)`).
    Constructor,
}

impl Optimizer {
    /// Every optimizer, in CLI order.
    pub const ALL: [Optimizer; 10] = [
        Optimizer::Sgd,
        Optimizer::SgdMomentum,
        Optimizer::Adam,
        Optimizer::AdamW,
        Optimizer::AdamFused,
        Optimizer::AdamWFused,
        Optimizer::Adagrad,
        Optimizer::RmsProp,
        Optimizer::Adam8bit,
        Optimizer::Adafactor,
    ];

    /// The CLI spelling.
    pub fn name(self) -> &'static str {
        match self {
            Optimizer::Sgd => "sgd",
            Optimizer::SgdMomentum => "sgd-momentum",
            Optimizer::Adam => "adam",
            Optimizer::AdamW => "adamw",
            Optimizer::AdamFused => "adam-fused",
            Optimizer::AdamWFused => "adamw-fused",
            Optimizer::Adagrad => "adagrad",
            Optimizer::RmsProp => "rmsprop",
            Optimizer::Adam8bit => "adam8bit",
            Optimizer::Adafactor => "adafactor",
        }
    }

    /// Parses the CLI spelling (also `sgdm`, `momentum`, `adamw8bit`, `adam-8bit`, and
    /// Hugging Face Trainer's `optim` names `adamw_torch`, `adamw_torch_fused`).
    pub fn parse(s: &str) -> Option<Optimizer> {
        match s {
            "sgdm" | "momentum" => Some(Optimizer::SgdMomentum),
            "adamw_torch" | "adamw-torch" => Some(Optimizer::AdamW),
            "adam_fused" => Some(Optimizer::AdamFused),
            "adamw_fused" | "adamw_torch_fused" | "adamw-torch-fused" => {
                Some(Optimizer::AdamWFused)
            }
            "adamw8bit" | "adam-8bit" | "adamw-8bit" => Some(Optimizer::Adam8bit),
            _ => Optimizer::ALL.into_iter().find(|o| o.name() == s),
        }
    }

    /// The state tensors of one parameter, by name (each the parameter's size and dtype, but for
    /// the fused optimizers' scalar `step`).
    pub fn state_names(self) -> &'static [&'static str] {
        match self {
            Optimizer::Sgd => &[],
            Optimizer::SgdMomentum => &["momentum_buffer"],
            Optimizer::Adam | Optimizer::AdamW => &["exp_avg", "exp_avg_sq"],
            Optimizer::AdamFused | Optimizer::AdamWFused => &["step", "exp_avg", "exp_avg_sq"],
            Optimizer::Adagrad => &["sum"],
            Optimizer::RmsProp => &["square_avg"],
            Optimizer::Adam8bit => &["state1", "state2", "absmax1", "absmax2"],
            Optimizer::Adafactor => &["row_var", "col_var"],
        }
    }

    /// The state tensors of one parameter of `shape` and `dtype`, in creation order (held inline:
    /// a large model asks this for every one of its parameters).
    pub fn state_tensors(self, shape: &[u64], dtype: DType) -> StateTensors {
        let dims = || Dims::from_slice(shape);
        match self {
            Optimizer::Adam8bit if self.uses_shared_state(shape) => {
                let blocks = numel(shape).div_ceil(BNB_BLOCK);
                smallvec![
                    ("state1", dims(), DType::U8),
                    ("state2", dims(), DType::U8),
                    ("absmax1", smallvec![blocks], DType::F32),
                    ("absmax2", smallvec![blocks], DType::F32),
                ]
            }
            Optimizer::Adam8bit => smallvec![
                ("state1", dims(), DType::F32),
                ("state2", dims(), DType::F32),
            ],
            Optimizer::Adafactor if shape.len() >= 2 => {
                let n = shape.len();
                let (mut row, mut col) = (dims(), dims());
                row[n - 1] = 1;
                col[n - 2] = 1;
                smallvec![("row_var", row, dtype), ("col_var", col, dtype)]
            }
            Optimizer::Adafactor => smallvec![("variance", dims(), dtype)],
            // `_init_group`: `state["step"] = torch.zeros((), dtype=_get_scalar_dtype(is_fused=
            // True), device=p.device)` (float32), then the moments
            Optimizer::AdamFused | Optimizer::AdamWFused => smallvec![
                ("step", Dims::new(), DType::F32),
                ("exp_avg", dims(), dtype),
                ("exp_avg_sq", dims(), dtype),
            ],
            _ => self
                .state_names()
                .iter()
                .map(|&n| (n, dims(), dtype))
                .collect(),
        }
    }

    /// State shared by all parameters, created before the state of the first parameter that
    /// [uses](Optimizer::uses_shared_state) it (bitsandbytes' `dynamic` and `udynamic`
    /// quantisation maps, moved to the device by `init_state` of the first 8-bit parameter).
    pub fn shared_state(self) -> Vec<(&'static str, Shape, DType)> {
        match self {
            Optimizer::Adam8bit => vec![
                ("qmap dynamic", vec![256], DType::F32),
                ("qmap udynamic", vec![256], DType::F32),
            ],
            _ => Vec::new(),
        }
    }

    /// Whether a parameter of `shape` keeps its state with the [shared state](Optimizer::shared_state)
    /// (bitsandbytes: an 8-bit one, of `min_8bit_size` elements or more).
    pub fn uses_shared_state(self, shape: &[u64]) -> bool {
        self == Optimizer::Adam8bit && numel(shape) >= BNB_MIN_8BIT_SIZE
    }

    /// The temporaries of one step.
    pub fn step_temporaries(self) -> StepTemporaries {
        match self {
            Optimizer::Adafactor => StepTemporaries::PerParameter,
            o => StepTemporaries::Foreach(o.step_temporary_lists()),
        }
    }

    /// The locals of a per-parameter step loop that hold temporaries, in the order CPython clears
    /// them when the function returns (`co_varnames`: order of first appearance).
    pub fn loop_locals(self) -> &'static [&'static str] {
        match self {
            Optimizer::Adafactor => &[
                "row_mean",
                "col_mean",
                "var_estimate",
                "grad_squared",
                "update",
            ],
            _ => &[],
        }
    }

    /// What one parameter's iteration of a per-parameter step loop allocates, in order
    /// (torch/optim/_adafactor.py, `_single_tensor_adafactor`; the step count is a CPU tensor).
    pub fn parameter_loop(self, shape: &[u64]) -> Vec<LoopStep> {
        const ROW_MEAN: usize = 0;
        const COL_MEAN: usize = 1;
        const VAR_ESTIMATE: usize = 2;
        const GRAD_SQUARED: usize = 3;
        const UPDATE: usize = 4;
        match self {
            Optimizer::Adafactor => {
                let n = shape.len();
                // `alpha = max(eps2, param.norm(2).item() / ...)`
                let mut steps = vec![LoopStep::Transient(Vec::new())];
                if n >= 2 {
                    let (mut row, mut col, mut corner) =
                        (shape.to_vec(), shape.to_vec(), shape.to_vec());
                    row[n - 1] = 1;
                    col[n - 2] = 1;
                    corner[n - 2..].fill(1);
                    steps.extend([
                        // vector_norm(grad, dim=-1, keepdim=True).square_().div_(..)
                        LoopStep::Bind(ROW_MEAN, row),
                        LoopStep::Bind(COL_MEAN, col),
                        // row_var @ col_var
                        LoopStep::Bind(VAR_ESTIMATE, shape.to_vec()),
                        // var_estimate.div_(row_var.mean(dim=-2, keepdim=True).clamp_(min=eps1))
                        LoopStep::Transient(corner),
                    ]);
                } else {
                    steps.extend([
                        LoopStep::Bind(GRAD_SQUARED, shape.to_vec()),
                        // variance.clone()
                        LoopStep::Bind(VAR_ESTIMATE, shape.to_vec()),
                    ]);
                }
                steps.extend([
                    // update = var_estimate.clamp_(min=eps1 * eps1).rsqrt_(); update.mul_(grad)
                    LoopStep::Alias(UPDATE, VAR_ESTIMATE),
                    // denom = max(1.0, update.norm(2).item() / ...)
                    LoopStep::Transient(Vec::new()),
                ]);
                steps
            }
            _ => Vec::new(),
        }
    }

    /// When the states are created.
    pub fn state_init(self) -> StateInit {
        match self {
            Optimizer::Adagrad => StateInit::Constructor,
            _ => StateInit::FirstStep,
        }
    }

    /// Temporaries of one foreach step, as a number of parameter-sized tensor lists that are all
    /// alive at the step's peak (Adam: `exp_avg_sq_sqrt`; Adagrad: `std` and the numerator).
    pub fn step_temporary_lists(self) -> u32 {
        match self {
            Optimizer::Sgd | Optimizer::SgdMomentum => 0,
            Optimizer::Adam | Optimizer::AdamW | Optimizer::RmsProp => 1,
            Optimizer::Adagrad => 2,
            Optimizer::AdamFused | Optimizer::AdamWFused => 0,
            Optimizer::Adam8bit | Optimizer::Adafactor => 0,
        }
    }

    /// Whether the step is one fused kernel that takes GradScaler's scale and inf flag itself
    /// (`_step_supports_amp_scaling`): `scaler.step` then skips `unscale_`.
    pub fn is_fused(self) -> bool {
        matches!(self, Optimizer::AdamFused | Optimizer::AdamWFused)
    }

    /// A one-line account of what the optimizer keeps and allocates.
    pub fn describe(self) -> &'static str {
        match self {
            Optimizer::Sgd => "SGD keeps no state",
            Optimizer::SgdMomentum => "SGD momentum clones each gradient into a momentum buffer at the first step",
            Optimizer::Adam | Optimizer::AdamW => {
                "Adam creates exp_avg and exp_avg_sq lazily at the first step; each foreach step allocates sqrt(exp_avg_sq) for all parameters"
            }
            Optimizer::AdamFused | Optimizer::AdamWFused => {
                "fused Adam creates exp_avg, exp_avg_sq and a float32 step scalar on the device at the first step; its fused step updates in place and allocates nothing"
            }
            Optimizer::Adagrad => "Adagrad creates its sum of squares in the constructor; each step allocates std and the scaled gradient",
            Optimizer::RmsProp => "RMSprop keeps square_avg; each step allocates its square root",
            Optimizer::Adam8bit => {
                "8-bit Adam (bitsandbytes) creates uint8 state1/state2 and per-256-block absmax at the first step; its fused step allocates nothing"
            }
            Optimizer::Adafactor => {
                "Adafactor creates factored row/column second moments at the first step; its per-parameter loop keeps a parameter's var_estimate until the next one's is made"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `_single_tensor_adafactor`'s allocations per parameter (torch/optim/_adafactor.py): the
    /// norms read with `.item()`, the factored means of a matrix (or a stack of them: an MoE's
    /// 3-d experts factor their last two dimensions), `var_estimate` and its divisor; a vector's
    /// `grad * grad` and `variance.clone()`. `update` is `var_estimate` itself.
    #[test]
    fn adafactor_loop_binds_the_functions_locals() {
        use LoopStep::*;
        let [row_mean, col_mean, var_estimate, grad_squared, update] = [0, 1, 2, 3, 4];
        assert_eq!(
            Optimizer::Adafactor.loop_locals()[var_estimate],
            "var_estimate"
        );
        assert_eq!(
            Optimizer::Adafactor.parameter_loop(&[8, 64, 32]),
            vec![
                Transient(vec![]),
                Bind(row_mean, vec![8, 64, 1]),
                Bind(col_mean, vec![8, 1, 32]),
                Bind(var_estimate, vec![8, 64, 32]),
                Transient(vec![8, 1, 1]),
                Alias(update, var_estimate),
                Transient(vec![]),
            ]
        );
        assert_eq!(
            Optimizer::Adafactor.parameter_loop(&[32]),
            vec![
                Transient(vec![]),
                Bind(grad_squared, vec![32]),
                Bind(var_estimate, vec![32]),
                Alias(update, var_estimate),
                Transient(vec![]),
            ]
        );
        assert!(Optimizer::AdamW.parameter_loop(&[32]).is_empty());
    }

    /// bitsandbytes keeps 32-bit states, and needs no quantisation map, below `min_8bit_size`.
    #[test]
    fn eight_bit_adam_uses_its_maps_from_min_8bit_size() {
        assert!(!Optimizer::Adam8bit.uses_shared_state(&[64, 63]));
        assert!(Optimizer::Adam8bit.uses_shared_state(&[64, 64]));
        assert!(!Optimizer::AdamW.uses_shared_state(&[4096, 4096]));
    }
}
