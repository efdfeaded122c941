//! vramscope-formats: front-ends that build the graph IR. The built-in torchvision zoo and
//! Hugging Face `config.json` files.
#![deny(missing_docs)]

pub mod hf;
pub mod zoo;
