//! The built-in zoo: torchvision classification models with their exact architectures, parameter
//! counts and `named_modules()` paths, built for a given batch size, image size and class count.

use vramscope_core::ir::Task;
use vramscope_core::{BuildError, DType, Graph, GraphBuilder, TensorId};

mod common;
mod resnet;
// CNN models (vgg, alexnet, squeezenet, densenet, mobilenet, shufflenet): modules below
// efficientnet, convnext, regnet, vit, swin: modules below

pub use common::*;

/// What the zoo model is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZooInput {
    /// Batch size.
    pub batch: u64,
    /// Channels of the input image.
    pub channels: u64,
    /// Image height.
    pub height: u64,
    /// Image width.
    pub width: u64,
    /// Number of classes of the classifier head.
    pub num_classes: u64,
}

impl ZooInput {
    /// `batch` images of 3×224×224 and 1000 classes (torchvision's defaults).
    pub fn imagenet(batch: u64) -> Self {
        ZooInput {
            batch,
            channels: 3,
            height: 224,
            width: 224,
            num_classes: 1000,
        }
    }
}

/// An error from the zoo.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ZooError {
    /// The name is not in the zoo.
    #[error("unknown model `{name}`{hint}; the zoo has: {available}")]
    UnknownModel {
        /// The name asked for.
        name: String,
        /// " (did you mean `x`?)" or empty.
        hint: String,
        /// All names.
        available: String,
    },
    /// The model cannot take this input (e.g. an image too small).
    #[error("{model}: {source}")]
    Build {
        /// The model.
        model: String,
        /// The failing module and shape rule.
        source: BuildError,
    },
    /// The input itself is unusable.
    #[error("{model}: {message}")]
    BadInput {
        /// The model.
        model: String,
        /// What is wrong.
        message: String,
    },
}

type Builder = fn(&mut GraphBuilder, TensorId, &ZooInput) -> TensorId;

struct Entry {
    name: &'static str,
    root_type: &'static str,
    build: Builder,
}

macro_rules! entries {
    ($($name:literal => $root:literal, $f:expr;)*) => {
        &[$(Entry { name: $name, root_type: $root, build: $f },)*]
    };
}

static ZOO: &[Entry] = entries! {
    "resnet18" => "ResNet", |b, x, i| resnet::resnet(b, x, i, resnet::Depth::R18);
    "resnet34" => "ResNet", |b, x, i| resnet::resnet(b, x, i, resnet::Depth::R34);
    "resnet50" => "ResNet", |b, x, i| resnet::resnet(b, x, i, resnet::Depth::R50);
    "resnet101" => "ResNet", |b, x, i| resnet::resnet(b, x, i, resnet::Depth::R101);
    "resnet152" => "ResNet", |b, x, i| resnet::resnet(b, x, i, resnet::Depth::R152);
    "wide_resnet50_2" => "ResNet", |b, x, i| resnet::resnet(b, x, i, resnet::Depth::Wide50_2);
    "wide_resnet101_2" => "ResNet", |b, x, i| resnet::resnet(b, x, i, resnet::Depth::Wide101_2);
    "resnext50_32x4d" => "ResNet", |b, x, i| resnet::resnet(b, x, i, resnet::Depth::Next50_32x4d);
    "resnext101_32x8d" => "ResNet", |b, x, i| resnet::resnet(b, x, i, resnet::Depth::Next101_32x8d);
    // CNN entries (vgg, alexnet, squeezenet, densenet, mobilenet, shufflenet)
    // efficientnet, convnext, regnet, vit, swin entries
};

/// All model names of the zoo, in a stable order.
pub fn names() -> Vec<&'static str> {
    ZOO.iter().map(|e| e.name).collect()
}

/// Builds zoo model `name` for `input`.
pub fn build(name: &str, input: &ZooInput) -> Result<Graph, ZooError> {
    let key = name.to_ascii_lowercase().replace('-', "_");
    let entry = ZOO.iter().find(|e| e.name == key).ok_or_else(|| {
        let hint = ZOO
            .iter()
            .map(|e| (edit_distance(&key, e.name), e.name))
            .min()
            .filter(|(d, _)| *d <= 3)
            .map(|(_, n)| format!(" (did you mean `{n}`?)"))
            .unwrap_or_default();
        ZooError::UnknownModel {
            name: name.to_string(),
            hint,
            available: names().join(", "),
        }
    })?;
    if input.batch == 0
        || input.height == 0
        || input.width == 0
        || input.channels == 0
        || input.num_classes == 0
    {
        return Err(ZooError::BadInput {
            model: entry.name.to_string(),
            message: format!(
                "batch size, input {}x{}x{} and class count must all be positive",
                input.channels, input.height, input.width
            ),
        });
    }
    let mut b = GraphBuilder::new(entry.name, entry.root_type);
    let x = b.input(
        vec![input.batch, input.channels, input.height, input.width],
        DType::F32,
    );
    let out = (entry.build)(&mut b, x, input);
    b.finish(
        &[out],
        Task::Classification {
            num_classes: input.num_classes,
        },
    )
    .map_err(|source| ZooError::Build {
        model: entry.name.to_string(),
        source,
    })
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let v = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
            cur.push(v);
        }
        prev = cur;
    }
    prev[b.len()]
}
