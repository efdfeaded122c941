//! The GGUF header reader (llama.cpp's format, versions 2 and 3): the key/value metadata (every
//! value type parsed or skipped; arrays summarised, never collected) and the tensor infos (name,
//! dims, ggml type, offset), with every tensor's byte size from ggml's block sizes. Reads are
//! bounded by the file's size, so absurd counts or lengths give an error, never a huge allocation;
//! the tensor data is never read.

use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use crate::weights::{WeightFormat, WeightInventory, WeightTensor, WeightsError};

/// A ggml tensor type: its name, elements per block and bytes per block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GgmlType {
    /// The type's name as ggml prints it (`Q4_K`).
    pub name: &'static str,
    /// Elements per block.
    pub block_size: u64,
    /// Bytes per block.
    pub type_size: u64,
}

/// The ggml types a GGUF file may hold, by id (ggml.h `enum ggml_type`), with block and type sizes
/// from ggml.c's `type_traits` (`blck_size`, `sizeof(block_…)`). Ids 4, 5, 31–33 and 36–38 were
/// removed from ggml and are refused.
pub fn ggml_type(id: u32) -> Option<GgmlType> {
    let (name, block_size, type_size) = match id {
        0 => ("F32", 1, 4),
        1 => ("F16", 1, 2),
        2 => ("Q4_0", 32, 18),
        3 => ("Q4_1", 32, 20),
        6 => ("Q5_0", 32, 22),
        7 => ("Q5_1", 32, 24),
        8 => ("Q8_0", 32, 34),
        9 => ("Q8_1", 32, 36),
        10 => ("Q2_K", 256, 84),
        11 => ("Q3_K", 256, 110),
        12 => ("Q4_K", 256, 144),
        13 => ("Q5_K", 256, 176),
        14 => ("Q6_K", 256, 210),
        15 => ("Q8_K", 256, 292),
        16 => ("IQ2_XXS", 256, 66),
        17 => ("IQ2_XS", 256, 74),
        18 => ("IQ3_XXS", 256, 98),
        19 => ("IQ1_S", 256, 50),
        20 => ("IQ4_NL", 32, 18),
        21 => ("IQ3_S", 256, 110),
        22 => ("IQ2_S", 256, 82),
        23 => ("IQ4_XS", 256, 136),
        24 => ("I8", 1, 1),
        25 => ("I16", 1, 2),
        26 => ("I32", 1, 4),
        27 => ("I64", 1, 8),
        28 => ("F64", 1, 8),
        29 => ("IQ1_M", 256, 56),
        30 => ("BF16", 1, 2),
        34 => ("TQ1_0", 256, 54),
        35 => ("TQ2_0", 256, 66),
        39 => ("MXFP4", 32, 17),
        40 => ("NVFP4", 64, 36),
        41 => ("Q1_0", 128, 18),
        _ => return None,
    };
    Some(GgmlType {
        name,
        block_size,
        type_size,
    })
}

/// Whether the ggml type named `name` stores blocks of several elements (a quantized type, not
/// F32 / F16 / BF16 or an integer type).
pub fn is_block_type(name: &str) -> bool {
    (0..=41)
        .filter_map(ggml_type)
        .any(|t| t.name == name && t.block_size > 1)
}

const MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's GGML_MAX_DIMS.
const MAX_DIMS: u32 = 4;
/// Deepest nesting of arrays accepted in metadata values.
const MAX_ARRAY_DEPTH: u32 = 4;
/// Longest metadata string kept verbatim in the inventory (longer ones are summarised).
const MAX_SHOWN_STRING: usize = 80;

/// Bounded little-endian reads over the file, tracking the position.
struct Reader<'a> {
    r: BufReader<File>,
    pos: u64,
    len: u64,
    path: &'a Path,
}

