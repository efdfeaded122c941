//! Optimizers as PyTorch's CUDA default (`foreach`) implementations run them: which state tensors
//! each creates (lazily, at the first `step`), and which temporaries a step allocates
//! (torch/optim/{sgd,adam,adamw,adagrad,rmsprop}.py, `_multi_tensor_*`).

use serde::Serialize;

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
    /// `Adagrad`: a running sum of squares; a step allocates `std` and the scaled numerator.
    #[serde(rename = "adagrad")]
    Adagrad,
    /// `RMSprop`: square_avg; a step allocates `sqrt(square_avg)`.
    #[serde(rename = "rmsprop")]
    RmsProp,
}

/// When a state tensor is created at the first step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateInit {
    /// `torch.zeros_like(p)` / `torch.full_like(p)`, all of one parameter's states in a row.
    ZerosLike,
    /// `torch.clone(grad)` (SGD momentum's first buffer).
    CloneOfGrad,
}

impl Optimizer {
    /// Every optimizer, in CLI order.
    pub const ALL: [Optimizer; 6] = [
        Optimizer::Sgd,
        Optimizer::SgdMomentum,
        Optimizer::Adam,
        Optimizer::AdamW,
        Optimizer::Adagrad,
        Optimizer::RmsProp,
    ];

    /// The CLI spelling.
    pub fn name(self) -> &'static str {
        match self {
            Optimizer::Sgd => "sgd",
            Optimizer::SgdMomentum => "sgd-momentum",
            Optimizer::Adam => "adam",
            Optimizer::AdamW => "adamw",
            Optimizer::Adagrad => "adagrad",
            Optimizer::RmsProp => "rmsprop",
        }
    }

    /// Parses the CLI spelling (also `sgdm`, `momentum`).
    pub fn parse(s: &str) -> Option<Optimizer> {
        match s {
            "sgdm" | "momentum" => Some(Optimizer::SgdMomentum),
            _ => Optimizer::ALL.into_iter().find(|o| o.name() == s),
        }
    }

    /// The state tensors per parameter (each the parameter's size and dtype), and how they start.
    pub fn states_per_param(self) -> (u32, StateInit) {
        match self {
            Optimizer::Sgd => (0, StateInit::ZerosLike),
            Optimizer::SgdMomentum => (1, StateInit::CloneOfGrad),
            Optimizer::Adam | Optimizer::AdamW => (2, StateInit::ZerosLike),
            Optimizer::Adagrad | Optimizer::RmsProp => (1, StateInit::ZerosLike),
        }
    }

    /// Temporaries of one foreach step, as a number of parameter-sized tensor lists that are all
    /// alive at the step's peak (Adam: `exp_avg_sq_sqrt`; Adagrad: `std` and the numerator).
    pub fn step_temporary_lists(self) -> u32 {
        match self {
            Optimizer::Sgd | Optimizer::SgdMomentum => 0,
            Optimizer::Adam | Optimizer::AdamW | Optimizer::RmsProp => 1,
            Optimizer::Adagrad => 2,
        }
    }

    /// A one-line account of what the optimizer keeps and allocates.
    pub fn describe(self) -> &'static str {
        match self {
            Optimizer::Sgd => "SGD keeps no state",
            Optimizer::SgdMomentum => "SGD momentum clones each gradient into a momentum buffer at the first step",
            Optimizer::Adam | Optimizer::AdamW => {
                "Adam creates exp_avg and exp_avg_sq lazily at the first step; each foreach step allocates sqrt(exp_avg_sq) for all parameters"
            }
            Optimizer::Adagrad => "Adagrad keeps a sum of squares; each step allocates std and the scaled gradient",
            Optimizer::RmsProp => "RMSprop keeps square_avg; each step allocates its square root",
        }
    }
}
