//! Graph passes: rewrites of a built [`Graph`](crate::Graph) that model what user code does to a
//! model after building it (PEFT's LoRA injection, `requires_grad_(False)` on some parameters,
//! `inplace=True` activations).

pub mod inplace;
pub mod lora;

pub use inplace::inplace_activations;
pub use lora::{apply_lora, freeze, LoraConfig, PassError};
