//! The `inplace=True` pass: every activation module switched to its in-place variant where
//! PyTorch allows it.

use crate::ir::{Graph, TensorId};
use crate::ops::{Alias, OpCtx, Saved, TensorMeta};

/// Flips activation ops to their `inplace=True` variant where PyTorch allows it: the input is
/// an intermediate tensor (not the batch, a parameter or an output) whose only reader is the
/// activation, that no frame keeps referenced, that is not a view or in-place result, and whose
/// producer does not save its output for backward (autograd would raise "one of the variables
/// needed for gradient computation has been modified by an inplace operation"). Returns the new
/// graph and the number of ops flipped.
pub fn inplace_activations(g: &Graph) -> (Graph, usize) {
    let mut readers = vec![0u32; g.tensors.len()];
    for node in &g.nodes {
        for t in &node.inputs {
            readers[t.0 as usize] += 1;
        }
    }
    let meta = |t: &TensorId| {
        let d = g.tensor(*t);
        TensorMeta::new(d.shape.to_vec(), d.dtype)
    };
    let mut out = g.clone();
    let mut flipped = 0;
    for (n, node) in g.nodes.iter().enumerate() {
        let Some(variant) = node.op.inplace_variant() else {
            continue;
        };
        let [t] = node.inputs.as_slice() else {
            continue;
        };
        let i = t.0 as usize;
        let def = g.tensor(*t);
        let kept = g.inputs.contains(t)
            || g.outputs.contains(t)
            || def.param.is_some()
            || readers[i] != 1
            || g.holds.iter().any(|(h, _)| h == t);
        let Some(p) = def.producer.filter(|_| !kept) else {
            continue;
        };
        let prod = &g.nodes[p.0 as usize];
        if prod.op.alias() != Alias::None {
            continue;
        }
        let inputs: Vec<TensorMeta> = prod.inputs.iter().map(meta).collect();
        let params: Vec<TensorMeta> = prod
            .params
            .iter()
            .map(|p| {
                let d = g.param(*p);
                TensorMeta::new(d.shape.to_vec(), d.dtype)
            })
            .collect();
        let outputs: Vec<TensorMeta> = prod.outputs.iter().map(meta).collect();
        let ctx = OpCtx {
            inputs: &inputs,
            params: &params,
            outputs: &outputs,
            training: true,
            inputs_require_grad: &[],
            keeps_saved: true,
            saved_unpacked: false,
        };
        let saves_t = prod.op.saved_for_backward(&ctx).iter().any(|s| match s {
            Saved::Output(k) => prod.outputs.get(*k) == Some(t),
            _ => false,
        });
        if saves_t {
            continue;
        }
        out.nodes[n].op = variant;
        flipped += 1;
    }
    (out, flipped)
}
