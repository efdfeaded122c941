//! Records a forward program into a [`Graph`], the way PyTorch eager would run it: module calls
//! open scopes (so parameters get their `named_parameters()` names), ops append nodes in order and
//! check shapes as they go.

use std::sync::Arc;

use crate::dtype::DType;
use crate::ir::{
    Graph, InitTemporary, ModuleDef, ModuleId, Node, NodeId, ParamDef, ParamId, ParamKind, Scope,
    Shape, Task, TensorDef, TensorId,
};
use crate::ops::{Op, ShapeError};

/// An error while building a graph: a shape rule failed inside a named module.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{shape}", where_(module))]
pub struct BuildError {
    /// Path of the module whose op failed (`""` is the root).
    pub module: String,
    /// What the op's shape rule said.
    pub shape: ShapeError,
}

fn where_(module: &str) -> String {
    if module.is_empty() {
        String::new()
    } else {
        format!("in module `{module}`: ")
    }
}

/// Builds a [`Graph`] op by op.
#[derive(Debug)]
pub struct GraphBuilder {
    graph: Graph,
    stack: Vec<ModuleId>,
    /// Python frames (module calls and plain functions) and the locals they keep referenced
    frames: Vec<Vec<TensorId>>,
    module_index: std::collections::HashMap<String, ModuleId>,
    param_index: std::collections::HashMap<String, ParamId>,
    error: Option<BuildError>,
}

impl GraphBuilder {
    /// A new builder whose root module has class `root_type`.
    pub fn new(name: &str, root_type: &str) -> Self {
        GraphBuilder {
            graph: Graph {
                name: name.to_string(),
                tensors: Vec::new(),
                params: Vec::new(),
                modules: vec![ModuleDef {
                    path: String::new(),
                    type_name: root_type.to_string(),
                    parent: None,
                }],
                nodes: Vec::new(),
                scopes: Vec::new(),
                holds: Vec::new(),
                init_temporaries: Vec::new(),
                grad_leaves: Vec::new(),
                inputs: Vec::new(),
                outputs: Vec::new(),
                task: Task::Classification { num_classes: 0 },
                layer_table: None,
            },
            stack: vec![ModuleId(0)],
            frames: vec![Vec::new()],
            module_index: std::collections::HashMap::from([(String::new(), ModuleId(0))]),
            param_index: std::collections::HashMap::new(),
            error: None,
        }
    }

    /// Adds a model input (the batch).
    pub fn input(&mut self, shape: Shape, dtype: DType) -> TensorId {
        if self.error.is_none() {
            if let Err(e) = check_size("input", &shape) {
                self.error = Some(BuildError {
                    module: String::new(),
                    shape: e,
                });
            }
        }
        let t = self.new_tensor(shape, dtype, None);
        self.graph.inputs.push(t);
        t
    }

    /// The shape of a tensor.
    pub fn shape(&self, t: TensorId) -> &[u64] {
        &self.graph.tensor(t).shape
    }

    fn new_tensor(&mut self, shape: Shape, dtype: DType, producer: Option<NodeId>) -> TensorId {
        self.graph.tensors.push(TensorDef {
            shape,
            dtype,
            producer,
            param: None,
        });
        TensorId(self.graph.tensors.len() as u32 - 1)
    }

    fn current(&self) -> ModuleId {
        // the root module is pushed first and never popped
        self.stack.last().copied().unwrap_or(ModuleId(0))
    }

    fn child_path(&self, name: &str) -> String {
        let parent = &self.graph.modules[self.current().0 as usize].path;
        if parent.is_empty() {
            name.to_string()
        } else {
            format!("{parent}.{name}")
        }
    }

    /// Finds or registers the child module `name` of the current module.
    fn child(&mut self, name: &str, type_name: &str) -> (ModuleId, bool) {
        let path = self.child_path(name);
        if let Some(&id) = self.module_index.get(&path) {
            return (id, false);
        }
        let id = ModuleId(self.graph.modules.len() as u32);
        self.module_index.insert(path.clone(), id);
        self.graph.modules.push(ModuleDef {
            path,
            type_name: type_name.to_string(),
            parent: Some(self.current()),
        });
        (id, true)
    }

    /// Calls child module `name` (class `type_name`) with `inputs`: everything `f` records belongs
    /// to it, and the inputs stay referenced until it returns.
    pub fn module<R>(
        &mut self,
        name: &str,
        type_name: &str,
        inputs: &[TensorId],
        f: impl FnOnce(&mut Self) -> R,
    ) -> R {
        let (id, _) = self.child(name, type_name);
        self.stack.push(id);
        let first = self.graph.nodes.len() as u32;
        let r = self.frame(f);
        self.stack.pop();
        let end = self.graph.nodes.len() as u32;
        self.graph.scopes.push(Scope {
            module: id,
            first,
            end,
            inputs: inputs.to_vec(),
        });
        r
    }

