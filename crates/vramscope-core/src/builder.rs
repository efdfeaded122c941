//! Records a forward program into a [`Graph`], the way PyTorch eager would run it: module calls
//! open scopes (so parameters get their `named_parameters()` names), ops append nodes in order and
//! check shapes as they go.

use std::sync::Arc;

use smallvec::SmallVec;

use crate::fasthash::{path_hash, IntMap};

use crate::dtype::DType;
use crate::ir::{
    Dims, Graph, InitTemporary, ModuleDef, ModuleId, Node, NodeId, ParamDef, ParamId, ParamKind,
    Scope, Shape, Task, TensorDef, TensorId, TensorList,
};
use crate::ops::{Op, ShapeError};

/// One step of a construction program ([`GraphBuilder::init_program`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitStep {
    /// A temporary of this dtype is allocated.
    Alloc(DType),
    /// The temporary allocated by step `i` is freed.
    Free(usize),
    /// The next buffer is allocated (a parameter of the graph).
    Buffer,
}

/// What `GraphBuilder::shape` answers after a shape error: more dimensions than any op reads,
/// none of them zero (also the number of outputs a node gets after the error).
const PLACEHOLDER_SHAPE: [u64; 8] = [1; 8];

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
    module_index: PathIndex,
    param_index: PathIndex,
    error: Option<BuildError>,
    /// [`init_first`](Self::init_first) calls so far (a recorded module call must make none)
    init_first_calls: u32,
}

/// Module or parameter indices by the hash of their dotted path. The paths themselves live in the
/// graph (`ModuleDef::path`, `ParamDef::name`), so a large model's build does not copy every one
/// into the index; a lookup compares the candidates' paths (distinct paths rarely share a hash).
#[derive(Debug, Default)]
struct PathIndex(IntMap<u64, SmallVec<[u32; 1]>>);

impl PathIndex {
    /// The index whose path (`path_of(index)`) is `path`.
    fn get<'a>(&self, path: &str, path_of: impl Fn(u32) -> &'a str) -> Option<u32> {
        let ids = self.0.get(&path_hash(path))?;
        ids.iter().copied().find(|&i| path_of(i) == path)
    }

    /// Removes `id` from under `path`.
    fn remove(&mut self, path: &str, id: u32) {
        if let Some(ids) = self.0.get_mut(&path_hash(path)) {
            ids.retain(|i| *i != id);
        }
    }

    /// An index holding the root module (`""`, index 0).
    fn of_root() -> Self {
        let mut index = Self::default();
        index.insert("", 0);
        index
    }

    /// Adds `id` under `path` (not in the index yet).
    fn insert(&mut self, path: &str, id: u32) {
        self.0.entry(path_hash(path)).or_default().push(id);
    }
}

/// A run of identical module calls (a transformer's decoder layers), for
/// [`GraphBuilder::module_repeated`]: what the first call recorded.
#[derive(Debug, Default)]
pub struct RepeatedModule {
    recording: Option<Recording>,
    /// how many calls the run makes, if known: the graph's lists are sized for the copies once
    /// the first call is recorded (instead of growing copy by copy)
    calls: Option<u32>,
}

impl RepeatedModule {
    /// A run of `calls` calls (a model's layer count).
    pub fn with_calls(calls: u32) -> Self {
        RepeatedModule {
            recording: None,
            calls: Some(calls),
        }
    }
}

/// What one module call added to the graph, each a contiguous range of ids: the module itself
/// is the first module, its scope the last scope.
#[derive(Debug, Clone)]
struct Recording {
    inputs: Vec<TensorId>,
    output: TensorId,
    type_name: Arc<str>,
    modules: std::ops::Range<u32>,
    params: std::ops::Range<u32>,
    tensors: std::ops::Range<u32>,
    nodes: std::ops::Range<u32>,
    scopes: std::ops::Range<u32>,
    holds: std::ops::Range<u32>,
}

/// Where the parameter, tensor and node lists ended at [`GraphBuilder::param_mark`]: the start
/// of what [`GraphBuilder::order_params`] renumbers.
#[derive(Debug, Clone, Copy)]
pub struct ParamMark {
    params: u32,
    tensors: u32,
    nodes: u32,
}

/// Sizes of the graph's lists, to see what a call added.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Marks {
    modules: u32,
    params: u32,
    tensors: u32,
    nodes: u32,
    scopes: u32,
    holds: u32,
    inputs: u32,
    init_temporaries: u32,
    init_first_calls: u32,
    grad_leaves: u32,
    layer_table: Option<std::ops::Range<u32>>,
}

