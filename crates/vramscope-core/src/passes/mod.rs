//! Graph passes: rewrites of a built [`Graph`](crate::Graph) that model what user code does to a
//! model after building it (PEFT's LoRA injection, `requires_grad_(False)` on some parameters,
//! `inplace=True` activations) or how it is loaded (bitsandbytes 4-bit quantization).

pub mod inplace;
pub mod load_4bit;
pub mod lora;

pub use inplace::inplace_activations;
pub use load_4bit::{load_in_4bit, FourBitConfig, FOUR_BIT_LINEAR};
pub use lora::{apply_lora, freeze, LoraConfig, PassError};

use crate::ir::{Graph, ModuleId, ParamDef, ParamId};

/// A module that owns parameters or buffers but that the forward never calls (a vision tower run
/// on text alone: built and loaded, never run), with its own parameters and buffers.
pub(crate) struct IdleModule<'g> {
    pub(crate) id: ModuleId,
    pub(crate) params: Vec<(ParamId, &'g ParamDef)>,
}

impl IdleModule<'_> {
    /// Its parameter or buffer whose name ends in `.{attr}`.
    pub(crate) fn param(&self, attr: &str) -> Option<(ParamId, &ParamDef)> {
        self.params
            .iter()
            .copied()
            .find(|(_, p)| p.name.rsplit('.').next() == Some(attr))
    }
}

/// The graph's idle modules in module order (one walk over the calls, one over the parameters):
/// LoRA and 4-bit loading treat them as PEFT and bitsandbytes do, which see modules, not calls.
pub(crate) fn idle_modules(g: &Graph) -> Vec<IdleModule<'_>> {
    let mut called = vec![false; g.modules.len()];
    for s in &g.scopes {
        called[s.module.0 as usize] = true;
    }
    let mut owned: Vec<Vec<(ParamId, &ParamDef)>> = vec![Vec::new(); g.modules.len()];
    for (i, p) in g.params.iter().enumerate() {
        owned[p.module.0 as usize].push((ParamId(i as u32), p));
    }
    owned
        .into_iter()
        .enumerate()
        .filter(|(i, params)| !called[*i] && !params.is_empty())
        .map(|(i, params)| IdleModule {
            id: ModuleId(i as u32),
            params,
        })
        .collect()
}

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