    /// A plain Python function call inside the current module (DenseNet's `bn_function`): locals
    /// [`hold`](Self::hold) inside it are released when it returns.
    pub fn frame<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        self.frames.push(Vec::new());
        let r = f(self);
        let held = self.frames.pop().unwrap_or_default();
        let end = self.graph.nodes.len() as u32;
        self.graph.holds.extend(held.into_iter().map(|t| (t, end)));
        r
    }

    /// Keeps `tensors` referenced until the innermost frame (module call or [`frame`](Self::frame))
    /// returns, as a Python local variable does after its last use (`concated_features`).
    pub fn hold(&mut self, tensors: &[TensorId]) {
        if let Some(top) = self.frames.last_mut() {
            top.extend_from_slice(tensors);
        }
    }

    /// Keeps `tensors` referenced until the node recorded last (a Python variable rebound, or an
    /// object dropped, right there: the old `next_token_logits` once the new one exists).
    pub fn keep_until_now(&mut self, tensors: &[TensorId]) {
        let end = self.graph.nodes.len() as u32;
        self.graph.holds.extend(tensors.iter().map(|&t| (t, end)));
    }

    /// Starts the layer table here: earlier nodes (a generation's own bookkeeping) are simulated
    /// but not listed.
    pub fn begin_layer_table(&mut self) {
        let n = self.graph.nodes.len() as u32;
        self.graph.layer_table = Some(n..u32::MAX);
    }

    /// Ends the layer table here: later nodes (a generation's decode steps, which call the same
    /// modules again) are simulated but not listed.
    pub fn end_layer_table(&mut self) {
        let n = self.graph.nodes.len() as u32;
        let start = self.graph.layer_table.as_ref().map_or(0, |r| r.start);
        self.graph.layer_table = Some(start..n);
    }

    /// Number of nodes recorded so far.
    pub fn node_count(&self) -> usize {
        self.graph.nodes.len()
    }

    /// Registers child module `name` and, inside `f`, its own children and parameters, without
    /// calling it: fixes the order `__init__` creates parameters in when a model calls its modules
    /// in another order (OPT creates `k_proj` before `q_proj`, the final LayerNorm before the layers).
    pub fn declare<R>(&mut self, name: &str, type_name: &str, f: impl FnOnce(&mut Self) -> R) -> R {
        let (id, _) = self.child(name, type_name);
        self.stack.push(id);
        let r = f(self);
        self.stack.pop();
        r
    }

    /// Registers the leaf module `name` with the parameters of `op`, without calling it.
    pub fn declare_layer(&mut self, name: &str, op: &dyn Op) {
        let (id, _) = self.child(name, op.kind());
        for spec in op.param_specs() {
            let kind = if spec.is_buffer {
                ParamKind::Buffer
            } else {
                ParamKind::Parameter
            };
            self.register_param(
                id,
                spec.name,
                spec.shape,
                kind,
                spec.fixed_dtype.unwrap_or(DType::F32),
            );
        }
    }

    /// Weight tying as `post_init()` does it after `__init__` built an untied head: `temps` (the
    /// head's own weight, ...) are allocated after every parameter registered so far; the first
    /// `free_now` are freed; then `replaced` (a parameter whose tensor `post_init` swaps for a
    /// padded copy, e.g. an output bias) is allocated anew; then the rest of `temps` are freed.
    /// Call it once every parameter is registered.
    pub fn tie_at_init(&mut self, temps: &[Shape], free_now: usize, replaced: Option<TensorId>) {
        let n = self.graph.params.len() as u32;
        let moved = replaced.and_then(|t| self.graph.tensors[t.0 as usize].param);
        let base = match moved {
            Some(p) => {
                let r = self.graph.params[p.0 as usize].init_rank;
                for q in &mut self.graph.params {
                    if q.init_rank > r {
                        q.init_rank -= 1;
                    }
                }
                self.graph.params[p.0 as usize].init_rank = n - 1;
                n - 1
            }
            None => n,
        };
        let module = self.current();
        for (i, shape) in temps.iter().enumerate() {
            self.graph.init_temporaries.push(InitTemporary {
                shape: shape.clone(),
                dtype: None,
                alloc_at: base,
                free_at: if i < free_now { base } else { n },
                module,
            });
        }
    }

    /// A weight `__init__` allocates now (after every parameter registered so far) that weight
    /// tying in `post_init()` replaces once the model is built (T5's per-stack `embed_tokens`
    /// weights, tied to `shared`): freed after the last parameter, in call order, after the
    /// allocations of [`tie_at_init`](Self::tie_at_init).
    pub fn untied_at_init(&mut self, shape: Shape) {
        let module = self.current();
        self.graph.init_temporaries.push(InitTemporary {
            shape,
            dtype: None,
            alloc_at: self.graph.params.len() as u32,
            free_at: UNTIL_BUILT,
            module,
        });
    }

    /// Registers a module that holds parameters but is only used functionally (never "called").
    pub fn declare_module(&mut self, name: &str, type_name: &str) -> ModuleId {
        self.child(name, type_name).0
    }

    /// Marks the parameters of child module `child` of the current module as created before the
    /// current module's other parameters (PyTorch allocates in `__init__` order: ResNet's
    /// `_make_layer` builds `downsample` before the block that registers it last).
    pub fn init_first(&mut self, child: &str) {
        let here = self.graph.modules[self.current().0 as usize].path.clone();
        let child_path = self.child_path(child);
        let under = |p: &str, m: &str| p == m || (m.is_empty() || p.starts_with(&format!("{m}.")));
        let mut members: Vec<usize> = (0..self.graph.params.len())
            .filter(|&i| {
                under(
                    &self.graph.modules[self.graph.params[i].module.0 as usize].path,
                    &here,
                )
            })
            .collect();
        members.sort_by_key(|&i| self.graph.params[i].init_rank);
        let ranks: Vec<u32> = members
            .iter()
            .map(|&i| self.graph.params[i].init_rank)
            .collect();
        let (first, rest): (Vec<usize>, Vec<usize>) = members.into_iter().partition(|&i| {
            under(
                &self.graph.modules[self.graph.params[i].module.0 as usize].path,
                &child_path,
            )
        });
        for (i, r) in first.into_iter().chain(rest).zip(ranks) {
            self.graph.params[i].init_rank = r;
        }
    }

    /// Registers a parameter of the current module (e.g. ViT's `class_token`) and returns a tensor
    /// that stands for it in ops.
    pub fn parameter(&mut self, name: &str, shape: Shape) -> TensorId {
        let module = self.current();
        let pid = self.register_param(
            module,
            name,
            shape.clone(),
            ParamKind::Parameter,
            DType::F32,
        );
        let t = self.new_tensor(shape, DType::F32, None);
        self.graph.tensors[t.0 as usize].param = Some(pid);
        t
    }

    /// Registers a buffer of the current module (`position_ids`, `token_type_ids`) of a fixed
    /// dtype (`None` follows the model's dtype) and returns a tensor that stands for it in ops.
    pub fn buffer(&mut self, name: &str, shape: Shape, dtype: Option<DType>) -> TensorId {
        let module = self.current();
        let d = dtype.unwrap_or(DType::F32);
        let pid = self.register_param(module, name, shape.clone(), ParamKind::Buffer, d);
        let t = self.new_tensor(shape, d, None);
        self.graph.tensors[t.0 as usize].param = Some(pid);
        t
    }

    fn register_param(
        &mut self,
        module: ModuleId,
        name: &str,
        shape: Shape,
        kind: ParamKind,
        dtype: DType,
    ) -> ParamId {
        let mpath = &self.graph.modules[module.0 as usize].path;
        let full = if mpath.is_empty() {
            name.to_string()
        } else {
            format!("{mpath}.{name}")
        };
        if let Some(&i) = self.param_index.get(&full) {
            return i;
        }
        self.param_index
            .insert(full.clone(), ParamId(self.graph.params.len() as u32));
        let init_rank = self.graph.params.len() as u32;
        self.graph.params.push(ParamDef {
            name: full,
            shape,
            dtype,
            stored_dtype: None,
            kind,
            trainable: true,
            module,
            init_rank,
        });
        ParamId(self.graph.params.len() as u32 - 1)
    }

    /// Calls a leaf module `name` whose whole forward is `op` (an `nn.Conv2d`, `nn.ReLU`, ...):
    /// registers the op's parameters under the module's path and records the op.
    pub fn layer(&mut self, name: &str, op: impl Op + 'static, inputs: &[TensorId]) -> TensorId {
        self.layer_multi(name, op, inputs)[0]
    }

    /// [`layer`](Self::layer) for a leaf module whose op has several outputs (a rotary
    /// embedding's `cos` and `sin`).
    pub fn layer_multi(
        &mut self,
        name: &str,
        op: impl Op + 'static,
        inputs: &[TensorId],
    ) -> Vec<TensorId> {
        let op: Arc<dyn Op> = Arc::new(op);
        let (id, _) = self.child(name, op.kind());
        let mut params = Vec::new();
        for spec in op.param_specs() {
            let kind = if spec.is_buffer {
                ParamKind::Buffer
            } else {
                ParamKind::Parameter
            };
            params.push(self.register_param(
                id,
                spec.name,
                spec.shape,
                kind,
                spec.fixed_dtype.unwrap_or(DType::F32),
            ));
        }
        self.stack.push(id);
        let first = self.graph.nodes.len() as u32;
        let out = self.push(op, inputs, params);
        self.stack.pop();
        self.graph.scopes.push(Scope {
            module: id,
            first,
            end: first + 1,
            inputs: inputs.to_vec(),
        });
        out
    }

    /// Records a functional op (no parameters of its own) in the current module.
    pub fn op(&mut self, op: impl Op + 'static, inputs: &[TensorId]) -> TensorId {
        self.push(Arc::new(op), inputs, Vec::new())[0]
    }

    /// Records a functional op with several outputs (`chunk`).
    pub fn op_multi(&mut self, op: impl Op + 'static, inputs: &[TensorId]) -> Vec<TensorId> {
        self.push(Arc::new(op), inputs, Vec::new())
    }

    fn push(
        &mut self,
        op: Arc<dyn Op>,
        inputs: &[TensorId],
        params: Vec<ParamId>,
    ) -> Vec<TensorId> {
        let shapes: Vec<&[u64]> = inputs
            .iter()
            .map(|&t| self.graph.tensor(t).shape.as_slice())
            .collect();
        let out_shapes = if self.error.is_some() {
            // after the first error keep going with placeholder shapes; finish() reports the error
            vec![shapes.first().map(|s| s.to_vec()).unwrap_or_default()]
        } else {
            match op.output_shapes(&shapes) {
                Ok(s) => s,
                Err(e) => {
                    let module = self.graph.modules[self.current().0 as usize].path.clone();
                    self.error = Some(BuildError { module, shape: e });
                    vec![shapes.first().map(|s| s.to_vec()).unwrap_or_default()]
                }
            }
        };
        if self.error.is_none() {
            if let Some(e) = out_shapes
                .iter()
                .find_map(|s| check_size(op.kind(), s).err())
            {
                let module = self.graph.modules[self.current().0 as usize].path.clone();
                self.error = Some(BuildError { module, shape: e });
            }
        }
        let dtypes: Vec<DType> = inputs.iter().map(|&t| self.graph.tensor(t).dtype).collect();
        let out_dtypes = op.output_dtypes(&dtypes, out_shapes.len());
        let node = NodeId(self.graph.nodes.len() as u32);
        let outputs: Vec<TensorId> = out_shapes
            .into_iter()
            .zip(out_dtypes)
            .map(|(s, d)| self.new_tensor(s, d, Some(node)))
            .collect();
        self.graph.nodes.push(Node {
            op,
            module: self.current(),
            inputs: inputs.to_vec(),
            params,
            outputs: outputs.clone(),
        });
        outputs
    }

    /// Finishes the graph with its outputs and task, or reports the first shape error.
    pub fn finish(mut self, outputs: &[TensorId], task: Task) -> Result<Graph, BuildError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let end = self.graph.nodes.len() as u32;
        for f in std::mem::take(&mut self.frames) {
            self.graph.holds.extend(f.into_iter().map(|t| (t, end)));
        }
        let built = self.graph.params.len() as u32;
        for t in &mut self.graph.init_temporaries {
            if t.free_at == UNTIL_BUILT {
                t.free_at = built;
            }
        }
        self.graph.outputs = outputs.to_vec();
        self.graph.task = task;
        Ok(self.graph)
    }
}

/// `free_at` of an [`untied_at_init`](GraphBuilder::untied_at_init) temporary until
/// [`finish`](GraphBuilder::finish) knows the parameter count.
const UNTIL_BUILT: u32 = u32::MAX;

/// The largest tensor the simulator accepts (2^48 bytes = 256 TiB at 8 bytes an element), so that
/// sums of sizes cannot overflow.
const MAX_ELEMENTS: u64 = 1 << 45;

/// Rejects shapes whose element count overflows or exceeds any real device.
fn check_size(op: &'static str, shape: &[u64]) -> Result<(), ShapeError> {
    let n = shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
    match n {
        Some(n) if n <= MAX_ELEMENTS => Ok(()),
        _ => Err(ShapeError::new(
            op,
            format!("a tensor of shape {shape:?} has more than 2^45 elements; check the batch size and input size"),
        )),
    }
}
