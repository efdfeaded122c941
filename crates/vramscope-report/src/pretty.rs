//! Pretty-printed JSON as `serde_json::to_writer_pretty` writes it (two spaces an indent level),
//! with a line break and its indentation written at once rather than a write per level: a 70B
//! model's report is 270 KB over some 15,000 lines, and those writes were a quarter of its
//! serialisation. The report's `layers` list, nine tenths of those bytes, is written by hand.

use std::io::{self, Write};

use serde::Serialize;
use serde_json::ser::Formatter;

use crate::json::{EstimateReport, LayerInfo};

/// Line breaks followed by the deepest indentation the formatter writes at once; deeper levels
/// take a second write.
const BREAK: &[u8; 2 + 64] = b",\n                                                                ";

/// `serde_json::ser::PrettyFormatter`'s output, byte for byte.
#[derive(Debug, Default)]
struct Pretty {
    depth: usize,
    has_value: bool,
}

impl Pretty {
    /// A line break (after a comma unless `first`) and the indentation of the current depth.
    fn line<W: ?Sized + Write>(&self, w: &mut W, first: bool) -> io::Result<()> {
        let from = usize::from(first);
        let spaces = 2 * self.depth;
        if spaces <= BREAK.len() - 2 {
            w.write_all(&BREAK[from..2 + spaces])
        } else {
            w.write_all(&BREAK[from..])?;
            for _ in (BREAK.len() - 2)..spaces {
                w.write_all(b" ")?;
            }
            Ok(())
        }
    }

    /// An array or object opens: one level deeper, nothing in it yet.
    fn open<W: ?Sized + Write>(&mut self, w: &mut W, bracket: &[u8]) -> io::Result<()> {
        self.depth += 1;
        self.has_value = false;
        w.write_all(bracket)
    }

    /// An array or object closes, on a line of its own unless it is empty.
    fn close<W: ?Sized + Write>(&mut self, w: &mut W, bracket: &[u8]) -> io::Result<()> {
        self.depth -= 1;
        if self.has_value {
            self.line(w, true)?;
        }
        w.write_all(bracket)
    }
}

impl Formatter for Pretty {
    fn begin_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.open(w, b"[")
    }

    fn end_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.close(w, b"]")
    }

    fn begin_array_value<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        self.line(w, first)
    }

    fn end_array_value<W: ?Sized + Write>(&mut self, _w: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }

    fn begin_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.open(w, b"{")
    }

    fn end_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.close(w, b"}")
    }

    fn begin_object_key<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        self.line(w, first)
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }

    fn end_object_value<W: ?Sized + Write>(&mut self, _w: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}

/// Writes `value` as `serde_json::to_writer_pretty` does.
pub fn to_writer_pretty<W: Write, T: ?Sized + Serialize>(
    writer: W,
    value: &T,
) -> serde_json::Result<()> {
    let mut ser = serde_json::Serializer::with_formatter(writer, Pretty::default());
    value.serialize(&mut ser)
}

/// Writes `report` as `serde_json::to_writer_pretty` does, its `layers` list by hand: through
/// serde, a 70B model's 1,285 layers took 3.0 M of the process's 40.6 M instructions, mostly in
/// the map machinery and the escaping scan of keys that need none (docs/performance.md).
pub fn report_to_writer_pretty<W: Write>(
    mut writer: W,
    report: &EstimateReport,
) -> serde_json::Result<()> {
    // `EstimateReport`'s fields in their declared order (a test holds this to serde's output)
    let r = report;
    let w = &mut writer;
    w.write_all(b"{").map_err(serde_json::Error::io)?;
    field(w, "model", &r.model, true)?;
    field(w, "config", &r.config, false)?;
    field(w, "peak", &r.peak, false)?;
    field(w, "phases", &r.phases, false)?;
    field(w, "breakdown_at_peak", &r.breakdown_at_peak, false)?;
    field(w, "live_at_peak", &r.live_at_peak, false)?;
    w.write_all(b",\n  \"layers\": ")
        .and_then(|()| write_layers(w, &r.layers))
        .map_err(serde_json::Error::io)?;
    field(w, "overheads", &r.overheads, false)?;
    field(w, "gpu", &r.gpu, false)?;
    field(w, "sdpa_backends", &r.sdpa_backends, false)?;
    if let Some(generation) = &r.generation {
        field(w, "generation", generation, false)?;
    }
    w.write_all(b"\n}").map_err(serde_json::Error::io)
}

/// `"name": value` of a top-level object, after a comma unless `first`.
fn field<W: Write, T: ?Sized + Serialize>(
    w: &mut W,
    name: &str,
    value: &T,
    first: bool,
) -> serde_json::Result<()> {
    let at_depth_one = Pretty {
        depth: 1,
        has_value: false,
    };
    at_depth_one.line(w, first).map_err(serde_json::Error::io)?;
    serde_json::to_writer(&mut *w, name)?;
    w.write_all(b": ").map_err(serde_json::Error::io)?;
    value.serialize(&mut serde_json::Serializer::with_formatter(
        &mut *w,
        at_depth_one,
    ))
}

