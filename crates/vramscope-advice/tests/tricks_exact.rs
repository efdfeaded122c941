//! Each trick's "after" is exactly the engine's estimate with that change applied: every row is
//! re-simulated here from its `Change`, independently of the tricks module; rows are ranked by
//! memory saved; the new optimizers and the in-place pass do what they claim.

use vramscope_advice::fit::Target;
use vramscope_advice::tricks::{tricks, Change, ModelSource, Trick};
use vramscope_core::optim::Optimizer;
use vramscope_core::passes::inplace_activations;
use vramscope_core::sim::{simulate, Checkpoint, Mode, StepConfig};
use vramscope_core::{Graph, Precision};
use vramscope_formats::zoo::{self, ZooInput};

struct Zoo(&'static str);

fn input(batch: u64, side: u64) -> ZooInput {
    ZooInput {
        height: side,
        width: side,
        ..ZooInput::imagenet(batch)
    }
}

impl ModelSource for Zoo {
    fn build(&self, batch: u64) -> Result<Graph, String> {
        zoo::build(self.0, &ZooInput::imagenet(batch)).map_err(|e| e.to_string())
    }
    fn smaller_input(&self, batch: u64) -> Option<(String, Result<Graph, String>)> {
        Some((
            "3x160x160".into(),
            zoo::build(self.0, &input(batch, 160)).map_err(|e| e.to_string()),
        ))
    }
}

/// The graph and step one row describes.
fn variant(model: &str, batch: u64, cfg: &StepConfig, t: &Trick) -> Option<(Graph, StepConfig)> {
    let g = |b: u64| zoo::build(model, &ZooInput::imagenet(b)).expect("builds");
    let (graph, c) = match &t.change {
        Change::Batch(b) => (g(*b), cfg.clone()),
        Change::Accumulate(b) => (
            g(*b),
            StepConfig {
                zero_grad_set_to_none: false,
                ..cfg.clone()
            },
        ),
        // the zoo's image models have no sequence to shorten and no transformer layers to fine-tune
        Change::ShorterSequence(_) | Change::FineTuning(_) => return None,
        Change::SmallerInput(_) => (
            zoo::build(model, &input(batch, 160)).expect("builds"),
            cfg.clone(),
        ),
        Change::Precision(p) => (
            g(batch),
            StepConfig {
                precision: Precision::parse(p).expect("precision"),
                ..cfg.clone()
            },
        ),
        Change::Checkpoint(list) => {
            let cp = list
                .iter()
                .map(|s| match s.split_once(':') {
                    Some((m, k)) => Checkpoint::Sequential {
                        module: m.into(),
                        segments: k.parse().expect("segments"),
                    },
                    None => Checkpoint::Module(s.clone()),
                })
                .collect();
            (
                g(batch),
                StepConfig {
                    checkpoint: cp,
                    ..cfg.clone()
                },
            )
        }
        Change::Inference => (
            g(batch),
            StepConfig {
                mode: Mode::Infer,
                ..cfg.clone()
            },
        ),
        Change::Optimizer(o) => (
            g(batch),
            StepConfig {
                optimizer: Optimizer::parse(o).expect("optimizer"),
                ..cfg.clone()
            },
        ),
        Change::InplaceActivations(n) => {
            let (graph, flipped) = inplace_activations(&g(batch));
            assert_eq!(flipped, *n);
            (graph, cfg.clone())
        }
        Change::ZeroGradInPlace => (
            g(batch),
            StepConfig {
                zero_grad_set_to_none: false,
                ..cfg.clone()
            },
        ),
        Change::FreeOutput => (
            g(batch),
            StepConfig {
                free_output: true,
                ..cfg.clone()
            },
        ),
        Change::None => return None,
    };
    Some((graph, c))
}

/// Whether `graph` in `cfg` fits `target`, decided here from the allocator's own rule: the
/// reserved peak plus overheads within the budget, else (the allocated peak within it) a run
/// capped at the budget that never runs out of memory.
fn fits(graph: &Graph, cfg: &StepConfig, target: &Target) -> bool {
    let s = simulate(graph, cfg).expect("simulates");
    let overhead = target.gpu.overhead_bytes();
    if s.peak_reserved + overhead <= target.budget() {
        return true;
    }
    if s.peak_allocated + overhead > target.budget() {
        return false;
    }
    let capped = StepConfig {
        reserved_limit: Some(target.budget() - overhead),
        ..cfg.clone()
    };
    !simulate(graph, &capped).expect("simulates").out_of_memory
}

fn check(model: &'static str, batch: u64, cfg: &StepConfig) -> Vec<Trick> {
    check_on(model, batch, cfg, None)
}

/// [`check`], each row's `fits` too where a `target` is given.
fn check_on(
    model: &'static str,
    batch: u64,
    cfg: &StepConfig,
    target: Option<&Target>,
) -> Vec<Trick> {
    let rows = tricks(&Zoo(model), batch, cfg, 4, target).expect("tricks");
    let base_graph = zoo::build(model, &ZooInput::imagenet(batch)).expect("builds");
    let base = simulate(&base_graph, cfg).expect("simulates");
    for t in &rows {
        assert_eq!(t.before.allocated_bytes, base.peak_allocated, "{}", t.name);
        assert_eq!(t.before.reserved_bytes, base.peak_reserved, "{}", t.name);
        assert_eq!(
            t.before.fits,
            target.map(|g| fits(&base_graph, cfg, g)),
            "{}",
            t.name
        );
        let resimulated = variant(model, batch, cfg, t).map(|(g, c)| {
            let s = simulate(&g, &c).expect("simulates");
            let fit = target.map(|tg| fits(&g, &c, tg));
            (s.peak_allocated, s.peak_reserved, fit)
        });
        match (resimulated, t.after) {
            (Some((a, r, fit)), Some(after)) => {
                assert_eq!(after.fits, fit, "{model}: {}", t.name);
                assert_eq!(after.allocated_bytes, a, "{model}: {}", t.name);
                assert_eq!(after.reserved_bytes, r, "{model}: {}", t.name);
                assert_eq!(
                    t.saved_bytes,
                    base.peak_reserved as i64 - r as i64,
                    "{}",
                    t.name
                );
            }
            (None, None) => assert!(!t.note.is_empty(), "{}", t.name),
            (x, y) => panic!("{}: {x:?} vs {y:?}", t.name),
        }
    }
    // ranked by memory saved
    assert!(rows
        .windows(2)
        .all(|w| w[0].saved_bytes >= w[1].saved_bytes));
    rows
}

fn find<'a>(rows: &'a [Trick], prefix: &str) -> &'a Trick {
    rows.iter()
        .find(|t| t.name.starts_with(prefix))
        .unwrap_or_else(|| panic!("no trick {prefix}"))
}

