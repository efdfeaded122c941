//! The safetensors header reader: the 8-byte little-endian header length and the JSON header after
//! it, read with two bounded reads (never the tensor data), validated as strictly as the
//! `safetensors` library does (dtype, shape and byte span agree; offsets start at 0, are
//! contiguous, do not overlap and end exactly at the end of the file). Also sharded checkpoints:
//! a `*.safetensors.index.json` and the shards its `weight_map` names.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::weights::{WeightFormat, WeightInventory, WeightTensor, WeightsError};

/// Largest header accepted, in bytes (the `safetensors` library's limit).
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

/// Bits per element of each safetensors dtype, or `None` for a name the format does not have.
pub fn dtype_bits(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "F4" => 4,
        "F6_E2M3" | "F6_E3M2" => 6,
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" | "F8_E8M0" => 8,
        "I16" | "U16" | "F16" | "BF16" => 16,
        "I32" | "U32" | "F32" => 32,
        "I64" | "U64" | "F64" | "C64" => 64,
        _ => return None,
    })
}

const DTYPES: &str =
    "BOOL, F4, F6_E2M3, F6_E3M2, U8, I8, F8_E5M2, F8_E4M3, F8_E8M0, I16, U16, F16, BF16, I32, U32, F32, C64, F64, I64, U64";

/// Reads the header of one `.safetensors` file.
pub fn read_file(path: &Path) -> Result<WeightInventory, WeightsError> {
    read_files(&[path.to_path_buf()])
}

/// Reads the headers of several `.safetensors` files (shards of one checkpoint, in order).
pub fn read_files(paths: &[PathBuf]) -> Result<WeightInventory, WeightsError> {
    let mut inv = WeightInventory {
        format: WeightFormat::Safetensors,
        files: Vec::new(),
        tensors: Vec::new(),
        metadata: BTreeMap::new(),
    };
    let mut seen: HashMap<String, PathBuf> = HashMap::new();
    for path in paths {
        let (tensors, metadata) = read_header(path)?;
        for t in &tensors {
            if let Some(other) = seen.insert(t.name.clone(), path.clone()) {
                return Err(WeightsError::invalid(
                    path,
                    format!("tensor `{}`", t.name),
                    format!(
                        "also in {}; a tensor name must be unique across shards",
                        other.display()
                    ),
                ));
            }
        }
        inv.tensors.extend(tensors);
        inv.metadata.extend(metadata);
        inv.files.push(path.clone());
    }
    Ok(inv)
}

/// Reads a `*.safetensors.index.json` and the header of every shard its `weight_map` names
/// (relative to the index's folder); every tensor the map names must be in its shard.
pub fn read_index(path: &Path) -> Result<WeightInventory, WeightsError> {
    let text = std::fs::read_to_string(path).map_err(|e| WeightsError::io(path, e))?;
    let root: Value = serde_json::from_str(&text)
        .map_err(|e| WeightsError::invalid(path, "index", format!("invalid JSON: {e}")))?;
    let map = root
        .get("weight_map")
        .and_then(Value::as_object)
        .ok_or_else(|| {
            WeightsError::invalid(
                path,
                "weight_map",
                "missing or not an object of tensor name -> shard file",
            )
        })?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut shards: BTreeSet<String> = BTreeSet::new();
    for (name, file) in map {
        let file = file.as_str().ok_or_else(|| {
            WeightsError::invalid(
                path,
                format!("weight_map[\"{name}\"]"),
                "expected a shard file name (string)",
            )
        })?;
        if file.is_empty()
            || Path::new(file).is_absolute()
            || file.split(['/', '\\']).any(|c| c == "..")
        {
            return Err(WeightsError::invalid(
                path,
                format!("weight_map[\"{name}\"]"),
                format!("`{file}` is not a file name inside the index's folder"),
            ));
        }
        shards.insert(file.to_string());
    }
    if shards.is_empty() {
        return Err(WeightsError::invalid(path, "weight_map", "names no shard"));
    }
    let files: Vec<PathBuf> = shards.iter().map(|s| dir.join(s)).collect();
    // a shard the map names but the folder lacks (a partial download) is the index's error
    if let Some(missing) = files.iter().find(|f| !f.exists()) {
        let first = map
            .iter()
            .find(|(_, file)| dir.join(file.as_str().unwrap_or_default()) == *missing)
            .map_or("", |(name, _)| name.as_str());
        return Err(WeightsError::invalid(
            path,
            format!("weight_map[\"{first}\"]"),
            format!(
                "shard {} is not there (a partial download?)",
                missing.display()
            ),
        ));
    }
    let mut inv = read_files(&files)?;
    let held: HashMap<&str, &Path> = inv
        .tensors
        .iter()
        .map(|t| (t.name.as_str(), t.file.as_path()))
        .collect();
    for (name, file) in map {
        let shard = dir.join(file.as_str().unwrap_or_default());
        if held.get(name.as_str()) != Some(&shard.as_path()) {
            return Err(WeightsError::invalid(
                path,
                format!("weight_map[\"{name}\"]"),
                format!("shard {} has no tensor of that name", shard.display()),
            ));
        }
    }
    if let Some(total) = root.pointer("/metadata/total_size") {
        inv.metadata
            .insert("index.total_size".into(), total.to_string());
    }
    Ok(inv)
}

