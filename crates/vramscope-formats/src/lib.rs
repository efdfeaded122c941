//! vramscope-formats: front-ends that build the graph IR: the built-in torchvision zoo, Hugging
//! Face `config.json` files (`hf`) and the built-in configs (`hf_zoo`), ONNX files (`onnx`), and
//! weight-file headers (`weights`, `safetensors`, `gguf`) and the parameter dtypes they give a built
//! graph (`checkpoint_dtypes`); built-in names as users type them (`names`).
#![deny(missing_docs)]

pub mod checkpoint_dtypes;
pub mod gguf;
pub mod hf;
pub mod hf_zoo;
pub mod names;
pub mod onnx;
pub mod safetensors;
pub mod weights;
pub mod zoo;
