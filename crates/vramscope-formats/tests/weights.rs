//! Weight-file readers against real files: the committed fixtures (made by
//! `validation/make_weight_fixtures.py` with the safetensors, transformers and gguf packages, whose
//! own readers' answers are in `fixtures/weights/reference.json`), sparse 100 GB checkpoints that
//! only a header-only reader can inspect quickly, and corrupted bytes that must give errors, never
//! panics or huge allocations.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use vramscope_formats::weights::{inspect, WeightFormat, WeightsError};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/weights")
}

fn reference() -> serde_json::Value {
    let text = std::fs::read_to_string(fixtures().join("reference.json")).expect("reference.json");
    serde_json::from_str(&text).expect("reference json")
}

/// Checks an inventory against the packages' own readers, tensor by tensor.
fn assert_matches_reference(path: &Path, key: &str) {
    let inv = inspect(path).unwrap_or_else(|e| panic!("{e}"));
    let reference = reference();
    let expected = reference[key].as_object().expect("reference entry");
    assert_eq!(inv.tensors.len(), expected.len(), "{key}: tensor count");
    for t in &inv.tensors {
        let e = &expected[&t.name];
        assert_eq!(e[0], t.dtype.as_str(), "{key} {}: dtype", t.name);
        let shape: Vec<u64> = e[1]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        assert_eq!(shape, t.shape, "{key} {}: shape", t.name);
        assert_eq!(e[2].as_u64().unwrap(), t.bytes, "{key} {}: bytes", t.name);
        assert_eq!(
            shape.iter().product::<u64>(),
            t.elements,
            "{key} {}",
            t.name
        );
    }
}

#[test]
fn single_safetensors_file_matches_safe_open() {
    assert_matches_reference(&fixtures().join("tiny.safetensors"), "tiny.safetensors");
}

#[test]
fn sharded_folder_index_and_shards_match_safe_open() {
    let dir = fixtures().join("sharded");
    assert_matches_reference(&dir, "sharded");
    assert_matches_reference(&dir.join("model.safetensors.index.json"), "sharded");
    let inv = inspect(&dir).unwrap();
    assert_eq!(inv.files.len(), 2);
    // the index's total_size is the sum of the tensors' bytes
    assert_eq!(inv.metadata["index.total_size"], inv.bytes().to_string());
}

#[test]
fn gguf_v3_and_v2_match_gguf_reader() {
    assert_matches_reference(&fixtures().join("tiny.gguf"), "tiny.gguf");
    assert_matches_reference(&fixtures().join("tiny-v2.gguf"), "tiny.gguf");
    let inv = inspect(&fixtures().join("tiny-v2.gguf")).unwrap();
    assert_eq!(inv.format, WeightFormat::Gguf);
    assert_eq!(inv.metadata["gguf.version"], "2");
    assert_eq!(inv.metadata["general.architecture"], "llama");
    assert_eq!(inv.metadata["tokenizer.ggml.tokens"], "[string; 4]");
}

/// A temporary path removed on drop.
struct Temp(PathBuf);

