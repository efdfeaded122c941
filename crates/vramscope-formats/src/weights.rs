//! Weight files as inventories: what every tensor of a checkpoint is (name, dtype, shape, bytes),
//! read from file headers only. The readers are `safetensors` (single files, sharded folders and
//! their index json) and `gguf`; `inspect` picks one by the path given.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// An error reading a weight file's header: always names the file, and for bad contents the field.
#[derive(Debug, thiserror::Error)]
pub enum WeightsError {
    /// The file or folder could not be read.
    #[error("{path}: {cause}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// What the operating system said.
        cause: std::io::Error,
    },
    /// The file was read but its contents are not what the format requires.
    #[error("{path}: {field}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The field (or part of the header) at fault.
        field: String,
        /// What is wrong and what was expected.
        message: String,
    },
    /// The path is neither a weight file nor a folder with one.
    #[error("{path}: {message}")]
    Unsupported {
        /// The path given.
        path: PathBuf,
        /// What was expected.
        message: String,
    },
}

impl WeightsError {
    /// An I/O error on `path`.
    pub(crate) fn io(path: &Path, cause: std::io::Error) -> Self {
        WeightsError::Io {
            path: path.to_path_buf(),
            cause,
        }
    }

    /// Bad contents of `path` in `field`.
    pub(crate) fn invalid(
        path: &Path,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        WeightsError::Invalid {
            path: path.to_path_buf(),
            field: field.into(),
            message: message.into(),
        }
    }
}

/// The file format an inventory was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightFormat {
    /// Hugging Face safetensors (one file or shards).
    Safetensors,
    /// llama.cpp's GGUF.
    Gguf,
}

impl WeightFormat {
    /// The format's name as printed.
    pub fn name(self) -> &'static str {
        match self {
            WeightFormat::Safetensors => "safetensors",
            WeightFormat::Gguf => "gguf",
        }
    }
}

/// One tensor as its file header describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightTensor {
    /// The tensor's name in the file.
    pub name: String,
    /// The stored dtype as the format names it (`BF16`, `F32`, `Q4_K`, ...).
    pub dtype: String,
    /// The shape as the format writes it (safetensors: row-major like PyTorch; GGUF: ggml's
    /// `ne[]`, innermost dimension first).
    pub shape: Vec<u64>,
    /// Number of elements (product of the shape).
    pub elements: u64,
    /// Bytes the tensor's data takes in the file.
    pub bytes: u64,
    /// The file (shard) holding it.
    pub file: PathBuf,
    /// Offset of its data from the start of the file's data section.
    pub offset: u64,
}

/// Every tensor of a checkpoint, in file order (shard by shard).
#[derive(Debug, Clone, PartialEq)]
pub struct WeightInventory {
    /// The format read.
    pub format: WeightFormat,
    /// The files read, in order.
    pub files: Vec<PathBuf>,
    /// The tensors, in file order.
    pub tensors: Vec<WeightTensor>,
    /// Header metadata worth showing (safetensors `__metadata__`, GGUF key/values with arrays
    /// summarised), sorted by key.
    pub metadata: BTreeMap<String, String>,
}

/// Totals of one dtype in an inventory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DtypeTotal {
    /// Number of tensors.
    pub tensors: u64,
    /// Number of elements.
    pub elements: u64,
    /// Bytes of data.
    pub bytes: u64,
}

impl WeightInventory {
    /// Total number of elements: the parameter count of the checkpoint.
    pub fn parameters(&self) -> u64 {
        self.tensors.iter().map(|t| t.elements).sum()
    }

    /// Total bytes of tensor data.
    pub fn bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.bytes).sum()
    }

    /// The bitsandbytes 4-bit layout, if the checkpoint was saved in it: a weight `X` with a
    /// `X.quant_state.bitsandbytes__nf4` (or `__fp4`) entry beside it.
    pub fn bnb_4bit(&self) -> Option<Bnb4bitSummary> {
        const STATE: [&str; 4] = ["absmax", "quant_map", "nested_absmax", "nested_quant_map"];
        let packed: BTreeMap<&str, &str> = self
            .tensors
            .iter()
            .filter_map(|t| {
                let (weight, kind) = t.name.split_once(BNB_QUANT_STATE_MARK)?;
                Some((weight, kind))
            })
            .collect();
        let quant_type = packed.values().next()?.to_string();
        let mut sum = Bnb4bitSummary {
            quant_type,
            ..Bnb4bitSummary::default()
        };
        for t in &self.tensors {
            let state_of = t
                .name
                .rsplit_once('.')
                .filter(|(w, attr)| STATE.contains(attr) && packed.contains_key(w));
            if t.name.contains(BNB_QUANT_STATE_MARK) {
                sum.metadata_bytes += t.bytes;
            } else if packed.contains_key(t.name.as_str()) {
                sum.packed_tensors += 1;
                sum.packed_bytes += t.bytes;
                sum.parameters += 2 * t.elements;
            } else if state_of.is_some() {
                sum.state_tensors += 1;
                sum.state_bytes += t.bytes;
            } else {
                sum.parameters += t.elements;
            }
        }
        Some(sum)
    }

    /// Totals per dtype, sorted by dtype name.
    pub fn by_dtype(&self) -> BTreeMap<String, DtypeTotal> {
        let mut out: BTreeMap<String, DtypeTotal> = BTreeMap::new();
        for t in &self.tensors {
            let e = out.entry(t.dtype.clone()).or_default();
            e.tensors += 1;
            e.elements += t.elements;
            e.bytes += t.bytes;
        }
        out
    }
}

