//! The memory-saving tricks of the field's write-ups, each quantified by re-simulating the step
//! with the change applied (never by a rule of thumb): smaller batches, accumulation, smaller
//! input, precision, checkpointing, inference, optimizers, a transformer's layer checkpointing,
//! LoRA, QLoRA and 4-bit weights, in-place activations, `zero_grad`, freeing the output, and
//! more GPUs. A trick that saves nothing says so and why. Rows are ranked by peak reserved memory
//! saved (what decides an out-of-memory error).

use serde::Serialize;
use vramscope_core::ops::SdpaBackend;
use vramscope_core::optim::Optimizer;
use vramscope_core::passes::inplace_activations;
use vramscope_core::sim::{simulate, Checkpoint, Mode, Simulation, StepConfig};
use vramscope_core::{Graph, Precision};

use crate::fit::{runs_on, Target};
use crate::AdviceError;

/// Where the tricks get their model variants from (the CLI builds them from its flags).
pub trait ModelSource {
    /// The graph at `batch` with the user's input.
    fn build(&self, batch: u64) -> Result<Graph, String>;
    /// A smaller image at `batch` (a lower resolution), described (`3x168x168`); `None` when
    /// there is no smaller image to try (sequence models among them).
    fn smaller_input(&self, batch: u64) -> Option<(String, Result<Graph, String>)>;
    /// Shorter sequences at `batch` for a sequence model: the length tried and its graph; `None`
    /// for other models (the default).
    fn shorter_sequence(&self, _batch: u64) -> Option<(u64, Result<Graph, String>)> {
        None
    }
    /// The model at `batch` with a fine-tuning `change` (a Hugging Face transformer's), and the
    /// step it runs in (`cfg`, plus the modules the change checkpoints); `None` where the change
    /// does not apply to the model (the default) or is already made.
    fn fine_tuned(
        &self,
        _change: FineTuning,
        _batch: u64,
        _cfg: &StepConfig,
    ) -> Option<Result<(Graph, StepConfig), String>> {
        None
    }
    /// Whether the model is a Hugging Face transformers model (`false`, the default, for other
    /// models). It checkpoints its own layers (`gradient_checkpointing_enable()`, the
    /// [`FineTuning::GradientCheckpointing`] row), so checkpointing "every block" by hand is that
    /// row again, or nothing where it is already on; it is loaded with `from_pretrained` and
    /// called on a batch of token ids, which the rows' code says so.
    fn is_transformers_model(&self) -> bool {
        false
    }
}

/// The fine-tuning changes of a Hugging Face transformer, the usual remedies for a language
/// model's training that does not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum FineTuning {
    /// `model.gradient_checkpointing_enable()`: every decoder / encoder layer checkpointed.
    GradientCheckpointing,
    /// PEFT LoRA of this rank on PEFT's default targets, the base frozen.
    Lora(u64),
    /// QLoRA of this rank: the base loaded as 4-bit NF4, LoRA on PEFT's default targets.
    Qlora(u64),
    /// The weights loaded as bitsandbytes 4-bit NF4, for inference.
    LoadIn4bit,
    /// `generate(..., use_cache=True)` where the config says `use_cache: false`.
    KvCache,
}

impl FineTuning {
    /// The rank the LoRA rows try.
    pub const RANK: u64 = 16;

