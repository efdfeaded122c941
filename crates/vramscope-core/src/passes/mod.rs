//! Graph passes: rewrites of a built [`Graph`](crate::Graph) that model what user code does to a
//! model after building it (PEFT's LoRA injection, `requires_grad_(False)` on some parameters,
//! `inplace=True` activations) or how it is loaded (bitsandbytes 4-bit quantization).

pub mod inplace;
pub mod load_4bit;
pub mod lora;

pub use inplace::inplace_activations;
pub use load_4bit::{load_in_4bit, FourBitConfig, FOUR_BIT_LINEAR};
pub use lora::{apply_lora, freeze, LoraConfig, PassError};