/// The `layers` list as the value of a top-level field.
fn write_layers<W: Write>(w: &mut W, layers: &[LayerInfo]) -> io::Result<()> {
    if layers.is_empty() {
        return w.write_all(b"[]");
    }
    let mut out = Vec::with_capacity(200 * layers.len());
    let mut number = itoa::Buffer::new();
    for (i, l) in layers.iter().enumerate() {
        out.extend_from_slice(if i == 0 { b"[\n    {" } else { b",\n    {" });
        out.extend_from_slice(b"\n      \"name\": ");
        string(&mut out, &l.name)?;
        out.extend_from_slice(b",\n      \"op\": ");
        string(&mut out, &l.op)?;
        out.extend_from_slice(b",\n      \"output_shape\": ");
        if l.output_shape.is_empty() {
            out.extend_from_slice(b"[]");
        } else {
            for (j, &d) in l.output_shape.iter().enumerate() {
                out.extend_from_slice(if j == 0 {
                    b"[\n        "
                } else {
                    b",\n        "
                });
                out.extend_from_slice(number.format(d).as_bytes());
            }
            out.extend_from_slice(b"\n      ]");
        }
        out.extend_from_slice(b",\n      \"parameters\": ");
        out.extend_from_slice(number.format(l.parameters).as_bytes());
        out.extend_from_slice(b",\n      \"saved_bytes\": ");
        out.extend_from_slice(number.format(l.saved_bytes).as_bytes());
        out.extend_from_slice(b"\n    }");
    }
    out.extend_from_slice(b"\n  ]");
    w.write_all(&out)
}

/// A JSON string: as it is between quotes when nothing in it needs escaping (module paths and
/// class names), else as serde_json escapes it.
fn string(out: &mut Vec<u8>, s: &str) -> io::Result<()> {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
        Ok(())
    } else {
        serde_json::to_writer(&mut *out, s).map_err(io::Error::from)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use vramscope_core::builder::GraphBuilder;
    use vramscope_core::ir::Task;
    use vramscope_core::ops::{Add, Linear};
    use vramscope_core::sim::{simulate, StepConfig};
    use vramscope_core::DType;

    use crate::json::{EstimateReport, GenerationReport, ReportInput};

    fn both(v: &serde_json::Value) -> (String, String) {
        let mut ours = Vec::new();
        super::to_writer_pretty(&mut ours, v).unwrap();
        (
            String::from_utf8(ours).unwrap(),
            serde_json::to_string_pretty(v).unwrap(),
        )
    }

    #[test]
    fn writes_what_serde_json_writes() {
        let mut deep = json!([1, {"a": []}]);
        for i in 0..40 {
            deep = json!({ format!("level{i}"): [deep, {}, [], "x"] });
        }
        for v in [
            json!(null),
            json!([]),
            json!({}),
            json!([[], {}, [[]], {"a": {}}]),
            json!({"name": "model.layers.0.self_attn", "op": "scaled_dot_product_attention",
                   "output_shape": [1, 4096, 8192], "parameters": 0, "saved_bytes": 149.5,
                   "escaped": "a\"b\\c\n\u{1}é", "flags": [true, false, null]}),
            deep,
        ] {
            let (ours, theirs) = both(&v);
            assert_eq!(ours, theirs);
        }
    }

    /// The report of a small model's training step (two linear layers, a residual add).
    fn small_report() -> EstimateReport {
        let mut b = GraphBuilder::new("small", "Small");
        let x = b.input(vec![4, 16], DType::F32);
        let a = b.layer("lin0", Linear::new(16, 16), &[x]);
        let y = b.module("blk", "Block", &[a], |b| {
            let h = b.layer("lin1", Linear::new(16, 16), &[a]);
            b.op(Add { inplace: false }, &[h, a])
        });
        let y = b.layer("head", Linear::new(16, 4), &[y]);
        let g = b
            .finish(&[y], Task::Classification { num_classes: 4 })
            .expect("graph");
        let step = StepConfig::default();
        let sim = simulate(&g, &step).expect("simulates");
        EstimateReport::new(
            &ReportInput {
                graph: &g,
                source: "zoo",
                batch_size: 4,
                mode: step.mode,
                precision: step.precision,
                optimizer: step.optimizer,
                checkpoint: vec!["blk".into()],
                padded: None,
                gpu: crate::find_gpu("h100").expect("a known GPU"),
                generation: None,
            },
            &sim,
        )
    }

    #[test]
    fn the_report_is_written_as_serde_json_writes_it() {
        let check = |r: &EstimateReport| {
            let mut ours = Vec::new();
            super::report_to_writer_pretty(&mut ours, r).unwrap();
            let theirs = serde_json::to_string_pretty(r).unwrap();
            assert_eq!(String::from_utf8(ours).unwrap(), theirs);
        };
        let mut r = small_report();
        assert!(r.layers.len() >= 4, "{} layers", r.layers.len());
        check(&r);
        // names that need escaping, a layer without an output, a generation
        r.layers[0].name = "a\"b\\c\n\u{1}é".into();
        r.layers[1].op = "tab\there".into();
        r.layers[2].output_shape.clear();
        r.generation = Some(GenerationReport {
            prompt_len: 8,
            new_tokens: 2,
            decode_steps: 1,
            simulated_decode_steps: 1,
            skeleton_decode_steps: 0,
            skeleton_stride: 1,
            kv_cache_bytes: 1024,
            kv_cache_bytes_per_token: 128,
            cross_attention_kv_cache_bytes: Some(64),
            kv_key_dtype: "bfloat16",
            kv_value_dtype: "bfloat16",
        });
        check(&r);
        r.layers.clear();
        r.live_at_peak.clear();
        check(&r);
    }
}
