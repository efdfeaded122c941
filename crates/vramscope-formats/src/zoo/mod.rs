//! The built-in zoo: torchvision classification models with their exact architectures, parameter
//! counts and `named_modules()` paths, built for a given batch size, image size and class count.

use crate::names;
use vramscope_core::ir::Task;
use vramscope_core::{BuildError, DType, Graph, GraphBuilder, TensorId};

mod common;
mod resnet;
// CNN models (vgg, alexnet, squeezenet, densenet, mobilenet, shufflenet): modules below
mod alexnet;
mod densenet;
mod mobilenet;
mod shufflenet;
mod squeezenet;
mod vgg;
// efficientnet, convnext, regnet, vit, swin: modules below
mod convnext;
mod efficientnet;
mod regnet;
mod swin;
pub(crate) mod vit;

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
    #[error("{model}: {cause}")]
    Build {
        /// The model.
        model: String,
        /// The failing module and shape rule.
        cause: BuildError,
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
    "vgg11" => "VGG", |b, x, i| vgg::vgg(b, x, i, vgg::Config::A, false);
    "vgg13" => "VGG", |b, x, i| vgg::vgg(b, x, i, vgg::Config::B, false);
    "vgg16" => "VGG", |b, x, i| vgg::vgg(b, x, i, vgg::Config::D, false);
    "vgg19" => "VGG", |b, x, i| vgg::vgg(b, x, i, vgg::Config::E, false);
    "vgg11_bn" => "VGG", |b, x, i| vgg::vgg(b, x, i, vgg::Config::A, true);
    "vgg13_bn" => "VGG", |b, x, i| vgg::vgg(b, x, i, vgg::Config::B, true);
    "vgg16_bn" => "VGG", |b, x, i| vgg::vgg(b, x, i, vgg::Config::D, true);
    "vgg19_bn" => "VGG", |b, x, i| vgg::vgg(b, x, i, vgg::Config::E, true);
    "alexnet" => "AlexNet", alexnet::alexnet;
    "squeezenet1_0" => "SqueezeNet", |b, x, i| squeezenet::squeezenet(b, x, i, squeezenet::Version::V1_0);
    "squeezenet1_1" => "SqueezeNet", |b, x, i| squeezenet::squeezenet(b, x, i, squeezenet::Version::V1_1);
    "densenet121" => "DenseNet", |b, x, i| densenet::densenet(b, x, i, densenet::Depth::D121);
    "densenet161" => "DenseNet", |b, x, i| densenet::densenet(b, x, i, densenet::Depth::D161);
    "densenet169" => "DenseNet", |b, x, i| densenet::densenet(b, x, i, densenet::Depth::D169);
    "densenet201" => "DenseNet", |b, x, i| densenet::densenet(b, x, i, densenet::Depth::D201);
    "mobilenet_v2" => "MobileNetV2", mobilenet::mobilenet_v2;
    "mobilenet_v3_small" => "MobileNetV3", |b, x, i| mobilenet::mobilenet_v3(b, x, i, mobilenet::V3::Small);
    "mobilenet_v3_large" => "MobileNetV3", |b, x, i| mobilenet::mobilenet_v3(b, x, i, mobilenet::V3::Large);
    "shufflenet_v2_x0_5" => "ShuffleNetV2", |b, x, i| shufflenet::shufflenet_v2(b, x, i, shufflenet::Width::X0_5);
    "shufflenet_v2_x1_0" => "ShuffleNetV2", |b, x, i| shufflenet::shufflenet_v2(b, x, i, shufflenet::Width::X1_0);
    "shufflenet_v2_x1_5" => "ShuffleNetV2", |b, x, i| shufflenet::shufflenet_v2(b, x, i, shufflenet::Width::X1_5);
    "shufflenet_v2_x2_0" => "ShuffleNetV2", |b, x, i| shufflenet::shufflenet_v2(b, x, i, shufflenet::Width::X2_0);
    // efficientnet, convnext, regnet, vit, swin entries
    "efficientnet_b0" => "EfficientNet", |b, x, i| efficientnet::efficientnet(b, x, i, efficientnet::Variant::B0);
    "efficientnet_b1" => "EfficientNet", |b, x, i| efficientnet::efficientnet(b, x, i, efficientnet::Variant::B1);
    "efficientnet_b2" => "EfficientNet", |b, x, i| efficientnet::efficientnet(b, x, i, efficientnet::Variant::B2);
    "efficientnet_b3" => "EfficientNet", |b, x, i| efficientnet::efficientnet(b, x, i, efficientnet::Variant::B3);
    "efficientnet_b4" => "EfficientNet", |b, x, i| efficientnet::efficientnet(b, x, i, efficientnet::Variant::B4);
    "efficientnet_b5" => "EfficientNet", |b, x, i| efficientnet::efficientnet(b, x, i, efficientnet::Variant::B5);
    "efficientnet_b6" => "EfficientNet", |b, x, i| efficientnet::efficientnet(b, x, i, efficientnet::Variant::B6);
    "efficientnet_b7" => "EfficientNet", |b, x, i| efficientnet::efficientnet(b, x, i, efficientnet::Variant::B7);
    "regnet_y_400mf" => "RegNet", |b, x, i| regnet::regnet(b, x, i, regnet::Variant::Y400Mf);
    "convnext_tiny" => "ConvNeXt", |b, x, i| convnext::convnext(b, x, i, convnext::Variant::Tiny);
    "convnext_small" => "ConvNeXt", |b, x, i| convnext::convnext(b, x, i, convnext::Variant::Small);
    "convnext_base" => "ConvNeXt", |b, x, i| convnext::convnext(b, x, i, convnext::Variant::Base);
    "vit_b_16" => "VisionTransformer", |b, x, i| vit::vit(b, x, i, vit::Variant::B16);
    "vit_b_32" => "VisionTransformer", |b, x, i| vit::vit(b, x, i, vit::Variant::B32);
    "vit_l_16" => "VisionTransformer", |b, x, i| vit::vit(b, x, i, vit::Variant::L16);
    "swin_t" => "SwinTransformer", |b, x, i| swin::swin(b, x, i, swin::Variant::T);
};

/// All model names of the zoo, in a stable order.
pub fn names() -> Vec<&'static str> {
    ZOO.iter().map(|e| e.name).collect()
}

/// Builds zoo model `name` for `input`.
pub fn build(name: &str, input: &ZooInput) -> Result<Graph, ZooError> {
    let entry = ZOO
        .iter()
        .find(|e| names::same_name(e.name, name))
        .ok_or_else(|| {
            let key = names::folded(name);
            let hint = ZOO
                .iter()
                .map(|e| (names::edit_distance(&key, &names::folded(e.name)), e.name))
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
    .map_err(|cause| ZooError::Build {
        model: entry.name.to_string(),
        cause,
    })
}