type Header = (Vec<WeightTensor>, BTreeMap<String, String>);

/// Reads and validates the header of one file: 8 + n bytes, nothing more.
fn read_header(path: &Path) -> Result<Header, WeightsError> {
    let mut file = File::open(path).map_err(|e| WeightsError::io(path, e))?;
    let file_len = file
        .metadata()
        .map_err(|e| WeightsError::io(path, e))?
        .len();
    const LEN_FIELD: &str = "header length (first 8 bytes)";
    if file_len < 8 {
        return Err(WeightsError::invalid(
            path,
            LEN_FIELD,
            format!("file is {file_len} bytes, too short for the 8-byte header length"),
        ));
    }
    let mut len_bytes = [0u8; 8];
    file.read_exact(&mut len_bytes)
        .map_err(|e| WeightsError::io(path, e))?;
    let n = u64::from_le_bytes(len_bytes);
    if n > MAX_HEADER_BYTES {
        return Err(WeightsError::invalid(
            path,
            LEN_FIELD,
            format!("{n} bytes exceeds the limit of {MAX_HEADER_BYTES} bytes"),
        ));
    }
    if n > file_len - 8 {
        return Err(WeightsError::invalid(
            path,
            LEN_FIELD,
            format!("{n} bytes runs past the end of the file ({file_len} bytes): truncated file?"),
        ));
    }
    let mut buf = vec![0u8; n as usize];
    file.read_exact(&mut buf)
        .map_err(|e| WeightsError::io(path, e))?;
    let text = std::str::from_utf8(&buf).map_err(|e| {
        WeightsError::invalid(
            path,
            "header",
            format!("not UTF-8 (invalid byte at {})", e.valid_up_to()),
        )
    })?;
    let root: Value = serde_json::from_str(text)
        .map_err(|e| WeightsError::invalid(path, "header", format!("invalid JSON: {e}")))?;
    let obj = root.as_object().ok_or_else(|| {
        WeightsError::invalid(
            path,
            "header",
            "expected a JSON object of tensor name -> info",
        )
    })?;
    let mut metadata = BTreeMap::new();
    let mut tensors = Vec::with_capacity(obj.len());
    for (name, info) in obj {
        if name == "__metadata__" {
            let m = info.as_object().ok_or_else(|| {
                WeightsError::invalid(path, "__metadata__", "expected an object of string values")
            })?;
            for (k, v) in m {
                let v = v.as_str().ok_or_else(|| {
                    WeightsError::invalid(path, format!("__metadata__.{k}"), "expected a string")
                })?;
                metadata.insert(k.clone(), v.to_string());
            }
            continue;
        }
        tensors.push(parse_tensor(path, name, info)?);
    }
    check_offsets(path, &mut tensors, file_len - 8 - n)?;
    Ok((tensors, metadata))
}