impl Temp {
    fn new(name: &str) -> Self {
        let p = std::env::temp_dir().join(format!("vramscope-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        let _ = std::fs::remove_file(&p);
        Temp(p)
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Writes a safetensors header for `n` BF16 tensors of `rows`×`cols` and extends the file to its
/// full size without writing any data (a sparse file).
fn sparse_safetensors(path: &Path, prefix: &str, n: u64, rows: u64, cols: u64) -> u64 {
    let bytes = rows * cols * 2;
    let mut header = serde_json::Map::new();
    for i in 0..n {
        header.insert(
            format!("{prefix}.{i}.weight"),
            serde_json::json!({"dtype": "BF16", "shape": [rows, cols], "data_offsets": [i * bytes, (i + 1) * bytes]}),
        );
    }
    let mut text = serde_json::to_vec(&header).unwrap();
    while !text.len().is_multiple_of(8) {
        text.push(b' ');
    }
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(&(text.len() as u64).to_le_bytes()).unwrap();
    f.write_all(&text).unwrap();
    f.set_len(8 + text.len() as u64 + n * bytes).unwrap();
    n * bytes
}

#[test]
fn a_100_gb_sparse_checkpoint_is_inspected_from_its_header_alone() {
    let tmp = Temp::new("sparse.safetensors");
    // 100 tensors of 1 GiB: 107 GB of (never written) data
    let data = sparse_safetensors(&tmp.0, "layers", 100, 32768, 16384);
    assert!(std::fs::metadata(&tmp.0).unwrap().len() > 100_000_000_000);
    let start = Instant::now();
    let inv = inspect(&tmp.0).unwrap();
    let took = start.elapsed();
    assert_eq!(inv.bytes(), data);
    assert_eq!(inv.parameters(), 100 * 32768 * 16384);
    // reading 100 GB would take minutes; the header is a few KB
    assert!(took < Duration::from_secs(1), "inspect took {took:?}");
}

#[test]
fn a_100_gb_sparse_sharded_folder_is_inspected_from_its_headers_alone() {
    let dir = Temp::new("sparse-sharded");
    std::fs::create_dir_all(&dir.0).unwrap();
    let mut map = serde_json::Map::new();
    let mut total = 0;
    for s in 1..=4u64 {
        let file = format!("model-{s:05}-of-00004.safetensors");
        let prefix = format!("model.layers.{s}");
        total += sparse_safetensors(&dir.0.join(&file), &prefix, 25, 32768, 16384);
        for i in 0..25 {
            map.insert(
                format!("{prefix}.{i}.weight"),
                serde_json::Value::String(file.clone()),
            );
        }
    }
    let index = serde_json::json!({"metadata": {"total_size": total}, "weight_map": map});
    std::fs::write(
        dir.0.join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();
    let start = Instant::now();
    let inv = inspect(&dir.0).unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(inv.files.len(), 4);
    assert_eq!(inv.tensors.len(), 100);
    assert_eq!(inv.bytes(), total);
    assert!(total > 100_000_000_000);
}

/// A sharded folder with a shard missing (a partial download): the index's error, naming the
/// entry that points at it and the shard's path.
#[test]
fn a_missing_shard_is_named_by_the_index() {
    let dir = Temp::new("missing-shard");
    std::fs::create_dir_all(&dir.0).unwrap();
    sparse_safetensors(
        &dir.0.join("model-00001-of-00002.safetensors"),
        "a",
        1,
        4,
        4,
    );
    let index = serde_json::json!({"weight_map": {
        "a.0.weight": "model-00001-of-00002.safetensors",
        "b.0.weight": "model-00002-of-00002.safetensors",
    }});
    let path = dir.0.join("model.safetensors.index.json");
    std::fs::write(&path, index.to_string()).unwrap();
    let e = inspect(&dir.0).unwrap_err().to_string();
    assert!(
        e.starts_with(&path.display().to_string())
            && e.contains("weight_map[\"b.0.weight\"]")
            && e.contains("model-00002-of-00002.safetensors is not there"),
        "{e}"
    );
}

/// GGUF bytes: header with `kv` raw key/value bytes and no tensors.
fn gguf_with_kv(n_kv: u64, kv: &[u8]) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.extend(n_kv.to_le_bytes());
    b.extend(kv);
    b
}

fn gguf_string(s: &str) -> Vec<u8> {
    let mut b = (s.len() as u64).to_le_bytes().to_vec();
    b.extend(s.as_bytes());
    b
}

fn invalid_field(e: WeightsError) -> String {
    match e {
        WeightsError::Invalid { field, .. } => field,
        other => panic!("expected an Invalid error, got {other}"),
    }
}

#[test]
fn gguf_absurd_lengths_are_refused_without_allocating() {
    let tmp = Temp::new("absurd.gguf");
    // an array claiming 2^61 uint64 elements
    let mut kv = gguf_string("tokenizer.ggml.scores");
    kv.extend(9u32.to_le_bytes());
    kv.extend(10u32.to_le_bytes());
    kv.extend((1u64 << 61).to_le_bytes());
    std::fs::write(&tmp.0, gguf_with_kv(1, &kv)).unwrap();
    let e = inspect(&tmp.0).unwrap_err();
    assert!(e.to_string().contains("tokenizer.ggml.scores"), "{e}");
    // a key claiming to be 2^63 bytes long
    let mut kv = (1u64 << 63).to_le_bytes().to_vec();
    kv.extend([0u8; 16]);
    std::fs::write(&tmp.0, gguf_with_kv(1, &kv)).unwrap();
    assert_eq!(
        invalid_field(inspect(&tmp.0).unwrap_err()),
        "metadata key #0"
    );
    // an array of 2^40 strings in a small file
    let mut kv = gguf_string("tokenizer.ggml.tokens");
    kv.extend(9u32.to_le_bytes());
    kv.extend(8u32.to_le_bytes());
    kv.extend((1u64 << 40).to_le_bytes());
    std::fs::write(&tmp.0, gguf_with_kv(1, &kv)).unwrap();
    assert_eq!(
        invalid_field(inspect(&tmp.0).unwrap_err()),
        "metadata `tokenizer.ggml.tokens`"
    );
    // an unknown value type
    let mut kv = gguf_string("general.name");
    kv.extend(13u32.to_le_bytes());
    kv.extend([0u8; 8]);
    std::fs::write(&tmp.0, gguf_with_kv(1, &kv)).unwrap();
    let e = inspect(&tmp.0).unwrap_err().to_string();
    assert!(e.contains("unknown value type 13"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Any truncation or byte corruption of a real file gives an inventory or an error, never a
    /// panic.
    #[test]
    fn corrupted_files_never_panic(
        which in 0usize..2,
        cut in 0usize..4000,
        flips in proptest::collection::vec((0usize..4000, any::<u8>()), 0..4),
    ) {
        let name = ["tiny.safetensors", "tiny.gguf"][which];
        let mut bytes = std::fs::read(fixtures().join(name)).unwrap();
        for (at, v) in flips {
            if !bytes.is_empty() {
                let i = at % bytes.len();
                bytes[i] = v;
            }
        }
        bytes.truncate(cut.min(bytes.len()));
        let tmp = Temp::new(&format!("fuzz-{which}-{}", name));
        std::fs::write(&tmp.0, &bytes).unwrap();
        let _ = inspect(&tmp.0);
    }
}