    fn row(self) -> (String, &'static str, String, &'static str) {
        match self {
            FineTuning::GradientCheckpointing => (
                "gradient_checkpointing_enable()".into(),
                "about +33% compute (each layer's forward runs again in backward)",
                "model.gradient_checkpointing_enable()".into(),
                "every decoder / encoder layer is checkpointed (non-reentrant): its inputs are kept, its activations recomputed in backward; the model's cache is turned off",
            ),
            FineTuning::Lora(r) => (
                format!("LoRA r={r} (PEFT's default targets)"),
                "trains low-rank adapters only: usually a little below full fine-tuning's quality",
                format!("model = get_peft_model(model, LoraConfig(r={r}))"),
                "the frozen base gets no gradients and no optimizer states; the activations the adapters and the frozen layers' input gradients need are still saved",
            ),
            FineTuning::Qlora(r) => (
                format!("QLoRA r={r} (4-bit NF4 base)"),
                "4-bit quantisation error in the frozen weights; dequantisation compute; needs bitsandbytes",
                format!("from_pretrained(..., quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=\"nf4\")); model = get_peft_model(model, LoraConfig(r={r}))"),
                "every nn.Linear but the output head is stored as 4-bit NF4 with its block scales and frozen; LoRA adapters are trained on top",
            ),
            FineTuning::LoadIn4bit => (
                "load_in_4bit (bitsandbytes NF4 weights)".into(),
                "4-bit quantisation error; dequantisation compute; needs bitsandbytes",
                "from_pretrained(..., quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=\"nf4\"))".into(),
                "every nn.Linear but the output head is stored as 4-bit NF4 with its block scales, dequantised layer by layer as it runs",
            ),
            FineTuning::KvCache => (
                "generate with the KV cache (use_cache=True)".into(),
                "the cache's memory, kept for every position; far less compute (each step runs the new token only)",
                "model.generate(input_ids, ..., use_cache=True)  # the config says use_cache=False, as saved after training with gradient checkpointing".into(),
                "without a cache generate() reruns the whole sequence every step, and each step's slightly larger blocks fragment the caching allocator",
            ),
        }
    }
}

/// The peak of one simulated step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Peak {
    /// `max_memory_allocated()`.
    pub allocated_bytes: u64,
    /// `max_memory_reserved()`.
    pub reserved_bytes: u64,
    /// With a GPU to fit (`--gpu`): whether the step runs on it within the margin, as `fit`
    /// decides (the reserved peak plus the GPU's overheads within the budget, or, where only
    /// the cached blocks are over, a run with the allocator capped at the budget that frees its
    /// cache without running out of memory).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fits: Option<bool>,
}

impl Peak {
    /// The peak of `sim`, a simulation of `graph` in `cfg`, and whether it fits `target`.
    fn of(
        graph: &Graph,
        cfg: &StepConfig,
        sim: &Simulation,
        target: Option<&Target>,
    ) -> Result<Self, AdviceError> {
        let fits = match target {
            Some(t) => Some(runs_on(graph, cfg, sim, t, &mut 0)?.is_some()),
            None => None,
        };
        Ok(Peak {
            allocated_bytes: sim.peak_allocated,
            reserved_bytes: sim.peak_reserved,
            fits,
        })
    }
}

/// What was simulated for a trick: exactly this graph change and step configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Change {
    /// Batch size.
    Batch(u64),
    /// Batch size with gradients kept across micro-batches (accumulation).
    Accumulate(u64),
    /// A smaller input (described).
    SmallerInput(String),
    /// Shorter sequences (tokens per sequence).
    ShorterSequence(u64),
    /// A precision.
    Precision(String),
    /// Checkpointed modules (`layer3`, `features:4`).
    Checkpoint(Vec<String>),
    /// Inference.
    Inference,
    /// An optimizer.
    Optimizer(String),
    /// `inplace=True` on this many activations.
    InplaceActivations(usize),
    /// `zero_grad(set_to_none=False)`.
    ZeroGradInPlace,
    /// `del out, loss` at the end of each iteration.
    FreeOutput,
    /// A Hugging Face fine-tuning change.
    FineTuning(FineTuning),
    /// Nothing simulated (analytic or not applicable).
    None,
}

/// One row of the tricks table.
#[derive(Debug, Clone, Serialize)]
pub struct Trick {
    /// Short name.
    pub name: String,
    /// What was simulated.
    pub change: Change,
    /// Peak before (the step as given).
    pub before: Peak,
    /// Peak after (the engine's estimate with the change), when simulated.
    pub after: Option<Peak>,
    /// Reserved bytes saved (negative: the change costs memory).
    pub saved_bytes: i64,
    /// What it costs (compute, accuracy, semantics).
    pub cost: String,
    /// One line of PyTorch.
    pub how: String,
    /// Why it saves what it saves, or nothing.
    pub note: String,
}