impl Reader<'_> {
    fn need(&self, n: u64, what: &str) -> Result<(), WeightsError> {
        if n > self.len - self.pos {
            return Err(WeightsError::invalid(
                self.path,
                what,
                format!(
                    "needs {n} bytes at offset {} but the file ends at {}: truncated or corrupt file",
                    self.pos, self.len
                ),
            ));
        }
        Ok(())
    }

    fn bytes(&mut self, n: u64, what: &str) -> Result<Vec<u8>, WeightsError> {
        self.need(n, what)?;
        let mut buf = vec![0u8; n as usize];
        self.r
            .read_exact(&mut buf)
            .map_err(|e| WeightsError::io(self.path, e))?;
        self.pos += n;
        Ok(buf)
    }

    fn skip(&mut self, n: u64, what: &str) -> Result<(), WeightsError> {
        self.need(n, what)?;
        let n_i64 = i64::try_from(n)
            .map_err(|_| WeightsError::invalid(self.path, what, "length too large"))?;
        self.r
            .seek_relative(n_i64)
            .map_err(|e| WeightsError::io(self.path, e))?;
        self.pos += n;
        Ok(())
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], WeightsError> {
        self.need(N as u64, what)?;
        let mut buf = [0u8; N];
        self.r
            .read_exact(&mut buf)
            .map_err(|e| WeightsError::io(self.path, e))?;
        self.pos += N as u64;
        Ok(buf)
    }

    fn u32(&mut self, what: &str) -> Result<u32, WeightsError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64, WeightsError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &str) -> Result<String, WeightsError> {
        let n = self.u64(what)?;
        let buf = self.bytes(n, what)?;
        String::from_utf8(buf).map_err(|e| {
            WeightsError::invalid(
                self.path,
                what,
                format!(
                    "not UTF-8 (invalid byte at {})",
                    e.utf8_error().valid_up_to()
                ),
            )
        })
    }

    /// Skips a string, returning its length.
    fn skip_string(&mut self, what: &str) -> Result<u64, WeightsError> {
        let n = self.u64(what)?;
        self.skip(n, what)?;
        Ok(n)
    }

    /// Reads (scalars, short strings) or skips (arrays, long strings) one metadata value and
    /// returns it as shown in the inventory.
    fn value(&mut self, ty: u32, what: &str, depth: u32) -> Result<String, WeightsError> {
        Ok(match ty {
            0 => self.array::<1>(what)?[0].to_string(),
            1 => (self.array::<1>(what)?[0] as i8).to_string(),
            2 => u16::from_le_bytes(self.array(what)?).to_string(),
            3 => i16::from_le_bytes(self.array(what)?).to_string(),
            4 => self.u32(what)?.to_string(),
            5 => i32::from_le_bytes(self.array(what)?).to_string(),
            6 => f32::from_le_bytes(self.array(what)?).to_string(),
            7 => match self.array::<1>(what)?[0] {
                0 => "false".into(),
                1 => "true".into(),
                b => {
                    return Err(WeightsError::invalid(
                        self.path,
                        what,
                        format!("bool value {b}, expected 0 or 1"),
                    ))
                }
            },
            8 => {
                let n = self.u64(what)?;
                if n as usize > MAX_SHOWN_STRING {
                    self.skip(n, what)?;
                    format!("<string of {n} bytes>")
                } else {
                    let buf = self.bytes(n, what)?;
                    String::from_utf8(buf).map_err(|_| {
                        WeightsError::invalid(self.path, what, "string is not UTF-8")
                    })?
                }
            }
            9 => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(WeightsError::invalid(
                        self.path,
                        what,
                        format!("arrays nested deeper than {MAX_ARRAY_DEPTH}"),
                    ));
                }
                let elem = self.u32(what)?;
                let count = self.u64(what)?;
                let elem_name = value_type_name(elem)
                    .ok_or_else(|| unknown_value_type(self.path, what, elem))?;
                match value_type_size(elem) {
                    Some(size) => {
                        let total = count.checked_mul(size).ok_or_else(|| {
                            WeightsError::invalid(
                                self.path,
                                what,
                                format!("array of {count} elements is too large"),
                            )
                        })?;
                        self.skip(total, what)?;
                    }
                    None => {
                        // strings and nested arrays: each element takes at least 8 bytes
                        self.need(count.saturating_mul(8), what)?;
                        for _ in 0..count {
                            if elem == 8 {
                                self.skip_string(what)?;
                            } else {
                                self.value(elem, what, depth + 1)?;
                            }
                        }
                    }
                }
                format!("[{elem_name}; {count}]")
            }
            10 => self.u64(what)?.to_string(),
            11 => i64::from_le_bytes(self.array(what)?).to_string(),
            12 => f64::from_le_bytes(self.array(what)?).to_string(),
            other => return Err(unknown_value_type(self.path, what, other)),
        })
    }
}

