//! vramscope-core: the graph IR, the op library, the training-step simulator and the model of
//! PyTorch's CUDA caching allocator. No I/O happens here (`heap` only tunes the C allocator).
#![deny(missing_docs)]

pub mod allocator;
pub mod builder;
pub mod dtype;
mod fasthash;
pub mod heap;
pub mod ir;
pub mod ops;
pub mod optim;
pub mod passes;
pub mod sim;

pub use builder::{BuildError, GraphBuilder, InitStep};
pub use dtype::{DType, Precision};
pub use ir::{Graph, Shape, TensorId};