fn parse_tensor(path: &Path, name: &str, info: &Value) -> Result<WeightTensor, WeightsError> {
    let field = |f: &str| format!("tensor `{name}` {f}");
    let info = info.as_object().ok_or_else(|| {
        WeightsError::invalid(
            path,
            field("info"),
            "expected an object with dtype, shape, data_offsets",
        )
    })?;
    let dtype = info
        .get("dtype")
        .and_then(Value::as_str)
        .ok_or_else(|| WeightsError::invalid(path, field("dtype"), "missing or not a string"))?;
    let bits = dtype_bits(dtype).ok_or_else(|| {
        WeightsError::invalid(
            path,
            field("dtype"),
            format!("unknown dtype `{dtype}`; expected one of {DTYPES}"),
        )
    })?;
    let shape_v = info
        .get("shape")
        .and_then(Value::as_array)
        .ok_or_else(|| WeightsError::invalid(path, field("shape"), "missing or not an array"))?;
    let mut shape = Vec::with_capacity(shape_v.len());
    for d in shape_v {
        shape.push(d.as_u64().ok_or_else(|| {
            WeightsError::invalid(
                path,
                field("shape"),
                format!("dimension {d} is not a non-negative integer"),
            )
        })?);
    }
    let elements = shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| {
            WeightsError::invalid(
                path,
                field("shape"),
                format!("{shape:?} has more than 2^64 elements"),
            )
        })?;
    let bits_total = elements.checked_mul(bits).ok_or_else(|| {
        WeightsError::invalid(path, field("shape"), format!("{shape:?} is too large"))
    })?;
    if bits_total % 8 != 0 {
        return Err(WeightsError::invalid(
            path,
            field("shape"),
            format!("{elements} elements of {dtype} do not fill whole bytes"),
        ));
    }
    let bytes = bits_total / 8;
    let offsets = info.get("data_offsets").and_then(Value::as_array);
    let (begin, end) = match offsets.map(|o| o.as_slice()) {
        Some([b, e]) => match (b.as_u64(), e.as_u64()) {
            (Some(b), Some(e)) => (b, e),
            _ => (u64::MAX, 0),
        },
        _ => (u64::MAX, 0),
    };
    if begin > end {
        return Err(WeightsError::invalid(
            path,
            field("data_offsets"),
            "expected [begin, end], two non-negative integers with begin <= end",
        ));
    }
    if end - begin != bytes {
        return Err(WeightsError::invalid(
            path,
            field("data_offsets"),
            format!(
                "[{begin}, {end}] spans {} bytes but {dtype} {shape:?} needs {bytes}",
                end - begin
            ),
        ));
    }
    Ok(WeightTensor {
        name: name.to_string(),
        dtype: dtype.to_string(),
        shape,
        elements,
        bytes,
        file: path.to_path_buf(),
        offset: begin,
    })
}

/// Sorts the tensors by offset and checks they tile the data section exactly.
fn check_offsets(
    path: &Path,
    tensors: &mut [WeightTensor],
    data_len: u64,
) -> Result<(), WeightsError> {
    tensors.sort_by(|a, b| (a.offset, a.bytes, &a.name).cmp(&(b.offset, b.bytes, &b.name)));
    let mut end = 0u64;
    let mut prev: Option<&str> = None;
    for t in tensors.iter() {
        let field = format!("tensor `{}` data_offsets", t.name);
        let t_end = t.offset + t.bytes;
        if t_end > data_len {
            return Err(WeightsError::invalid(
                path,
                field,
                format!("[{}, {t_end}] runs past the end of the data ({data_len} bytes after the header): truncated file or bad offsets", t.offset),
            ));
        }
        if t.offset < end {
            let after = prev.unwrap_or_default();
            return Err(WeightsError::invalid(
                path,
                field,
                format!(
                    "begins at {} inside tensor `{after}` (which ends at {end}): overlapping data",
                    t.offset
                ),
            ));
        }
        if t.offset > end {
            let after = prev
                .map(|p| format!("after tensor `{p}`"))
                .unwrap_or_else(|| "at the start of the data".into());
            return Err(WeightsError::invalid(
                path,
                field,
                format!(
                    "begins at {}, leaving a gap of {} bytes {after}",
                    t.offset,
                    t.offset - end
                ),
            ));
        }
        end = t_end;
        prev = Some(&t.name);
    }
    if end != data_len {
        return Err(WeightsError::invalid(
            path,
            "data_offsets",
            format!("tensors cover {end} bytes but the file has {data_len} bytes of data after the header"),
        ));
    }
    Ok(())
}
