//! vramscope-formats: front-ends that build the graph IR. The built-in torchvision zoo and ONNX files.
#![deny(missing_docs)]

pub mod onnx;
pub mod zoo;
