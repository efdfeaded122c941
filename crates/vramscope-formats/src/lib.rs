//! vramscope-formats: front-ends that build the graph IR. Today: the built-in torchvision zoo.
#![deny(missing_docs)]

pub mod zoo;