/// The tricks for a step at `batch` with `cfg`, ranked by reserved memory saved, plus the
/// analytic multi-GPU lines (model states only) over `gpus` GPUs; with a `target`, whether the
/// step fits it as given and after each simulated trick.
pub fn tricks<S: ModelSource>(
    src: &S,
    batch: u64,
    cfg: &StepConfig,
    gpus: u64,
    target: Option<&Target>,
) -> Result<Vec<Trick>, AdviceError> {
    let base_graph = src.build(batch).map_err(|m| AdviceError::Build {
        size: batch,
        message: m,
    })?;
    let base_sim = simulate(&base_graph, cfg)?;
    let before = Peak::of(&base_graph, cfg, &base_sim, target)?;
    // a transformers model is called on a batch of token ids and computes its own loss
    let hf = src.is_transformers_model();
    let mut rows: Vec<Trick> = Vec::new();
    let train = cfg.mode == Mode::Train;
    let build = |b: u64| {
        src.build(b).map_err(|m| AdviceError::Build {
            size: b,
            message: m,
        })
    };
    let mut push = |name: String,
                    change: Change,
                    after: Option<Peak>,
                    cost: &str,
                    how: String,
                    note: String| {
        let saved = after
            .map(|a| before.reserved_bytes as i64 - a.reserved_bytes as i64)
            .unwrap_or(0);
        rows.push(Trick {
            name,
            change,
            before,
            after,
            saved_bytes: saved,
            cost: cost.to_string(),
            how,
            note,
        });
    };
    let sim = |g: &Graph, c: &StepConfig| -> Result<Peak, AdviceError> {
        Peak::of(g, c, &simulate(g, c)?, target)
    };
    let half = batch / 2;

    // batch
    if half >= 1 {
        let g = build(half)?;
        push(
            format!("halve the batch ({batch} -> {half})"),
            Change::Batch(half),
            Some(sim(&g, cfg)?),
            if train {
                "2x the steps per epoch; changes the optimisation (learning rate, batch-norm statistics)"
            } else {
                "2x the forward passes (lower throughput)"
            },
            format!("DataLoader(..., batch_size={half})"),
            if train {
                "activations scale with the batch; parameters, gradients and optimizer states do not"
            } else {
                "activations scale with the batch; the weights do not"
            }
            .into(),
        );
        if train {
            let c = StepConfig {
                zero_grad_set_to_none: false,
                ..cfg.clone()
            };
            push(
                format!("gradient accumulation (2 x {half})"),
                Change::Accumulate(half),
                Some(sim(&g, &c)?),
                if hf {
                    "2x the forward/backward calls for the same effective batch"
                } else {
                    "2x the forward/backward calls for the same effective batch; batch norm sees half the samples"
                },
                if hf {
                    "loss = model(**micro_batch).loss / 2; loss.backward()  # opt.step(); opt.zero_grad() every 2nd micro-batch (Trainer: gradient_accumulation_steps=2)"
                } else {
                    "loss = loss_fn(model(x_i), y_i) / 2; loss.backward()  # opt.step(); opt.zero_grad() every 2nd micro-batch"
                }
                .into(),
                "micro-batch activations, with the gradients alive through every backward (simulated as zero_grad(set_to_none=False))".into(),
            );
        }
    } else {
        push(
            "halve the batch".into(),
            Change::None,
            None,
            "-",
            "-".into(),
            "not applicable: the batch is already 1".into(),
        );
    }
    // input
    if let Some((desc, g)) = src.smaller_input(batch) {
        let g = g.map_err(|m| AdviceError::Build {
            size: batch,
            message: m,
        })?;
        push(
            format!("smaller input ({desc})"),
            Change::SmallerInput(desc.clone()),
            Some(sim(&g, cfg)?),
            "accuracy: the model sees less detail (train at low resolution, fine-tune at full)",
            format!(
                "transforms.Resize({})",
                desc.rsplit('x').next().unwrap_or(&desc)
            ),
            "activations scale with the input's area".into(),
        );
    }
    if let Some((tokens, g)) = src.shorter_sequence(batch) {
        let g = g.map_err(|m| AdviceError::Build {
            size: batch,
            message: m,
        })?;
        push(
            format!("shorter sequences ({tokens} tokens)"),
            Change::ShorterSequence(tokens),
            Some(sim(&g, cfg)?),
            "accuracy: longer texts are truncated, or split into overlapping chunks",
            format!("tokenizer(texts, truncation=True, max_length={tokens})"),
            "activations scale with the sequence length (eager attention's scores with its square)"
                .into(),
        );
    }
    // precision: (change, cost, code for an image model, code for a transformers model, which
    // is loaded in the dtype and called on token ids, never cast). Inference: no loss scaling,
    // no updates to lose
    let load_bf16 = "model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16)  # or the model's own Auto class; or model.to(torch.bfloat16)";
    let precisions = if train {
        [
            (
                Precision::AmpBf16,
                "none on Ampere and newer (bf16 tensor cores); small accuracy risk",
                "with torch.autocast('cuda', dtype=torch.bfloat16): loss = loss_fn(model(x), y)",
                "with torch.autocast('cuda', dtype=torch.bfloat16): loss = model(**batch).loss",
            ),
            (
                Precision::AmpFp16,
                "GradScaler bookkeeping; overflow risk handled by loss scaling",
                "scaler = torch.amp.GradScaler(); with torch.autocast('cuda', dtype=torch.float16): ...; scaler.scale(loss).backward()",
                "scaler = torch.amp.GradScaler(); with torch.autocast('cuda', dtype=torch.float16): loss = model(**batch).loss; scaler.scale(loss).backward()",
            ),
            (
                Precision::Bf16,
                "accuracy risk: bf16 weights lose small updates (use Kahan summation or fp32 master weights)",
                "model = model.to(torch.bfloat16); x = x.to(torch.bfloat16)",
                load_bf16,
            ),
        ]
    } else {
        [
            (
                Precision::AmpBf16,
                "none on Ampere and newer (bf16 tensor cores); small accuracy risk",
                "with torch.autocast('cuda', dtype=torch.bfloat16): out = model(x)",
                "with torch.autocast('cuda', dtype=torch.bfloat16): out = model(**batch)",
            ),
            (
                Precision::AmpFp16,
                "small accuracy risk (fp16 overflow in large activations)",
                "with torch.autocast('cuda', dtype=torch.float16): out = model(x)",
                "with torch.autocast('cuda', dtype=torch.float16): out = model(**batch)",
            ),
            (
                Precision::Bf16,
                "small accuracy risk (bf16 weights and activations)",
                "model = model.to(torch.bfloat16); x = x.to(torch.bfloat16)",
                load_bf16,
            ),
        ]
    };
    for (p, cost, how_image, how_transformers) in precisions {
        let name = format!("precision {}", p.name());
        let how = if hf { how_transformers } else { how_image };
        if cfg.precision == p {
            push(
                name,
                Change::None,
                None,
                cost,
                how.into(),
                format!("already {}", p.name()),
            );
            continue;
        }
        let c = StepConfig {
            precision: p,
            ..cfg.clone()
        };
        let after_sim = simulate(&base_graph, &c)?;
        let after = Peak::of(&base_graph, &c, &after_sim, target)?;
        let mut note = match (p.autocast_dtype().is_some(), train) {
            (true, true) => "activations saved in half precision; fp32 weights, gradients and states stay, plus autocast's cached half copies of the weights",
            (true, false) => "activations in half precision; the fp32 weights stay, with half-precision copies made for the layers that run in it",
            (false, true) => "everything in half precision: weights, gradients, optimizer states and activations",
            (false, false) => "weights and activations in half precision",
        }
        .to_string();
        // a head dim float32's fused kernels refuse but flash attention pads
        let math = |s: &Simulation| s.sdpa_backends.contains(&SdpaBackend::Math);
        if math(&base_sim) && !math(&after_sim) {
            note.push_str("; attention leaves PyTorch's SDPA math fallback for a fused kernel, which keeps no [batch, heads, seq, seq] scores");
        }
        push(
            name,
            Change::Precision(p.name().into()),
            Some(after),
            cost,
            how.into(),
            note,
        );
    }
    // checkpointing
    if train {
        checkpoint_tricks(&base_graph, cfg, hf, target, &mut push)?;
    }
    // a transformer's own: in training its layers checkpointed, LoRA, QLoRA; in inference and
    // generation its weights loaded in 4 bits, and a generation without a cache given one
    let changes: &[FineTuning] = if train {
        &[
            FineTuning::GradientCheckpointing,
            FineTuning::Lora(FineTuning::RANK),
            FineTuning::Qlora(FineTuning::RANK),
        ]
    } else {
        &[FineTuning::LoadIn4bit, FineTuning::KvCache]
    };
    for &change in changes {
        let Some(variant) = src.fine_tuned(change, batch, cfg) else {
            continue;
        };
        let (name, cost, how, note) = change.row();
        match variant {
            Ok((g, c)) => push(
                name,
                Change::FineTuning(change),
                Some(sim(&g, &c)?),
                cost,
                how,
                note.into(),
            ),
            // a model the change cannot be made to (no default targets, ...): said, not fatal
            Err(m) => push(
                name,
                Change::None,
                None,
                "-",
                how,
                format!("not applicable: {m}"),
            ),
        }
    }
    if train {
        // optimizers
        for o in [
            Optimizer::Sgd,
            Optimizer::SgdMomentum,
            Optimizer::Adam,
            Optimizer::AdamW,
            Optimizer::AdamFused,
            Optimizer::AdamWFused,
            Optimizer::Adam8bit,
            Optimizer::Adafactor,
        ] {
            // fused Adam is offered to Adam users; everyone else is offered fused AdamW
            if o == cfg.optimizer || (o == Optimizer::AdamFused && cfg.optimizer != Optimizer::Adam)
            {
                continue;
            }
            let c = StepConfig {
                optimizer: o,
                ..cfg.clone()
            };
            let (cost, how) = match o {
                Optimizer::Sgd => (
                    "often slower convergence than momentum or Adam",
                    "torch.optim.SGD(model.parameters(), lr=0.1)",
                ),
                Optimizer::SgdMomentum => (
                    "needs learning-rate tuning (vs Adam)",
                    "torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)",
                ),
                Optimizer::Adam => (
                    "none in memory terms beyond its two states",
                    "torch.optim.Adam(model.parameters(), lr=1e-3)",
                ),
                Optimizer::AdamW => ("as Adam", "torch.optim.AdamW(model.parameters(), lr=1e-3)"),
                Optimizer::AdamFused => (
                    "none: the same update in one kernel (CUDA floating-point parameters)",
                    "torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)",
                ),
                Optimizer::AdamWFused => (
                    "none: the same update in one kernel (CUDA floating-point parameters)",
                    "torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)  # Trainer: optim=\"adamw_torch_fused\"",
                ),
                Optimizer::Adam8bit => (
                    "small accuracy risk; needs bitsandbytes",
                    "bnb.optim.Adam8bit(model.parameters(), lr=1e-3)",
                ),
                _ => (
                    "no first moment; different convergence",
                    "torch.optim.Adafactor(model.parameters())",
                ),
            };
            push(
                format!("optimizer {}", o.name()),
                Change::Optimizer(o.name().into()),
                Some(sim(&base_graph, &c)?),
                cost,
                how.into(),
                o.describe().into(),
            );
        }
        // in-place activations
        let (g, flipped) = inplace_activations(&base_graph);
        let how = "nn.ReLU(inplace=True) (also ReLU6, SiLU, Hardswish, Hardsigmoid)".to_string();
        if flipped == 0 {
            push(
                "inplace=True activations".into(),
                Change::None,
                None,
                "-",
                how,
                "saves nothing: every activation that PyTorch allows in place already is (or its input is read again, or saved by the op before it)".into(),
            );
        } else {
            let after = sim(&g, cfg)?;
            let note = if after.reserved_bytes >= before.reserved_bytes {
                format!("{flipped} activations flipped; saves nothing here: the peak is not where their outputs are alive, or the in-place op must clone its input for backward (SiLU, Hardswish, ReLU6)")
            } else {
                format!("{flipped} activations flipped: each writes over its input instead of allocating an output")
            };
            push(
                "inplace=True activations".into(),
                Change::InplaceActivations(flipped),
                Some(after),
                "none (the input is overwritten)",
                how,
                note,
            );
        }
        // zero_grad
        if cfg.zero_grad_set_to_none {
            let c = StepConfig {
                zero_grad_set_to_none: false,
                ..cfg.clone()
            };
            let after = sim(&base_graph, &c)?;
            let note = if after.reserved_bytes > before.reserved_bytes {
                "the loop already frees the gradients with set_to_none=True; zeroing in place would keep them through backward: the negative saving is what set_to_none=True saves".to_string()
            } else {
                format!(
                    "the loop already uses set_to_none=True; zeroing in place keeps the gradients through backward (peak allocated {} -> {}), but the peak reserved memory is the same: the allocator's cached blocks absorb it",
                    vramscope_report::human(before.allocated_bytes),
                    vramscope_report::human(after.allocated_bytes)
                )
            };
            push(
                "zero_grad(set_to_none=False) instead of True".into(),
                Change::ZeroGradInPlace,
                Some(after),
                "-",
                "opt.zero_grad()  # set_to_none=True is the default since torch 2.0; keep it"
                    .into(),
                note,
            );
        }
    } else {
        push(
            "checkpointing, optimizers, zero_grad".into(),
            Change::None,
            None,
            "-",
            "-".into(),
            "not applicable in inference: no autograd graph, no gradients, no optimizer".into(),
        );
    }
    // inference
    if train {
        let c = StepConfig {
            mode: Mode::Infer,
            ..cfg.clone()
        };
        push(
            "evaluate under torch.no_grad() / eval()".into(),
            Change::Inference,
            Some(sim(&base_graph, &c)?),
            "for evaluation only (no training)",
            if hf {
                "model.eval(); with torch.no_grad(): out = model(**batch)"
            } else {
                "model.eval(); with torch.no_grad(): out = model(x)"
            }
            .into(),
            "no saved activations, gradients or optimizer states: only the live activations".into(),
        );
    }
    // del out
    if !cfg.free_output {
        let c = StepConfig {
            free_output: true,
            ..cfg.clone()
        };
        let after = sim(&base_graph, &c)?;
        // inference has an output and no loss
        let (what, how) = if train {
            ("output and loss", "del out, loss")
        } else {
            ("output", "del out")
        };
        let note = if after.reserved_bytes >= before.reserved_bytes {
            "saves nothing here: the previous output (logits) is small next to the peak, or the peak is elsewhere".to_string()
        } else {
            format!("the previous iteration's {what} no longer live(s) through the next forward")
        };
        push(
            format!("{how} at the end of each iteration"),
            Change::FreeOutput,
            Some(after),
            "none",
            how.into(),
            note,
        );
    }
    if train {
        push(
            "loss.item() instead of accumulating the loss tensor".into(),
            Change::None,
            None,
            "none",
            "total += loss.item()".into(),
            "not applicable: the canonical loop calls backward on every loss, which frees the saved tensors; `total += loss` would keep only the small autograd nodes of each loss (a leak of the graph happens when backward is never called on it, e.g. an evaluation loop without no_grad)".into(),
        );
    }
    let last = base_sim.phases.last();
    let (alloc_end, res_end) = last
        .map(|p| (p.allocated_after, p.reserved_after))
        .unwrap_or((0, 0));
    push(
        "torch.cuda.empty_cache()".into(),
        Change::None,
        None,
        "the next allocations go back to cudaMalloc (slower); no effect on PyTorch's own peak",
        "torch.cuda.empty_cache()  # between phases, e.g. after evaluation".into(),
        format!(
            "returns cached, unused blocks to the driver: after the step, reserved {} vs allocated {} (what nvidia-smi and other processes gain); it cannot lower the peak reached inside the step",
            vramscope_report::human(res_end),
            vramscope_report::human(alloc_end)
        ),
    );
    // more GPUs
    if gpus > 1 {
        let per = (batch / gpus).max(1);
        let g = build(per)?;
        // training all-reduces the gradients (DDP); inference only splits the batch
        let (name, cost, code, why) = if train {
            (
                "DDP",
                "N GPUs; gradient all-reduce (DDP's bucket copies of the gradients are not modelled)",
                "model = DistributedDataParallel(model); DistributedSampler(dataset)",
                format!("the global batch {batch} is split: each GPU runs batch {per}; model states are replicated"),
            )
        } else {
            (
                "data parallel",
                "N GPUs, one copy of the model on each",
                "one process per GPU (torchrun), each with DistributedSampler(dataset)'s share",
                format!("the batch {batch} is split: each GPU runs batch {per} and holds the whole model"),
            )
        };
        push(
            format!("{name} over {gpus} GPUs (batch {per} per GPU)"),
            Change::Batch(per),
            Some(sim(&g, cfg)?),
            cost,
            code.into(),
            why,
        );
        if train {
            let p = base_sim.parameter_bytes;
            let gr = base_sim.gradient_bytes;
            let o = base_sim.optimizer_state_bytes;
            for (stage, sharded) in [(1u32, o), (2, o + gr), (3, o + gr + p)] {
                let saved = sharded - sharded / gpus;
                rows.push(Trick {
                    name: format!("ZeRO-{stage} over {gpus} GPUs (model states only)"),
                    change: Change::None,
                    before,
                    after: None,
                    saved_bytes: saved as i64,
                    cost: "communication; DeepSpeed or FSDP".into(),
                    how: match stage {
                        1 => "deepspeed zero_optimization.stage=1 / ZeroRedundancyOptimizer".into(),
                        2 => "deepspeed zero_optimization.stage=2 / FSDP(SHARD_GRAD_OP)".into(),
                        _ => "deepspeed zero_optimization.stage=3 / FSDP(FULL_SHARD)".into(),
                    },
                    note: format!(
                        "model states only (analytic until the multi-GPU model lands): shards {} of {} per GPU",
                        match stage { 1 => "optimizer states", 2 => "optimizer states + gradients", _ => "optimizer states + gradients + parameters" },
                        vramscope_report::human(sharded)
                    ),
                });
            }
        }
    }
    if let Some(cc) = target.and_then(|t| pre_ampere(t.gpu)) {
        for r in &mut rows {
            if matches!(&r.change, Change::Precision(p) if p.contains("bf16")) {
                r.cost = format!(
                    "the {} (compute capability {cc}) has no bfloat16 tensor cores: bf16 matmuls run without them, far slower (float16 is its fast half precision); {}",
                    target.map_or("", |t| t.gpu.name.as_str()),
                    r.cost
                );
            }
        }
    }
    rows.sort_by_key(|t| std::cmp::Reverse(t.saved_bytes));
    Ok(rows)
}