#[test]
fn every_trick_is_the_engine_estimate_resnet18_adamw() {
    let cfg = StepConfig {
        optimizer: Optimizer::AdamW,
        ..StepConfig::default()
    };
    let rows = check("resnet18", 16, &cfg);
    for p in [
        "halve the batch",
        "gradient accumulation",
        "smaller input",
        "precision amp-bf16",
        "precision amp-fp16",
        "precision bf16",
        "checkpoint layer1",
        "checkpoint every stage",
        "checkpoint every block",
        "evaluate under torch.no_grad()",
        "optimizer sgd",
        "optimizer sgd-momentum",
        "optimizer adam",
        "optimizer adam8bit",
        "optimizer adafactor",
        "inplace=True activations",
        "zero_grad(set_to_none=False)",
        "del out, loss",
        "loss.item()",
        "torch.cuda.empty_cache()",
        "DDP over 4 GPUs",
        "ZeRO-1",
        "ZeRO-2",
        "ZeRO-3",
    ] {
        find(&rows, p);
    }
    // the big savers save, and resnet18's ReLUs are already in place
    assert!(find(&rows, "halve the batch").saved_bytes > 0);
    assert!(find(&rows, "evaluate under").saved_bytes > 0);
    assert!(find(&rows, "inplace=True")
        .note
        .starts_with("saves nothing"));
    assert!(find(&rows, "loss.item()")
        .note
        .starts_with("not applicable"));
    // SGD keeps no state: it saves against AdamW
    assert!(rows
        .iter()
        .any(|t| t.name == "optimizer sgd" && t.saved_bytes >= 0));
}