thread_local! {
    static REPLAY_DISABLED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with [`GraphBuilder::module_repeated`] calling its closure every time instead of
/// replaying the first call (tests compare the two graphs).
pub fn without_module_replay<R>(f: impl FnOnce() -> R) -> R {
    let before = REPLAY_DISABLED.with(|d| d.replace(true));
    let r = f();
    REPLAY_DISABLED.with(|d| d.set(before));
    r
}

/// The place of a module's own buffers in [`GraphBuilder::order_params`]'s `children`.
pub const BUFFERS: &str = "(buffers)";

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
                    type_name: root_type.into(),
                    parent: None,
                }],
                nodes: Vec::new(),
                scopes: Vec::new(),
                holds: Vec::new(),
                dropped_graphs: Vec::new(),
                init_temporaries: Vec::new(),
                grad_leaves: Vec::new(),
                inputs: Vec::new(),
                outputs: Vec::new(),
                task: Task::Classification { num_classes: 0 },
                layer_table: None,
            },
            stack: vec![ModuleId(0)],
            frames: vec![Vec::new()],
            module_index: PathIndex::of_root(),
            param_index: PathIndex::default(),
            error: None,
            init_first_calls: 0,
        }
    }

    /// Adds a model input (the batch).
    pub fn input(&mut self, shape: Shape, dtype: DType) -> TensorId {
        if self.error.is_none() {
            if let Err(e) = check_size("input", &shape, ACTIVATION_HINT) {
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

    /// The first shape error so far, which `finish()` will report (a front-end that checks the
    /// finished model's outputs itself asks first: after an error shapes are placeholders).
    pub fn first_error(&self) -> Option<&BuildError> {
        self.error.as_ref()
    }

    /// The shape of a tensor. Once a shape rule has failed, every shape is a placeholder of
    /// ones (`PLACEHOLDER_SHAPE`): front-ends read dimensions by index and divide by them while
    /// they finish the model, and `finish()` reports the first error instead of the graph.
    pub fn shape(&self, t: TensorId) -> &[u64] {
        if self.error.is_some() {
            return &PLACEHOLDER_SHAPE;
        }
        &self.graph.tensor(t).shape
    }

    fn new_tensor(&mut self, shape: Shape, dtype: DType, producer: Option<NodeId>) -> TensorId {
        self.graph.tensors.push(TensorDef {
            shape: shape.into(),
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

    /// The full name of `name` under the current module (`model.rotary_emb.inv_freq`).
    pub fn child_path(&self, name: &str) -> String {
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
        let modules = &self.graph.modules;
        if let Some(id) = self.module_index.get(&path, |i| &modules[i as usize].path) {
            return (ModuleId(id), false);
        }
        let id = ModuleId(self.graph.modules.len() as u32);
        self.module_index.insert(&path, id.0);
        self.graph.modules.push(ModuleDef {
            path,
            type_name: type_name.into(),
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
            inputs: inputs.into(),
        });
        r
    }

    /// [`module`](Self::module) for one of a run of calls that record the same program (a
    /// transformer's identical decoder layers, `f` a function of `inputs` and of tensors shared
    /// by every call): the first call runs `f` and is recorded in `repeated`; later calls copy the
    /// recording (child modules and parameters renamed under the new path, nodes sharing the
    /// first call's ops) instead of running `f` again, which gives the same graph in a fraction of
    /// the time. A call the recording cannot stand for (inputs given twice, paths that exist
    /// already) runs `f`.
    pub fn module_repeated(
        &mut self,
        repeated: &mut RepeatedModule,
        name: &str,
        type_name: &str,
        inputs: &[TensorId],
        f: impl FnOnce(&mut Self) -> TensorId,
    ) -> TensorId {
        let replay = !REPLAY_DISABLED.with(|d| d.get()) && self.error.is_none();
        if let (true, Some(rec)) = (replay, &repeated.recording) {
            if let Some(out) = self.replay(rec, name, type_name, inputs) {
                return out;
            }
        }
        let before = self.marks();
        let modules = &self.graph.modules;
        let is_new = self
            .module_index
            .get(&self.child_path(name), |i| &modules[i as usize].path)
            .is_none();
        let out = self.module(name, type_name, inputs, f);
        if repeated.recording.is_none() && is_new && self.error.is_none() {
            repeated.recording = self.recording(before, inputs, out);
            if let (Some(rec), Some(calls)) = (&repeated.recording, repeated.calls) {
                let copies = calls.saturating_sub(1) as usize;
                // plus room for what follows the layers (a final norm, the head, the loss), so
                // that the lists are not copied to grow by a few entries
                const TAIL: usize = 256;
                let g = &mut self.graph;
                g.modules.reserve(copies * rec.modules.len() + TAIL);
                g.params.reserve(copies * rec.params.len() + TAIL);
                g.tensors.reserve(copies * rec.tensors.len() + TAIL);
                g.nodes.reserve(copies * rec.nodes.len() + TAIL);
                g.scopes.reserve(copies * rec.scopes.len() + TAIL);
                g.holds.reserve(copies * rec.holds.len() + TAIL);
                self.module_index.0.reserve(copies * rec.modules.len());
                self.param_index.0.reserve(copies * rec.params.len());
            }
        }
        out
    }

    fn marks(&self) -> Marks {
        let g = &self.graph;
        Marks {
            modules: g.modules.len() as u32,
            params: g.params.len() as u32,
            tensors: g.tensors.len() as u32,
            nodes: g.nodes.len() as u32,
            scopes: g.scopes.len() as u32,
            holds: g.holds.len() as u32,
            inputs: g.inputs.len() as u32,
            init_temporaries: g.init_temporaries.len() as u32,
            init_first_calls: self.init_first_calls,
            grad_leaves: g.grad_leaves.len() as u32,
            layer_table: g.layer_table.clone(),
        }
    }

    /// The recording of the module call made since `before`, if a copy of it renamed is what
    /// another call would record: everything it made lies inside its own ranges, and it did
    /// nothing that reaches outside the call (graph inputs, construction temporaries, init
    /// order changes).
    fn recording(&self, before: Marks, inputs: &[TensorId], output: TensorId) -> Option<Recording> {
        let after = self.marks();
        let g = &self.graph;
        if (
            after.inputs,
            after.init_temporaries,
            after.init_first_calls,
            after.grad_leaves,
            &after.layer_table,
        ) != (
            before.inputs,
            before.init_temporaries,
            before.init_first_calls,
            before.grad_leaves,
            &before.layer_table,
        ) || after.modules == before.modules
            || after.scopes == before.scopes
        {
            return None;
        }
        let rec = Recording {
            inputs: inputs.to_vec(),
            output,
            type_name: g.modules[before.modules as usize].type_name.clone(),
            modules: before.modules..after.modules,
            params: before.params..after.params,
            tensors: before.tensors..after.tensors,
            nodes: before.nodes..after.nodes,
            scopes: before.scopes..after.scopes,
            holds: before.holds..after.holds,
        };
        let root = ModuleId(rec.modules.start);
        let own = &g.scopes[after.scopes as usize - 1];
        let params_ok = rec.params.clone().all(|p| {
            let d = &g.params[p as usize];
            d.init_rank == p && rec.modules.contains(&d.module.0)
        });
        let tensors_ok = rec.tensors.clone().all(|t| {
            let d = &g.tensors[t as usize];
            d.param.is_none_or(|p| rec.params.contains(&p.0))
                && d.producer.is_none_or(|n| rec.nodes.contains(&n.0))
        });
        let modules_ok = rec.modules.clone().skip(1).all(|m| {
            g.modules[m as usize]
                .parent
                .is_some_and(|p| rec.modules.contains(&p.0))
        });
        let ok = own.module == root
            && (own.first, own.end) == (rec.nodes.start, rec.nodes.end)
            && params_ok
            && tensors_ok
            && modules_ok
            && !rec.inputs.iter().any(|t| rec.tensors.contains(&t.0));
        ok.then_some(rec)
    }

    /// Copies `rec` as a call of child module `name` with `inputs`; `None` (nothing added) when
    /// the copy would not be what the call records.
    fn replay(
        &mut self,
        rec: &Recording,
        name: &str,
        type_name: &str,
        inputs: &[TensorId],
    ) -> Option<TensorId> {
        let distinct = |ts: &[TensorId]| ts.iter().enumerate().all(|(i, t)| !ts[..i].contains(t));
        if inputs.len() != rec.inputs.len()
            || !distinct(inputs)
            || !distinct(&rec.inputs)
            || type_name != &*rec.type_name
        {
            return None;
        }
        let g = &self.graph;
        let new_root = self.child_path(name);
        let old_root = &g.modules[rec.modules.start as usize].path;
        let rename = |old_module: &str, rest: &str| {
            let mut p = String::with_capacity(
                new_root.len() + old_module.len() - old_root.len() + rest.len(),
            );
            p.push_str(&new_root);
            p.push_str(&old_module[old_root.len()..]);
            p.push_str(rest);
            p
        };
        let module_paths: Vec<String> = rec
            .modules
            .clone()
            .map(|m| rename(&g.modules[m as usize].path, ""))
            .collect();
        let param_names: Vec<String> = rec
            .params
            .clone()
            .map(|p| {
                let d = &g.params[p as usize];
                let mpath = &g.modules[d.module.0 as usize].path;
                rename(mpath, &d.name[mpath.len()..])
            })
            .collect();
        let module_path = |i: u32| g.modules[i as usize].path.as_str();
        let param_name = |i: u32| g.params[i as usize].name.as_str();
        if module_paths
            .iter()
            .any(|p| self.module_index.get(p, module_path).is_some())
            || param_names
                .iter()
                .any(|p| self.param_index.get(p, param_name).is_some())
        {
            return None;
        }
        let dm = self.graph.modules.len() as u32 - rec.modules.start;
        let dp = self.graph.params.len() as u32 - rec.params.start;
        let dt = self.graph.tensors.len() as u32 - rec.tensors.start;
        let dn = self.graph.nodes.len() as u32 - rec.nodes.start;
        let module = |m: ModuleId| {
            if rec.modules.contains(&m.0) {
                ModuleId(m.0 + dm)
            } else {
                m
            }
        };
        let param = |p: ParamId| {
            if rec.params.contains(&p.0) {
                ParamId(p.0 + dp)
            } else {
                p
            }
        };
        let tensor = |t: TensorId| {
            if rec.tensors.contains(&t.0) {
                TensorId(t.0 + dt)
            } else if let Some(k) = rec.inputs.iter().position(|&i| i == t) {
                inputs[k]
            } else {
                t
            }
        };
        let parent = self.current();
        for (m, path) in rec.modules.clone().zip(module_paths) {
            let d = &self.graph.modules[m as usize];
            let def = ModuleDef {
                path,
                type_name: d.type_name.clone(),
                parent: if m == rec.modules.start {
                    Some(parent)
                } else {
                    d.parent.map(module)
                },
            };
            self.module_index
                .insert(&def.path, self.graph.modules.len() as u32);
            self.graph.modules.push(def);
        }
        for (p, name) in rec.params.clone().zip(param_names) {
            let d = &self.graph.params[p as usize];
            let id = self.graph.params.len() as u32;
            let def = ParamDef {
                name,
                shape: Dims::from_slice(&d.shape),
                dtype: d.dtype,
                stored_dtype: d.stored_dtype,
                kind: d.kind,
                trainable: d.trainable,
                module: module(d.module),
                init_rank: id,
            };
            self.param_index.insert(&def.name, id);
            self.graph.params.push(def);
        }
        for t in rec.tensors.clone() {
            let d = &self.graph.tensors[t as usize];
            let def = TensorDef {
                shape: Dims::from_slice(&d.shape),
                dtype: d.dtype,
                producer: d.producer.map(|n| NodeId(n.0 + dn)),
                param: d.param.map(param),
            };
            self.graph.tensors.push(def);
        }
        for n in rec.nodes.clone() {
            let d = &self.graph.nodes[n as usize];
            let node = Node {
                op: d.op.clone(),
                module: module(d.module),
                inputs: remap(&d.inputs, tensor),
                params: remap(&d.params, param),
                outputs: remap(&d.outputs, tensor),
            };
            self.graph.nodes.push(node);
        }
        for sc in rec.scopes.clone() {
            let d = &self.graph.scopes[sc as usize];
            let scope = Scope {
                module: module(d.module),
                first: d.first + dn,
                end: d.end + dn,
                inputs: remap(&d.inputs, tensor),
            };
            self.graph.scopes.push(scope);
        }
        for h in rec.holds.clone() {
            let (t, end) = self.graph.holds[h as usize];
            self.graph.holds.push((tensor(t), end + dn));
        }
        Some(tensor(rec.output))
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

    /// Drops the autograd graph the nodes recorded since `first` (a node count) made right after
    /// the forward releases `after`: their saved tensors go, last node first, as when Python
    /// drops the object that referenced the graph's result and no loss reads it (see
    /// [`crate::ir::DroppedGraph`]).
    pub fn drop_graph_since(&mut self, first: usize, after: TensorId) {
        let end = self.graph.nodes.len() as u32;
        self.graph.dropped_graphs.push(crate::ir::DroppedGraph {
            nodes: first as u32..end,
            after,
        });
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

    /// Moves the construction of child module `child`'s parameters and buffers (of the current
    /// module, registered since `mark`) after every other one registered since `mark`, keeping
    /// their order and every parameter's place in `parameters()`: a module a forward calls first
    /// but `__init__` makes last (a decoder's rotary module, after the final norm). Construction
    /// temporaries stay right after the parameter they followed.
    pub fn construct_last(&mut self, mark: ParamMark, child: &str) {
        let start = mark.params as usize;
        let prefix = format!("{}.", self.child_path(child));
        let params = &mut self.graph.params[start..];
        let mut by_rank: Vec<usize> = (0..params.len()).collect();
        by_rank.sort_by_key(|&i| params[i].init_rank);
        let ranks: Vec<u32> = by_rank.iter().map(|&i| params[i].init_rank).collect();
        let (moved, kept): (Vec<usize>, Vec<usize>) = by_rank
            .iter()
            .partition(|&&i| params[i].name.starts_with(&prefix));
        if moved.is_empty() {
            return;
        }
        let mut new_rank = std::collections::HashMap::with_capacity(ranks.len());
        for (&i, &r) in kept.iter().chain(&moved).zip(&ranks) {
            new_rank.insert(params[i].init_rank, r);
            params[i].init_rank = r;
        }
        self.follow_moved_ranks(&new_rank);
    }

    /// Keeps each construction temporary right after the parameter it followed, once
    /// construction ranks have moved (`new_rank`: old rank to new).
    fn follow_moved_ranks(&mut self, new_rank: &std::collections::HashMap<u32, u32>) {
        for t in &mut self.graph.init_temporaries {
            for at in [&mut t.alloc_at, &mut t.free_at] {
                if let Some(&r) = at.checked_sub(1).and_then(|k| new_rank.get(&k)) {
                    *at = r + 1;
                }
            }
        }
    }

    /// How many parameters and buffers were registered since `mark`.
    pub fn params_since(&self, mark: &ParamMark) -> usize {
        self.graph.params.len() - mark.params as usize
    }

    /// Marks where the parameters registered from now on start (see
    /// [`order_params`](Self::order_params)).
    pub fn param_mark(&self) -> ParamMark {
        ParamMark {
            params: self.graph.params.len() as u32,
            tensors: self.graph.tensors.len() as u32,
            nodes: self.graph.nodes.len() as u32,
        }
    }

    /// Renumbers the parameters registered since `mark`, all of the current module or under it,
    /// into `__init__`'s order when the forward calls the children in another: the module's own
    /// parameters first (`named_parameters()` visits a module before its children), then child
    /// by child in `children` order, children not listed next, then the module's own buffers
    /// (which `__init__`s register after their children: BERT's embeddings' `position_ids`); the
    /// order within a child is kept.
    /// A [`BUFFERS`] entry in `children` puts the module's own buffers at that place instead
    /// (RoBERTa's embeddings register theirs before `position_embeddings`).
    /// A Llama decoder layer calls `input_layernorm` first, but its `__init__` creates
    /// `self_attn`, `mlp`, then the norms: `parameters()` (the optimizer's per-parameter state,
    /// `zero_grad`, the step) and the allocations at construction both follow `__init__`. The
    /// construction ranks the parameters held keep their set and take the new order, child by
    /// child, each child keeping its own construction order. Nothing changes when a parameter
    /// since `mark` lies outside the current module.
    pub fn order_params(&mut self, mark: ParamMark, children: &[&str]) {
        let start = mark.params as usize;
        let end = self.graph.params.len();
        if end < start + 2 {
            return;
        }
        let here = &self.graph.modules[self.current().0 as usize].path;
        let prefix = if here.is_empty() {
            String::new()
        } else {
            format!("{here}.")
        };
        let mut keys = Vec::with_capacity(end - start);
        for p in &self.graph.params[start..end] {
            let Some(rest) = p.name.strip_prefix(&prefix) else {
                return;
            };
            keys.push(match rest.split_once('.') {
                None if p.kind == ParamKind::Buffer => children
                    .iter()
                    .position(|c| *c == BUFFERS)
                    .map_or(usize::MAX, |i| 1 + i),
                None => 0,
                Some((child, _)) => {
                    1 + children
                        .iter()
                        .position(|c| *c == child)
                        .unwrap_or(children.len())
                }
            });
        }
        let mut order: Vec<usize> = (0..end - start).collect();
        order.sort_by_key(|&i| keys[i]);
        if order.iter().enumerate().all(|(new, &old)| new == old) {
            return;
        }
        let mut new_id = vec![0u32; end - start];
        for (new, &old) in order.iter().enumerate() {
            new_id[old] = (start + new) as u32;
        }
        // the construction ranks: the same set, child by child in the new order, each child's
        // own construction order kept (an inner `order_params` may have made it differ from the
        // list's: RoBERTa's embeddings build their buffers before `position_embeddings`)
        let mut ranks: Vec<u32> = self.graph.params[start..end]
            .iter()
            .map(|p| p.init_rank)
            .collect();
        let mut by_rank: Vec<usize> = (0..end - start).collect();
        by_rank.sort_by_key(|&i| (keys[i], ranks[i]));
        let mut new_rank = vec![0u32; end - start];
        ranks.sort_unstable();
        for (&i, &r) in by_rank.iter().zip(&ranks) {
            new_rank[i] = r;
        }
        let moved_rank: std::collections::HashMap<u32, u32> = (0..end - start)
            .map(|i| (self.graph.params[start + i].init_rank, new_rank[i]))
            .collect();
        self.follow_moved_ranks(&moved_rank);
        let old: Vec<ParamDef> = self.graph.params.drain(start..).collect();
        for (i, d) in old.iter().enumerate() {
            self.param_index.remove(&d.name, (start + i) as u32);
        }
        for (new, &o) in order.iter().enumerate() {
            let mut d = old[o].clone();
            d.init_rank = new_rank[o];
            self.param_index.insert(&d.name, (start + new) as u32);
            self.graph.params.push(d);
        }
        let remap = |p: ParamId| match (p.0 as usize).checked_sub(start) {
            Some(i) if i < new_id.len() => ParamId(new_id[i]),
            _ => p,
        };
        for t in &mut self.graph.tensors[mark.tensors as usize..] {
            t.param = t.param.map(remap);
        }
        for n in &mut self.graph.nodes[mark.nodes as usize..] {
            for p in n.params.iter_mut() {
                *p = remap(*p);
            }
        }
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
        self.tie_at_init_after(None, temps, free_now, replaced);
    }

    /// [`tie_at_init`](Self::tie_at_init) for a head that `__init__` creates before the rest of
    /// the model (XLM-RoBERTa's `lm_head` comes before `roberta`): `temps` are allocated right
    /// after the last parameter (in construction order) under module `head`, a path below the
    /// current module, and freed as there once every parameter is built.
    pub fn tie_at_init_in(
        &mut self,
        head: &str,
        temps: &[Shape],
        free_now: usize,
        replaced: Option<TensorId>,
    ) {
        self.tie_at_init_after(Some(head), temps, free_now, replaced);
    }

    /// Weight tying of a masked-LM head whose decoder `__init__` made with a weight and bias of
    /// its own (`weight` `[vocab, hidden]`) beside the head's zero `bias` (BERT's and RoBERTa's in
    /// transformers 5): `post_init()` frees the decoder's weight, pads the decoder's bias into a
    /// copy that replaces it, drops that copy when the decoder takes the head's `bias`, then pads
    /// `bias` into the tensor that stays (truth traces: `empty` weight, `empty` bias, `zeros`; free
    /// the weight, `constant_pad_nd`, free the bias, free the copy, `constant_pad_nd`, free the
    /// zeros). With `head`, the head was built before the encoder, as in
    /// [`tie_at_init_in`](Self::tie_at_init_in). Call it once every parameter is registered.
    pub fn tie_decoder_bias_at_init(&mut self, head: Option<&str>, weight: Shape, bias: TensorId) {
        let vocab = weight[0];
        self.tie_at_init_after(head, &[weight, vec![vocab], vec![vocab]], 2, Some(bias));
        let n = self.graph.params.len() as u32;
        let base = n.saturating_sub(1);
        let len = self.graph.init_temporaries.len();
        // what `post_init` makes at that point before it ties (the encoder's `position_ids`
        // refill, when the head came first) stays first
        let mut key = 0;
        for t in &mut self.graph.init_temporaries[..len - 3] {
            if t.order.is_none() && t.alloc_at == base && t.free_at == base {
                t.order = Some((key, key + 1));
                key += 2;
            }
        }
        let module = self.graph.init_temporaries[len - 1].module;
        let alloc_key = if self.graph.init_temporaries[len - 1].alloc_at == base {
            key
        } else {
            0
        };
        // the decoder's weight, its bias, the head's zeros
        for (i, free_key) in [key + 3, key + 5, 0].into_iter().enumerate() {
            let t = &mut self.graph.init_temporaries[len - 3 + i];
            t.order = Some((alloc_key + i as u32, free_key));
            t.freed_after_allocations = false;
        }
        // the padded copy of the decoder's bias
        self.graph.init_temporaries.push(InitTemporary {
            shape: vec![vocab],
            dtype: None,
            alloc_at: base,
            free_at: base,
            freed_after_allocations: false,
            allocated_after_frees: false,
            module,
            order: Some((key + 4, key + 6)),
        });
    }

    fn tie_at_init_after(
        &mut self,
        head: Option<&str>,
        temps: &[Shape],
        free_now: usize,
        replaced: Option<TensorId>,
    ) {
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
                // the construction temporaries after it stay after the parameters they followed
                for t in &mut self.graph.init_temporaries {
                    for at in [&mut t.alloc_at, &mut t.free_at] {
                        if *at > r && *at <= n {
                            *at -= 1;
                        }
                    }
                }
                n - 1
            }
            None => n,
        };
        let alloc_at = match head {
            Some(head) => {
                let path = self.child_path(head);
                let under = format!("{path}.");
                self.graph
                    .params
                    .iter()
                    .enumerate()
                    .filter(|&(i, q)| {
                        moved != Some(ParamId(i as u32)) && q.name.starts_with(&under)
                    })
                    .map(|(_, q)| q.init_rank + 1)
                    .max()
                    .unwrap_or(base)
            }
            None => base,
        };
        let module = self.current();
        for (i, shape) in temps.iter().enumerate() {
            self.graph.init_temporaries.push(InitTemporary {
                shape: shape.clone(),
                dtype: None,
                alloc_at,
                free_at: if i < free_now { base } else { n },
                // a head built first: its untied weights go after what the encoder's own
                // `post_init` makes at the same point
                freed_after_allocations: head.is_some() && i < free_now,
                allocated_after_frees: false,
                module,
                order: None,
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
            freed_after_allocations: false,
            allocated_after_frees: false,
            module,
            order: None,
        });
    }

    /// A tensor a submodule's `post_init()` allocates and frees while the model is built, after
    /// every parameter registered so far (BERT's `_init_weights` refills `position_ids` from a
    /// fresh `torch.arange`, in `BertModel.__init__`, before the head around it is created).
    pub fn temporary_at_init(&mut self, shape: Shape, dtype: DType) {
        let at = self.graph.params.len() as u32;
        let module = self.current();
        self.graph.init_temporaries.push(InitTemporary {
            shape,
            dtype: Some(dtype),
            alloc_at: at,
            free_at: at,
            freed_after_allocations: false,
            allocated_after_frees: false,
            module,
            order: None,
        });
    }

    /// Tensors a module's `__init__` (and its model's `post_init()`) computes step by step around
    /// the buffers it keeps (a rotary module's `inv_freq`): `steps` run in order from just before
    /// the buffer `first_buffer` (a full parameter name) is allocated, each [`InitStep::Buffer`]
    /// standing for the allocation of the next buffer in construction order; every temporary is
    /// `shape` of its dtype. Nothing is recorded when the buffer does not exist.
    pub fn init_program(&mut self, first_buffer: &str, shape: Shape, steps: &[InitStep]) {
        let params = &self.graph.params;
        let Some(first) = self
            .param_index
            .get(first_buffer, |i| &params[i as usize].name)
        else {
            return;
        };
        let d = &self.graph.params[first as usize];
        let (mut at, module) = (d.init_rank, d.module);
        let mut made: Vec<Option<usize>> = Vec::with_capacity(steps.len());
        for (key, step) in steps.iter().enumerate() {
            let key = key as u32;
            match *step {
                InitStep::Alloc(dtype) => {
                    made.push(Some(self.graph.init_temporaries.len()));
                    self.graph.init_temporaries.push(InitTemporary {
                        shape: shape.clone(),
                        dtype: Some(dtype),
                        alloc_at: at,
                        free_at: u32::MAX,
                        freed_after_allocations: false,
                        allocated_after_frees: false,
                        module,
                        order: Some((key, 0)),
                    });
                }
                InitStep::Free(j) => {
                    made.push(None);
                    if let Some(t) = made
                        .get(j)
                        .copied()
                        .flatten()
                        .and_then(|i| self.graph.init_temporaries.get_mut(i))
                    {
                        t.free_at = at;
                        t.order = t.order.map(|(alloc, _)| (alloc, key));
                    }
                }
                InitStep::Buffer => {
                    made.push(None);
                    at += 1;
                }
            }
        }
    }

    /// Registers a module that holds parameters but is only used functionally (never "called").
    pub fn declare_module(&mut self, name: &str, type_name: &str) -> ModuleId {
        self.child(name, type_name).0
    }

    /// Marks the parameters of child module `child` of the current module as created before the
    /// current module's other parameters (PyTorch allocates in `__init__` order: ResNet's
    /// `_make_layer` builds `downsample` before the block that registers it last).
    pub fn init_first(&mut self, child: &str) {
        self.init_first_calls += 1;
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

    /// A float buffer held in `dtype` whatever the step's precision (a rotary module's
    /// `inv_freq`, made float32 explicitly, stays float32 in a bfloat16 model).
    pub fn buffer_in(&mut self, name: &str, shape: Shape, dtype: DType) -> TensorId {
        let t = self.buffer(name, shape, Some(dtype));
        if let Some(p) = self.graph.tensors[t.0 as usize].param {
            self.graph.params[p.0 as usize].stored_dtype = Some(dtype);
        }
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
        let params = &self.graph.params;
        if let Some(i) = self.param_index.get(&full, |i| &params[i as usize].name) {
            return ParamId(i);
        }
        // a parameter's size comes from the model's dimensions (a config's `hidden_size`): past
        // 2^45 elements the sums of sizes could overflow, so the build stops with an error
        if self.error.is_none() {
            let what = match kind {
                ParamKind::Parameter => "parameter",
                ParamKind::Buffer => "buffer",
            };
            if let Err(mut e) = check_size(what, &shape, "check the model's dimensions") {
                e.message = format!("`{name}`: {}", e.message);
                self.error = Some(BuildError {
                    module: mpath.clone(),
                    shape: e,
                });
            }
        }
        self.param_index
            .insert(&full, self.graph.params.len() as u32);
        let init_rank = self.graph.params.len() as u32;
        self.graph.params.push(ParamDef {
            name: full,
            shape: shape.into(),
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
        let out = self.graph.nodes[out.0 as usize].outputs.to_vec();
        self.stack.pop();
        self.graph.scopes.push(Scope {
            module: id,
            first,
            end: first + 1,
            inputs: inputs.into(),
        });
        out
    }

    /// Records a functional op (no parameters of its own) in the current module.
    pub fn op(&mut self, op: impl Op + 'static, inputs: &[TensorId]) -> TensorId {
        let node = self.push(Arc::new(op), inputs, Vec::new());
        self.graph.nodes[node.0 as usize].outputs[0]
    }

    /// Records a functional op with several outputs (`chunk`).
    pub fn op_multi(&mut self, op: impl Op + 'static, inputs: &[TensorId]) -> Vec<TensorId> {
        let node = self.push(Arc::new(op), inputs, Vec::new());
        self.graph.nodes[node.0 as usize].outputs.to_vec()
    }

    /// Records a node after a shape error: `PLACEHOLDER_SHAPE.len()` outputs (front-ends index
    /// the outputs of `op_multi`), all of the placeholder shape and of the first input's dtype.
    fn push_placeholder(
        &mut self,
        op: Arc<dyn Op>,
        inputs: &[TensorId],
        params: Vec<ParamId>,
    ) -> NodeId {
        let dtype = inputs
            .first()
            .map_or(DType::F32, |&t| self.graph.tensor(t).dtype);
        let outputs =
            std::iter::repeat_n((PLACEHOLDER_SHAPE.to_vec(), dtype), PLACEHOLDER_SHAPE.len());
        self.record(op, inputs, params, outputs)
    }

    /// Appends a node in the current module with new output tensors of the given shapes and
    /// dtypes.
    fn record(
        &mut self,
        op: Arc<dyn Op>,
        inputs: &[TensorId],
        params: Vec<ParamId>,
        outputs: impl IntoIterator<Item = (Shape, DType)>,
    ) -> NodeId {
        let node = NodeId(self.graph.nodes.len() as u32);
        let outputs: TensorList = outputs
            .into_iter()
            .map(|(s, d)| self.new_tensor(s, d, Some(node)))
            .collect();
        self.graph.nodes.push(Node {
            op,
            module: self.current(),
            inputs: inputs.into(),
            params: params.into(),
            outputs,
        });
        node
    }

    /// Records a node (its output tensors are the node's `outputs`, at least one).
    fn push(&mut self, op: Arc<dyn Op>, inputs: &[TensorId], params: Vec<ParamId>) -> NodeId {
        let mut shapes_buf: [&[u64]; INLINE_INPUTS] = [&[]; INLINE_INPUTS];
        let shapes_vec: Vec<&[u64]>;
        let shapes: &[&[u64]] = if inputs.len() <= INLINE_INPUTS {
            for (s, &t) in shapes_buf.iter_mut().zip(inputs) {
                *s = &self.graph.tensor(t).shape;
            }
            &shapes_buf[..inputs.len()]
        } else {
            shapes_vec = inputs
                .iter()
                .map(|&t| self.graph.tensor(t).shape.as_slice())
                .collect();
            &shapes_vec
        };
        let out_shapes = if self.error.is_some() {
            // after the first error keep going with placeholder outputs; finish() reports the error
            return self.push_placeholder(op, inputs, params);
        } else {
            match op.output_shapes(shapes) {
                Ok(s) => s,
                Err(e) => {
                    let module = self.graph.modules[self.current().0 as usize].path.clone();
                    self.error = Some(BuildError { module, shape: e });
                    return self.push_placeholder(op, inputs, params);
                }
            }
        };
        if self.error.is_none() {
            if let Some(e) = out_shapes
                .iter()
                .find_map(|s| check_size(op.kind(), s, ACTIVATION_HINT).err())
            {
                let module = self.graph.modules[self.current().0 as usize].path.clone();
                self.error = Some(BuildError { module, shape: e });
            }
        }
        let out_dtypes = if inputs.len() <= INLINE_INPUTS {
            let mut dtypes = [DType::F32; INLINE_INPUTS];
            for (d, &t) in dtypes.iter_mut().zip(inputs) {
                *d = self.graph.tensor(t).dtype;
            }
            op.output_dtypes(&dtypes[..inputs.len()], out_shapes.len())
        } else {
            let dtypes: Vec<DType> = inputs.iter().map(|&t| self.graph.tensor(t).dtype).collect();
            op.output_dtypes(&dtypes, out_shapes.len())
        };
        self.record(op, inputs, params, out_shapes.into_iter().zip(out_dtypes))
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

/// Most ops take at most this many inputs: their shapes and dtypes are passed from the stack.
const INLINE_INPUTS: usize = 8;

/// The largest tensor the simulator accepts (2^48 bytes = 256 TiB at 8 bytes an element), so that
/// sums of sizes cannot overflow.
const MAX_ELEMENTS: u64 = 1 << 45;

/// What to check when an activation is too large.
const ACTIVATION_HINT: &str = "check the batch size and input size";

/// Rejects shapes whose element count overflows or exceeds any real device (`hint` says which
/// inputs decide the shape).
fn check_size(op: &'static str, shape: &[u64], hint: &str) -> Result<(), ShapeError> {
    let n = shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
    match n {
        Some(n) if n <= MAX_ELEMENTS => Ok(()),
        _ => Err(ShapeError::new(
            op,
            format!("a tensor of shape {shape:?} has more than 2^45 elements; {hint}"),
        )),
    }
}

/// `list` with `f` applied to each id. An inline list is rebuilt in a plain array: `SmallVec`'s
/// `collect` costs several times more, and replaying a 70B model's layers renumbers 16,000 lists.
fn remap<T: Copy, const N: usize>(list: &SmallVec<[T; N]>, f: impl Fn(T) -> T) -> SmallVec<[T; N]>
where
    [T; N]: smallvec::Array<Item = T>,
{
    if list.is_empty() {
        SmallVec::new()
    } else if list.len() <= N {
        let mut buf = [list[0]; N];
        for (slot, &x) in buf.iter_mut().zip(list.iter()) {
            *slot = f(x);
        }
        SmallVec::from_buf_and_len(buf, list.len())
    } else {
        list.iter().map(|&x| f(x)).collect()
    }
}