fn value_type_size(ty: u32) -> Option<u64> {
    match ty {
        0 | 1 | 7 => Some(1),
        2 | 3 => Some(2),
        4..=6 => Some(4),
        10..=12 => Some(8),
        _ => None,
    }
}

fn value_type_name(ty: u32) -> Option<&'static str> {
    const NAMES: [&str; 13] = [
        "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string",
        "array", "uint64", "int64", "float64",
    ];
    NAMES.get(ty as usize).copied()
}

fn unknown_value_type(path: &Path, what: &str, ty: u32) -> WeightsError {
    WeightsError::invalid(
        path,
        what,
        format!("unknown value type {ty}, expected 0..=12"),
    )
}

/// Reads the header of a `.gguf` file.
pub fn read_file(path: &Path) -> Result<WeightInventory, WeightsError> {
    let file = File::open(path).map_err(|e| WeightsError::io(path, e))?;
    let len = file
        .metadata()
        .map_err(|e| WeightsError::io(path, e))?
        .len();
    let mut r = Reader {
        r: BufReader::new(file),
        pos: 0,
        len,
        path,
    };
    let magic: [u8; 4] = r.array("magic")?;
    if &magic != MAGIC {
        return Err(WeightsError::invalid(
            path,
            "magic",
            format!("{magic:02x?} is not `GGUF`: not a GGUF file"),
        ));
    }
    let version = r.u32("version")?;
    if version != 2 && version != 3 {
        let hint = if version.swap_bytes() == 2 || version.swap_bytes() == 3 {
            " (a big-endian file, which is not supported)"
        } else if version == 1 {
            " (GGUF v1 is obsolete)"
        } else {
            ""
        };
        return Err(WeightsError::invalid(
            path,
            "version",
            format!("{version}, expected 2 or 3{hint}"),
        ));
    }
    let n_tensors = r.u64("tensor_count")?;
    let n_kv = r.u64("metadata_kv_count")?;
    // every key/value takes at least 13 bytes and every tensor info at least 24
    if n_kv.checked_mul(13).is_none_or(|b| b > len - r.pos) {
        return Err(WeightsError::invalid(
            path,
            "metadata_kv_count",
            format!("{n_kv} cannot fit in a file of {len} bytes"),
        ));
    }
    if n_tensors.checked_mul(24).is_none_or(|b| b > len - r.pos) {
        return Err(WeightsError::invalid(
            path,
            "tensor_count",
            format!("{n_tensors} cannot fit in a file of {len} bytes"),
        ));
    }
    let mut metadata = BTreeMap::new();
    metadata.insert("gguf.version".to_string(), version.to_string());
    let mut alignment = DEFAULT_ALIGNMENT;
    for i in 0..n_kv {
        let key = r.string(&format!("metadata key #{i}"))?;
        let what = format!("metadata `{key}`");
        let ty = r.u32(&what)?;
        if key == "general.alignment" {
            if ty != 4 {
                return Err(WeightsError::invalid(
                    path,
                    what,
                    format!("value type {ty}, expected uint32 (4)"),
                ));
            }
            let a = r.u32(&what)?;
            if a == 0 || !a.is_power_of_two() {
                return Err(WeightsError::invalid(
                    path,
                    what,
                    format!("{a} is not a power of two"),
                ));
            }
            alignment = u64::from(a);
            metadata.insert(key, a.to_string());
            continue;
        }
        let v = r.value(ty, &what, 0)?;
        if metadata.insert(key.clone(), v).is_some() {
            return Err(WeightsError::invalid(path, what, "duplicate key"));
        }
    }
    let mut infos = Vec::with_capacity(n_tensors.min(1 << 16) as usize);
    let mut names = HashSet::new();
    for i in 0..n_tensors {
        let name = r.string(&format!("tensor info #{i} name"))?;
        let what = format!("tensor `{name}`");
        let n_dims = r.u32(&format!("{what} n_dims"))?;
        if n_dims > MAX_DIMS {
            return Err(WeightsError::invalid(
                path,
                format!("{what} n_dims"),
                format!("{n_dims}, at most {MAX_DIMS}"),
            ));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(r.u64(&format!("{what} dims"))?);
        }
        let ty_id = r.u32(&format!("{what} type"))?;
        let ty = ggml_type(ty_id).ok_or_else(|| {
            WeightsError::invalid(
                path,
                format!("{what} type"),
                format!("unknown ggml type {ty_id} (known: 0-3, 6-30, 34, 35, 39-41)"),
            )
        })?;
        let offset = r.u64(&format!("{what} offset"))?;
        if !names.insert(name.clone()) {
            return Err(WeightsError::invalid(path, what, "duplicate tensor name"));
        }
        infos.push((name, dims, ty, offset));
    }
    let data_start = r.pos.div_ceil(alignment) * alignment;
    if data_start > len {
        return Err(WeightsError::invalid(
            path,
            "tensor data",
            format!("starts at {data_start} but the file ends at {len}: truncated file"),
        ));
    }
    let data_len = len - data_start;
    let mut tensors = Vec::with_capacity(infos.len());
    for (name, dims, ty, offset) in infos {
        let what = format!("tensor `{name}`");
        let elements = dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d).filter(|&n| n < 1 << 62))
            .ok_or_else(|| {
                WeightsError::invalid(
                    path,
                    format!("{what} dims"),
                    format!("{dims:?} is too large"),
                )
            })?;
        let ne0 = dims.first().copied().unwrap_or(1);
        if ne0 % ty.block_size != 0 {
            return Err(WeightsError::invalid(
                path,
                format!("{what} dims"),
                format!(
                    "first dimension {ne0} is not a multiple of the {} block size {}",
                    ty.name, ty.block_size
                ),
            ));
        }
        let bytes = (elements / ty.block_size)
            .checked_mul(ty.type_size)
            .ok_or_else(|| {
                WeightsError::invalid(
                    path,
                    format!("{what} dims"),
                    format!("{dims:?} is too large"),
                )
            })?;
        if offset % alignment != 0 {
            return Err(WeightsError::invalid(
                path,
                format!("{what} offset"),
                format!("{offset} is not a multiple of the alignment {alignment}"),
            ));
        }
        if offset.checked_add(bytes).is_none_or(|end| end > data_len) {
            return Err(WeightsError::invalid(
                path,
                format!("{what} offset"),
                format!("data [{offset}, {offset} + {bytes}) runs past the end of the file ({data_len} bytes of data): truncated file?"),
            ));
        }
        tensors.push(WeightTensor {
            name,
            dtype: ty.name.to_string(),
            shape: dims,
            elements,
            bytes,
            file: path.to_path_buf(),
            offset,
        });
    }
    check_overlaps(path, &tensors)?;
    Ok(WeightInventory {
        format: WeightFormat::Gguf,
        files: vec![path.to_path_buf()],
        tensors,
        metadata,
    })
}

