//! Pretty-printed JSON as `serde_json::to_writer_pretty` writes it (two spaces an indent level),
//! with a line break and its indentation written at once rather than a write per level: a 70B
//! model's report is 270 KB over some 15,000 lines, and those writes were a quarter of its
//! serialisation.

use std::io::{self, Write};

use serde::Serialize;
use serde_json::ser::Formatter;

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

#[cfg(test)]
mod tests {
    use serde_json::json;

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
}