/// With a GPU to fit, every row says whether its step fits it, as `fit` decides (re-simulated
/// here, capped where only the cached blocks are over): resnet50 with AdamW at batch 192 is over
/// a 16 GB T4, and some tricks bring it under.
#[test]
fn every_trick_says_whether_it_fits_a_gpu() {
    let cfg = StepConfig {
        optimizer: Optimizer::AdamW,
        ..StepConfig::default()
    };
    let target = Target {
        gpu: vramscope_report::find_gpu("t4").expect("a T4"),
        margin: 0.05,
    };
    let rows = check_on("resnet50", 192, &cfg, Some(&target));
    assert_eq!(rows[0].before.fits, Some(false));
    let verdicts: Vec<Option<bool>> = rows.iter().map(|t| t.after.and_then(|a| a.fits)).collect();
    assert!(verdicts.contains(&Some(true)), "{verdicts:?}");
    assert!(verdicts.contains(&Some(false)), "{verdicts:?}");
    // rows with nothing simulated say nothing
    assert!(rows
        .iter()
        .all(|t| t.after.is_some() == t.after.and_then(|a| a.fits).is_some()));
}

#[test]
fn every_trick_is_the_engine_estimate_vgg11_features() {
    // `features` is a Sequential: the best checkpoint_sequential segment count is searched
    let rows = check("vgg11", 8, &StepConfig::default());
    let best = find(&rows, "checkpoint_sequential features:");
    assert!(best.after.is_some());
}

/// A stage holding an `nn.Sequential` of one repeated block (ViT's `encoder.layers`): its blocks
/// are what "every block" checkpoints, and `checkpoint_sequential` is searched over it.
#[test]
fn repeated_blocks_inside_a_stage_are_the_blocks() {
    let rows = check("vit_b_32", 2, &StepConfig::default());
    let Change::Checkpoint(blocks) = &find(&rows, "checkpoint every block").change else {
        panic!("not a checkpoint row")
    };
    let layers: Vec<&String> = blocks
        .iter()
        .filter(|b| b.starts_with("encoder.layers.encoder_layer_"))
        .collect();
    assert_eq!(layers.len(), 12, "{blocks:?}");
    assert!(!blocks.contains(&"encoder.layers".to_string()));
    find(&rows, "checkpoint_sequential encoder.layers:");
    // block by block keeps less than the whole encoder as one
    assert!(
        find(&rows, "checkpoint every block").saved_bytes
            > find(&rows, "checkpoint encoder").saved_bytes
    );
}

#[test]
fn inplace_pass_flips_mobilenet_v3_squeeze_excitation() {
    let g = zoo::build("mobilenet_v3_small", &ZooInput::imagenet(8)).expect("builds");
    let (_, flipped) = inplace_activations(&g);
    // each SE block's ReLU and Hardsigmoid (9 SE blocks) flip; the rest already are in place
    assert_eq!(flipped, 18);
    let rows = check("mobilenet_v3_small", 8, &StepConfig::default());
    assert_eq!(
        find(&rows, "inplace=True").change,
        Change::InplaceActivations(18)
    );
    // ViT's GELU has no inplace=True
    let vit = zoo::build("vit_b_32", &ZooInput::imagenet(1)).expect("builds");
    assert_eq!(inplace_activations(&vit).1, 0);
}

#[test]
fn eight_bit_adam_and_adafactor_states() {
    let g = zoo::build("vgg11", &ZooInput::imagenet(1)).expect("builds");
    let states = |o| {
        let cfg = StepConfig {
            optimizer: o,
            ..StepConfig::default()
        };
        simulate(&g, &cfg).expect("simulates").optimizer_state_bytes
    };
    let n: u64 = g.params.iter().map(|p| p.numel()).sum();
    assert_eq!(states(Optimizer::Adam), 8 * n);
    // fused: the same moments and a float32 step count per parameter
    assert_eq!(
        states(Optimizer::AdamWFused),
        8 * n + 4 * g.params.len() as u64
    );
    // 8-bit: 2 bytes per element + 2 fp32 absmax per 256-block (all vgg11 params but the small
    // biases are over 4096 elements; those keep fp32 states)
    let expect_8bit: u64 = g
        .params
        .iter()
        .map(|p| {
            let k = p.numel();
            if k >= 4096 {
                2 * k + 2 * 4 * k.div_ceil(256)
            } else {
                8 * k
            }
        })
        .sum();
    assert_eq!(states(Optimizer::Adam8bit), expect_8bit);
    // Adafactor: row + column factors over the last two dims of each >= 2-D parameter
    let expect_af: u64 = g
        .params
        .iter()
        .map(|p| {
            let s = &p.shape;
            let k = p.numel();
            if s.len() >= 2 {
                let (r, c) = (s[s.len() - 2], s[s.len() - 1]);
                4 * (k / c + k / r)
            } else {
                4 * k
            }
        })
        .sum();
    assert_eq!(states(Optimizer::Adafactor), expect_af);
    assert!(states(Optimizer::Adafactor) < n * 4 / 10);
}
