//! Which model to simulate and for what input: `MODEL` and the flags that shape the input. Every
//! front-end (the zoo today; config.json, ONNX, safetensors next) is dispatched from here.

use anyhow::{anyhow, bail, Result};
use vramscope_core::Graph;
use vramscope_formats::zoo::{self, ZooInput};

/// The model and its input, shared by every command that simulates.
#[derive(clap::Args, Debug, Clone)]
pub struct ModelArgs {
    /// A built-in model name (`vramscope models` lists them), or an `.onnx` file.
    pub model: String,
    /// Batch size.
    #[arg(long, short = 'b', default_value_t = 32)]
    pub batch_size: u64,
    /// Input of one sample as CxHxW (or just H for a square 3-channel image).
    #[arg(long, default_value = "3x224x224")]
    pub input: String,
    /// Classes of the classifier head.
    #[arg(long, default_value_t = 1000)]
    pub num_classes: u64,
    /// Sequence length bound to the symbolic `sequence` dims of ONNX inputs.
    #[arg(long, default_value_t = 128)]
    pub seq_len: u64,
}

/// A built graph and where it came from.
pub struct LoadedModel {
    /// The forward program.
    pub graph: Graph,
    /// `zoo`, `hf-config`, `onnx`, ...
    pub source: &'static str,
}

/// Parses `--input`.
pub fn parse_input(s: &str) -> Result<(u64, u64, u64)> {
    let parts: Vec<&str> = s.split(['x', 'X']).collect();
    let nums: Result<Vec<u64>, _> = parts.iter().map(|p| p.trim().parse::<u64>()).collect();
    let nums = nums.map_err(|_| {
        anyhow!("--input {s:?}: expected CxHxW (e.g. 3x224x224) or a single image size")
    })?;
    match nums.as_slice() {
        [h] => Ok((3, *h, *h)),
        [c, h, w] => Ok((*c, *h, *w)),
        _ => bail!("--input {s:?}: expected CxHxW (e.g. 3x224x224) or a single image size"),
    }
}

/// Builds the graph for `args` (with `batch_size` overriding the flag, for searches).
pub fn load(args: &ModelArgs, batch_size: u64) -> Result<LoadedModel> {
    let (c, h, w) = parse_input(&args.input)?;
    if args.model.to_ascii_lowercase().ends_with(".onnx") {
        // the task is classification with --num-classes taken from the output shape
        let opts = vramscope_formats::onnx::OnnxOptions {
            batch: batch_size,
            seq_len: args.seq_len,
            chw: (c, h, w),
        };
        let graph = vramscope_formats::onnx::load(std::path::Path::new(&args.model), &opts)?;
        return Ok(LoadedModel {
            graph,
            source: "onnx",
        });
    }
    let input = ZooInput {
        batch: batch_size,
        channels: c,
        height: h,
        width: w,
        num_classes: args.num_classes,
    };
    Ok(LoadedModel {
        graph: zoo::build(&args.model, &input)?,
        source: "zoo",
    })
}
