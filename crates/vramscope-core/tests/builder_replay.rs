//! `GraphBuilder::module_repeated` copies the first call of a run of identical module calls: the
//! graph must be the one that calling the closure every time records, in every case the copy
//! covers (parameters, buffers, nested modules, held locals, shared tensors, an input given in
//! another position) and in the cases where it must fall back to calling the closure.

use vramscope_core::builder::{without_module_replay, RepeatedModule};
use vramscope_core::ir::Task;
use vramscope_core::ops::{Aten, Linear, Saved};
use vramscope_core::{DType, Graph, GraphBuilder, TensorId};

/// A block reading its input `x`, a tensor `shared` made outside the blocks, its own parameters
/// and buffer, with a held local inside a plain function and a nested module.
fn block(b: &mut GraphBuilder, x: TensorId, shared: TensorId) -> TensorId {
    let h = b.layer("fc", Linear::new(4, 4), &[x]);
    let scale = b.parameter("scale", vec![4]);
    let _steps = b.buffer("steps", vec![1], Some(DType::I64));
    let y = b.op(
        Aten::new("mul", vec![2, 4]).saves(vec![Saved::Input(0), Saved::Input(1)]),
        &[h, scale],
    );
    b.hold(&[h]);
    let z = b.frame(|b| {
        let u = b.op(Aten::new("add", vec![2, 4]), &[y, shared]);
        b.hold(&[u]);
        u
    });
    b.module("inner", "Inner", &[z], |b| {
        b.op(
            Aten::new("relu", vec![2, 4]).saves(vec![Saved::Output(0)]),
            &[z],
        )
    })
}

/// `layers` blocks in a `ModuleList`, after `prepare` (which may declare modules).
fn model(layers: u32, prepare: impl Fn(&mut GraphBuilder)) -> Graph {
    let mut b = GraphBuilder::new("m", "M");
    let x = b.input(vec![2, 4], DType::F32);
    let shared = b.op(Aten::new("ones", vec![2, 4]), &[x]);
    prepare(&mut b);
    let mut rep = RepeatedModule::default();
    let mut h = x;
    b.module("layers", "ModuleList", &[], |b| {
        for i in 0..layers {
            // the shared tensor is passed first: inputs are matched by position
            h = b.module_repeated(&mut rep, &i.to_string(), "Block", &[shared, h], |b| {
                block(b, h, shared)
            });
        }
    });
    b.finish(&[h], Task::Classification { num_classes: 4 })
        .expect("builds")
}

fn assert_same(prepare: impl Fn(&mut GraphBuilder) + Copy) {
    let replayed = model(4, prepare);
    let built = without_module_replay(|| model(4, prepare));
    assert_eq!(format!("{replayed:?}"), format!("{built:?}"));
    assert_eq!(replayed.modules.len(), 2 + 4 * 3);
    assert_eq!(replayed.params.len(), 4 * 4);
}

#[test]
fn replayed_blocks_equal_built_blocks() {
    assert_same(|_| {});
}

#[test]
fn a_declared_block_is_built_not_replayed() {
    // `layers.2` exists before it is called: its parameters keep the declared order
    assert_same(|b| {
        b.declare("layers", "ModuleList", |b| {
            b.declare("2", "Block", |b| b.declare_layer("fc", &Linear::new(4, 4)));
        });
    });
}

#[test]
fn replay_is_what_makes_later_blocks() {
    // the copies share the first block's op objects; a built graph has its own per block
    let g = model(3, |_| {});
    let relu: Vec<_> = g.nodes.iter().filter(|n| n.op.kind() == "relu").collect();
    assert_eq!(relu.len(), 3);
    assert!(std::sync::Arc::ptr_eq(&relu[0].op, &relu[2].op));
    let built = without_module_replay(|| model(3, |_| {}));
    let relu: Vec<_> = built
        .nodes
        .iter()
        .filter(|n| n.op.kind() == "relu")
        .collect();
    assert!(!std::sync::Arc::ptr_eq(&relu[0].op, &relu[2].op));
}

/// A block whose forward calls `norm` before `fc` while `__init__` creates `fc` first, with its
/// own buffer: `order_params` puts `fc`, then `norm`, then the buffer.
fn reordered_block(b: &mut GraphBuilder, x: TensorId) -> TensorId {
    let mark = b.param_mark();
    let _steps = b.buffer("steps", vec![1], Some(DType::I64));
    let n = b.module("norm", "Norm", &[x], |b| {
        let w = b.parameter("weight", vec![4]);
        b.op(Aten::new("mul", vec![2, 4]), &[x, w])
    });
    let y = b.layer("fc", Linear::new(4, 4), &[n]);
    b.order_params(mark, &["fc", "norm"]);
    y
}