/// What names a saved bitsandbytes `QuantState`'s other fields (JSON bytes read on the CPU):
/// `{weight}.quant_state.bitsandbytes__nf4` (or `__fp4`).
pub const BNB_QUANT_STATE_MARK: &str = ".quant_state.bitsandbytes__";

/// What a checkpoint saved in bitsandbytes 4-bit holds: weights packed two a byte, their
/// quantization state, and the state's other fields as JSON bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Bnb4bitSummary {
    /// `nf4` or `fp4`, from the `quant_state.bitsandbytes__{type}` names.
    pub quant_type: String,
    /// Packed weights (uint8, two 4-bit codes a byte).
    pub packed_tensors: u64,
    /// Their bytes.
    pub packed_bytes: u64,
    /// The tensors of their quantization state (`absmax`, `quant_map`, `nested_absmax`,
    /// `nested_quant_map`), which load onto the device with them.
    pub state_tensors: u64,
    /// Their bytes.
    pub state_bytes: u64,
    /// The `quant_state.bitsandbytes__*` entries: JSON bytes `QuantState.from_dict` reads on the
    /// CPU.
    pub metadata_bytes: u64,
    /// The parameter count as transformers reports a 4-bit model (two per packed byte; the
    /// quantization state is not counted).
    pub parameters: u64,
}

/// Reads the inventory of `path`: a `.safetensors` file, a `*.safetensors.index.json`, a `.gguf`
/// file, or a folder holding `model.safetensors.index.json`, `model.safetensors`, other
/// `*.safetensors` files, or a single `.gguf` file. Only headers are read.
pub fn inspect(path: &Path) -> Result<WeightInventory, WeightsError> {
    let meta = std::fs::metadata(path).map_err(|e| WeightsError::io(path, e))?;
    if meta.is_dir() {
        return inspect_folder(path);
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name.ends_with(".safetensors") {
        crate::safetensors::read_file(path)
    } else if name.ends_with(".json") {
        crate::safetensors::read_index(path)
    } else if name.ends_with(".gguf") {
        crate::gguf::read_file(path)
    } else {
        Err(WeightsError::Unsupported {
            path: path.to_path_buf(),
            message: "not a weight file: expected a .safetensors, .safetensors.index.json or .gguf file, or a folder with one".into(),
        })
    }
}

fn inspect_folder(dir: &Path) -> Result<WeightInventory, WeightsError> {
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        return crate::safetensors::read_index(&index);
    }
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return crate::safetensors::read_file(&single);
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| WeightsError::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    entries.sort();
    let with_suffix = |suffix: &str| -> Vec<PathBuf> {
        entries
            .iter()
            .filter(|p| p.to_string_lossy().ends_with(suffix))
            .cloned()
            .collect()
    };
    let indexes = with_suffix(".safetensors.index.json");
    if indexes.len() == 1 {
        return crate::safetensors::read_index(&indexes[0]);
    }
    let shards = with_suffix(".safetensors");
    if !shards.is_empty() && indexes.is_empty() {
        return crate::safetensors::read_files(&shards);
    }
    let ggufs = with_suffix(".gguf");
    if ggufs.len() == 1 && shards.is_empty() && indexes.is_empty() {
        return crate::gguf::read_file(&ggufs[0]);
    }
    let found = if indexes.len() > 1 || ggufs.len() > 1 {
        "several candidates; name the file to inspect"
    } else {
        "none found"
    };
    Err(WeightsError::Unsupported {
        path: dir.to_path_buf(),
        message: format!(
            "expected model.safetensors.index.json, model.safetensors, *.safetensors or one .gguf file in this folder ({found})"
        ),
    })
}
