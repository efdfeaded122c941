//! vramscope-formats: front-ends that build the graph IR. Today: the built-in torchvision zoo, the
//! built-in Hugging Face configs (`hf_zoo`) and weight-file headers (`weights`, `safetensors`, `gguf`).
#![deny(missing_docs)]

pub mod gguf;
pub mod hf_zoo;
pub mod safetensors;
pub mod weights;
pub mod zoo;
