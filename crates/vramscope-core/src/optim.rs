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

    /// The state tensors of one parameter (each the parameter's size and dtype), by name.
    pub fn state_names(self) -> &'static [&'static str] {
        match self {
            Optimizer::Sgd => &[],
            Optimizer::SgdMomentum => &["momentum_buffer"],
            Optimizer::Adam | Optimizer::AdamW => &["exp_avg", "exp_avg_sq"],
            Optimizer::Adagrad => &["sum"],
            Optimizer::RmsProp => &["square_avg"],
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
            Optimizer::Adagrad => "Adagrad creates its sum of squares in the constructor; each step allocates std and the scaled gradient",
            Optimizer::RmsProp => "RMSprop keeps square_avg; each step allocates its square root",
        }
    }
}