fn reordered_model(layers: u32) -> Graph {
    let mut b = GraphBuilder::new("m", "M");
    let x = b.input(vec![2, 4], DType::F32);
    let mut rep = RepeatedModule::default();
    let mut h = x;
    b.module("layers", "ModuleList", &[], |b| {
        for i in 0..layers {
            h = b.module_repeated(&mut rep, &i.to_string(), "Block", &[h], |b| {
                reordered_block(b, h)
            });
        }
    });
    b.finish(&[h], Task::Classification { num_classes: 4 })
        .expect("builds")
}

#[test]
fn parameters_take_the_init_order_and_ops_keep_their_parameters() {
    let g = reordered_model(3);
    let names: Vec<&str> = g.params.iter().map(|p| p.name.as_str()).collect();
    let mut want = Vec::new();
    for i in 0..3 {
        for n in ["fc.weight", "fc.bias", "norm.weight", "steps"] {
            want.push(format!("layers.{i}.{n}"));
        }
    }
    assert_eq!(names, want);
    // construction follows the same order
    for (i, p) in g.params.iter().enumerate() {
        assert_eq!(p.init_rank, i as u32, "{}", p.name);
    }
    // every op still reads the parameters of its own module
    for node in &g.nodes {
        let module = &g.modules[node.module.0 as usize].path;
        for p in &node.params {
            assert!(g.params[p.0 as usize].name.starts_with(module.as_str()));
        }
        for t in &node.inputs {
            if let Some(p) = g.tensors[t.0 as usize].param {
                let name = &g.params[p.0 as usize].name;
                assert!(name.starts_with(module.as_str()), "{name} in {module}");
            }
        }
    }
    // and the copies are what calling every block records
    let built = without_module_replay(|| reordered_model(3));
    assert_eq!(format!("{g:?}"), format!("{built:?}"));
}

/// A head whose `__init__` runs before the encoder's (XLM-RoBERTa's): `order_params` puts the
/// head first, the construction temporary the encoder's `post_init` made stays right after the
/// encoder's last parameter, and `tie_at_init_in` allocates the untied weight inside the head's
/// construction and frees it after that temporary.
#[test]
fn a_head_built_first_keeps_the_encoders_construction_temporary_in_place() {
    let mut b = GraphBuilder::new("m", "M");
    let top = b.param_mark();
    let x = b.input(vec![2, 4], DType::F32);
    let h = b.module("encoder", "Encoder", &[x], |b| {
        let h = b.layer("a", Linear::new(4, 4), &[x]);
        let h = b.layer("b", Linear::new(4, 4), &[h]);
        b.temporary_at_init(vec![8], DType::I64);
        h
    });
    let (y, bias) = b.module("head", "Head", &[h], |b| {
        let bias = b.parameter("bias", vec![4]);
        let y = b.layer("dense", Linear::new(4, 4), &[h]);
        (y, bias)
    });
    b.order_params(top, &["head", "encoder"]);
    let y = b.op(Aten::new("add", vec![2, 4]), &[y, bias]);
    b.tie_at_init_in("head", &[vec![4, 4]], 1, Some(bias));
    let g = b
        .finish(&[y], Task::Classification { num_classes: 4 })
        .expect("builds");
    let rank = |name: &str| {
        g.params
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.init_rank)
            .expect(name)
    };
    // construction: head.dense (2), encoder (4), then the head's bias anew (post_init)
    assert_eq!(rank("head.dense.weight"), 0);
    assert_eq!(rank("encoder.a.weight"), 2);
    assert_eq!(rank("encoder.b.bias"), 5);
    assert_eq!(rank("head.bias"), 6);
    let [arange, untied] = &g.init_temporaries[..] else {
        panic!("two construction temporaries: {:?}", g.init_temporaries)
    };
    // after the encoder's last parameter, before the bias is made again
    assert_eq!((arange.alloc_at, arange.free_at), (6, 6));
    // made with the head's dense layer, dropped after the encoder's temporary
    assert_eq!((untied.alloc_at, untied.free_at), (2, 6));
    assert!(untied.freed_after_allocations && !arange.freed_after_allocations);
}