fn check_overlaps(path: &Path, tensors: &[WeightTensor]) -> Result<(), WeightsError> {
    let mut order: Vec<&WeightTensor> = tensors.iter().collect();
    order.sort_by_key(|t| (t.offset, t.bytes));
    for pair in order.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if b.offset < a.offset + a.bytes {
            return Err(WeightsError::invalid(
                path,
                format!("tensor `{}` offset", b.name),
                format!(
                    "{} lies inside tensor `{}` ([{}, {})): overlapping data",
                    b.offset,
                    a.name,
                    a.offset,
                    a.offset + a.bytes
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantised_types_take_the_bits_per_weight_ggml_states() {
        // bits per weight from ggml's comments on each block type
        let bpw = |id| {
            let t = ggml_type(id).unwrap();
            t.type_size as f64 * 8.0 / t.block_size as f64
        };
        assert_eq!(bpw(2), 4.5); // Q4_0
        assert_eq!(bpw(8), 8.5); // Q8_0
        assert_eq!(bpw(10), 2.625); // Q2_K
        assert_eq!(bpw(12), 4.5); // Q4_K
        assert_eq!(bpw(14), 6.5625); // Q6_K
        assert_eq!(bpw(16), 2.0625); // IQ2_XXS
        assert_eq!(bpw(19), 1.5625); // IQ1_S
        assert_eq!(bpw(23), 4.25); // IQ4_XS
        assert_eq!(bpw(34), 1.6875); // TQ1_0
        assert_eq!(bpw(35), 2.0625); // TQ2_0
        assert!(ggml_type(4).is_none() && ggml_type(31).is_none() && ggml_type(42).is_none());
    }
}
