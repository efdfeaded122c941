//! `vramscope inspect FILE|FOLDER`: the tensor inventory of a checkpoint from its file headers
//! alone (safetensors files, sharded folders or their index json, GGUF files), as a table or JSON.

use std::path::PathBuf;

use anyhow::Result;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, Table};
use serde_json::json;
use vramscope_formats::weights::{self, WeightFormat, WeightInventory};

/// `vramscope inspect` arguments.
#[derive(clap::Args, Debug)]
pub struct InspectArgs {
    /// A .safetensors file, a *.safetensors.index.json, a .gguf file, or a folder with them.
    pub path: PathBuf,
    /// Print the inventory as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `vramscope inspect`.
pub fn run(a: &InspectArgs) -> Result<()> {
    let inv = weights::inspect(&a.path)?;
    if a.json {
        crate::output::json(&to_json(&inv))
    } else {
        crate::output::text(&render(&inv))
    }
}

/// Bytes with a binary unit (B, KiB, MiB, GiB, TiB), two decimals above bytes.
pub(crate) fn human(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.2} {}", UNITS[unit])
}

fn shape(s: &[u64]) -> String {
    let dims: Vec<String> = s.iter().map(u64::to_string).collect();
    format!("[{}]", dims.join(", "))
}

fn right(s: String) -> Cell {
    Cell::new(s).set_alignment(CellAlignment::Right)
}

fn file_name(p: &std::path::Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn render(inv: &WeightInventory) -> String {
    let mut out = String::new();
    let files: Vec<String> = inv.files.iter().map(|f| f.display().to_string()).collect();
    out.push_str(&format!(
        "{} ({}, {} file{}, {} tensors)\n",
        files.join(", "),
        inv.format.name(),
        inv.files.len(),
        if inv.files.len() == 1 { "" } else { "s" },
        inv.tensors.len()
    ));
    let sharded = inv.files.len() > 1;
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    let shape_head = match inv.format {
        WeightFormat::Safetensors => "shape",
        WeightFormat::Gguf => "shape (ggml ne, innermost first)",
    };
    let mut head = vec!["name", "dtype", shape_head, "parameters", "bytes"];
    if sharded {
        head.push("file");
    }
    t.set_header(head);
    for w in &inv.tensors {
        let mut row = vec![
            Cell::new(&w.name),
            Cell::new(&w.dtype),
            Cell::new(shape(&w.shape)),
            right(w.elements.to_string()),
            right(w.bytes.to_string()),
        ];
        if sharded {
            row.push(Cell::new(file_name(&w.file)));
        }
        t.add_row(row);
    }
    out.push_str(&format!("{t}\n"));

    let mut d = Table::new();
    d.load_preset(UTF8_FULL_CONDENSED);
    d.set_header(vec!["dtype", "tensors", "parameters", "bytes", ""]);
    for (dtype, total) in inv.by_dtype() {
        d.add_row(vec![
            Cell::new(dtype),
            right(total.tensors.to_string()),
            right(total.elements.to_string()),
            right(total.bytes.to_string()),
            right(human(total.bytes)),
        ]);
    }
    d.add_row(vec![
        Cell::new("total"),
        right(inv.tensors.len().to_string()),
        right(inv.parameters().to_string()),
        right(inv.bytes().to_string()),
        right(human(inv.bytes())),
    ]);
    out.push_str(&format!("{d}\n"));
    out.push_str(&format!(
        "parameters: {}, weights: {} bytes ({})\n",
        inv.parameters(),
        inv.bytes(),
        human(inv.bytes())
    ));
    if let Some(q) = inv.bnb_4bit() {
        out.push_str(&format!(
            "bitsandbytes 4-bit ({}): {} parameters as transformers counts them; {} packed weights \
             ({}, two weights a byte), their quantization state {} tensors ({}), and {} of \
             quant_state JSON read on the CPU\n",
            q.quant_type,
            q.parameters,
            q.packed_tensors,
            human(q.packed_bytes),
            q.state_tensors,
            human(q.state_bytes),
            human(q.metadata_bytes),
        ));
    }
    if !inv.metadata.is_empty() {
        out.push_str("metadata:\n");
        for (k, v) in &inv.metadata {
            out.push_str(&format!("  {k} = {v}\n"));
        }
    }
    out
}

fn to_json(inv: &WeightInventory) -> serde_json::Value {
    let tensors: Vec<_> = inv
        .tensors
        .iter()
        .map(|w| {
            json!({
                "name": w.name,
                "dtype": w.dtype,
                "shape": w.shape,
                "parameters": w.elements,
                "bytes": w.bytes,
                "file": w.file.display().to_string(),
                "offset": w.offset,
            })
        })
        .collect();
    let by_dtype: serde_json::Map<String, serde_json::Value> = inv
        .by_dtype()
        .into_iter()
        .map(|(k, t)| {
            (
                k,
                json!({"tensors": t.tensors, "parameters": t.elements, "bytes": t.bytes}),
            )
        })
        .collect();
    let mut out = json!({
        "format": inv.format.name(),
        "shape_order": match inv.format {
            WeightFormat::Safetensors => "row-major (PyTorch)",
            WeightFormat::Gguf => "ggml ne (innermost first)",
        },
        "files": inv.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>(),
        "parameters": inv.parameters(),
        "bytes": inv.bytes(),
        "by_dtype": by_dtype,
        "metadata": inv.metadata,
        "tensors": tensors,
    });
    if let Some(q) = inv.bnb_4bit() {
        out["bitsandbytes_4bit"] = json!({
            "quant_type": q.quant_type,
            "parameters": q.parameters,
            "packed_tensors": q.packed_tensors,
            "packed_bytes": q.packed_bytes,
            "state_tensors": q.state_tensors,
            "state_bytes": q.state_bytes,
            "quant_state_json_bytes": q.metadata_bytes,
        });
    }
    out
}
