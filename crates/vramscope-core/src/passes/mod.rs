//! Graph passes: rewrites of a built [`Graph`](crate::Graph) that model what user code does to a
//! model after building it (PEFT's LoRA injection, `requires_grad_(False)` on some parameters,
//! `inplace=True` activations) or how it is loaded (bitsandbytes 4-bit quantization).

pub mod inplace;
pub mod load_4bit;
pub mod lora;

pub use inplace::inplace_activations;
pub use load_4bit::{load_in_4bit, FourBitConfig, FOUR_BIT_LINEAR};
pub use lora::{apply_lora, freeze, LoraConfig, PassError};

/// Lookups the passes' tests share.
#[cfg(test)]
pub(crate) mod test_util {
    use crate::ir::{Graph, ModuleId, ParamDef};

    /// The parameter named `name`.
    pub(crate) fn param<'a>(g: &'a Graph, name: &str) -> &'a ParamDef {
        g.params
            .iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("no {name}"))
    }

    /// The op kinds of the nodes module `m` issued, in order.
    pub(crate) fn op_kinds(g: &Graph, m: ModuleId) -> Vec<&'static str> {
        g.nodes
            .iter()
            .filter(|n| n.module == m)
            .map(|n| n.op.kind())
            .collect()
    }
}