/// An NVIDIA GPU older than Ampere (compute capability below 8.0): its compute capability.
fn pre_ampere(gpu: &vramscope_report::Gpu) -> Option<&str> {
    let cc = gpu.compute_capability.as_deref()?;
    let major: u32 = cc.split('.').next()?.parse().ok()?;
    (major < 8).then_some(cc)
}

/// A module that only holds others (`nn.ModuleList`, `nn.ModuleDict`): it cannot be called.
fn is_module_container(m: &vramscope_core::ir::ModuleDef) -> bool {
    matches!(&*m.type_name, "ModuleList" | "ModuleDict")
}

/// Checkpointing of the model's containers: each top-level stage, every stage, every block of
/// the stages (left to the model's own row where it checkpoints its layers itself:
/// `own_layer_checkpointing`), `checkpoint_sequential` over an `nn.Sequential` stage.
fn checkpoint_tricks<F>(
    g: &Graph,
    cfg: &StepConfig,
    own_layer_checkpointing: bool,
    target: Option<&Target>,
    push: &mut F,
) -> Result<(), AdviceError>
where
    F: FnMut(String, Change, Option<Peak>, &str, String, String),
{
    // the modules whose parent is `m`, with their ids
    let children = |m: vramscope_core::ir::ModuleId| {
        g.modules
            .iter()
            .enumerate()
            .filter(move |(_, c)| c.parent == Some(m))
            .map(|(i, c)| (vramscope_core::ir::ModuleId(i as u32), c))
            .collect::<Vec<_>>()
    };
    let with_cp = |cp: Vec<Checkpoint>| -> Result<Peak, AdviceError> {
        let c = StepConfig {
            checkpoint: [cfg.checkpoint.clone(), cp].concat(),
            ..cfg.clone()
        };
        Peak::of(g, &c, &simulate(g, &c)?, target)
    };
    // stages: top-level containers (modules with children)
    let stages: Vec<&vramscope_core::ir::ModuleDef> = g
        .top_level_children()
        .into_iter()
        .filter(|m| {
            let id = g.find_module(&m.path);
            id.is_some() && g.modules.iter().any(|c| c.parent == id)
        })
        .collect();
    let cost = "about +33% compute (one more forward of the checkpointed part)";
    for s in &stages {
        let after = with_cp(vec![Checkpoint::Module(s.path.clone())])?;
        push(
            format!("checkpoint {}", s.path),
            Change::Checkpoint(vec![s.path.clone()]),
            Some(after),
            cost,
            format!(
                "x = torch.utils.checkpoint.checkpoint(self.{}, x, use_reentrant=False)",
                s.path
            ),
            "only the stage's input is kept; its activations are recomputed in backward".into(),
        );
    }
    if stages.len() > 1 {
        let names: Vec<String> = stages.iter().map(|s| s.path.clone()).collect();
        let after = with_cp(names.iter().cloned().map(Checkpoint::Module).collect())?;
        push(
            format!("checkpoint every stage ({})", names.join(",")),
            Change::Checkpoint(names.clone()),
            Some(after),
            cost,
            "checkpoint(stage, x, use_reentrant=False) for each stage".into(),
            "only the stages' inputs are kept; each stage is recomputed in backward".into(),
        );
    }
    // an `nn.Sequential` of one repeated block (ViT's `encoder.layers` of 12 `EncoderBlock`s,
    // a ConvNeXt or Swin stage's blocks): where users checkpoint block by block
    let repeated_blocks = |id: vramscope_core::ir::ModuleId, m: &vramscope_core::ir::ModuleDef| {
        let inner = children(id);
        &*m.type_name == "Sequential"
            && inner.len() >= 2
            && inner
                .iter()
                .all(|(_, c)| c.type_name == inner[0].1.type_name)
            && inner.iter().all(|(cid, _)| !children(*cid).is_empty())
    };
    // every block of the stages (stages' children), unless the model checkpoints its layers
    // itself. A `ModuleList` / `ModuleDict` has no forward to wrap in `checkpoint`: its entries
    // are the blocks (a transformer's layers), and so are a repeated-block `Sequential`'s
    let stage_children: Vec<_> = if own_layer_checkpointing {
        Vec::new()
    } else {
        stages
            .iter()
            .filter_map(|s| g.find_module(&s.path))
            .flat_map(children)
            .map(|(id, c)| (id, c, repeated_blocks(id, c)))
            .collect()
    };
    let blocks: Vec<String> = stage_children
        .iter()
        .flat_map(|&(id, c, repeated)| {
            if is_module_container(c) || repeated {
                children(id)
                    .into_iter()
                    .map(|(_, e)| e.path.clone())
                    .collect()
            } else {
                vec![c.path.clone()]
            }
        })
        .collect();
    if blocks.len() > stages.len() {
        let after = with_cp(blocks.iter().cloned().map(Checkpoint::Module).collect())?;
        push(
            format!("checkpoint every block ({} blocks)", blocks.len()),
            Change::Checkpoint(blocks.clone()),
            Some(after),
            cost,
            "checkpoint(block, x, use_reentrant=False) in each block's caller".into(),
            "block inputs are kept; one block's activations at a time are recomputed".into(),
        );
    }
    // best segment count for sequential stages: `checkpoint_sequential` runs an `nn.Sequential`'s
    // children one after the other, each on the previous one's output, which another module's
    // forward need not do (a transformer passes masks and positions to its layers). An ONNX
    // file's containers are of unknown class ("Module"): offered, as their nodes run in order
    let sequential =
        |s: &&&vramscope_core::ir::ModuleDef| matches!(&*s.type_name, "Sequential" | "Module");
    // ... and a repeated-block `Sequential` inside a stage (ViT's `encoder.layers`)
    let candidates: Vec<&vramscope_core::ir::ModuleDef> = stages
        .iter()
        .filter(sequential)
        .copied()
        .chain(
            stage_children
                .iter()
                .filter(|&&(_, _, repeated)| repeated)
                .map(|&(_, c, _)| c),
        )
        .collect();
    for s in candidates {
        let Some(m) = g.find_module(&s.path) else {
            continue;
        };
        let n = children(m).len() as u32;
        if n < 4 {
            continue;
        }
        let mut best: Option<(u32, Peak)> = None;
        for k in 2..=n.min(16) {
            let after = with_cp(vec![Checkpoint::Sequential {
                module: s.path.clone(),
                segments: k,
            }])?;
            if best
                .map(|(_, b)| after.reserved_bytes < b.reserved_bytes)
                .unwrap_or(true)
            {
                best = Some((k, after));
            }
        }
        if let Some((k, after)) = best {
            let spec = format!("{}:{k}", s.path);
            push(
                format!("checkpoint_sequential {spec} (best of 2..{})", n.min(16)),
                Change::Checkpoint(vec![spec]),
                Some(after),
                cost,
                format!("x = torch.utils.checkpoint.checkpoint_sequential(self.{}, {k}, x, use_reentrant=False)", s.path),
                format!("{k} segments give the lowest peak: segment inputs kept, one segment recomputed at a time"),
            );
        }
    }
    Ok(())
}
