"""torchvision models with `checkpoint_sequential(model.features, N)`, for
`../shared/truth/measure.py --model py:validation/checkpoint_sequential_models.py:FACTORY`.

This is what `vramscope estimate MODEL --checkpoint features:N` simulates: the `features`
Sequential is split into N segments, all but the last run under non-reentrant checkpointing, and the
rest of the model's forward runs as torchvision writes it.
"""
import torch
import torch.nn.functional as F
import torchvision
from torch.utils.checkpoint import checkpoint_sequential


def _factory(name, rest, batch, image=224, num_classes=1000, checkpoint=None, segments=3):
    image, num_classes = image or 224, num_classes or 1000
    model = getattr(torchvision.models, name)(weights=None, num_classes=num_classes)
    n = int(segments)

    def forward(m, x):
        x = checkpoint_sequential(m.features, n, x, use_reentrant=False)
        return rest(m, x)

    def make_batch():
        return torch.randn(batch, 3, image, image), torch.randint(0, num_classes, (batch,))
    return model, make_batch, F.cross_entropy, forward


def vgg11_bn(batch, image=224, num_classes=1000, checkpoint=None, segments=3):
    return _factory("vgg11_bn", lambda m, x: m.classifier(torch.flatten(m.avgpool(x), 1)), batch, image, num_classes, checkpoint, segments)


def mobilenet_v2(batch, image=224, num_classes=1000, checkpoint=None, segments=4):
    def rest(m, x):
        x = F.adaptive_avg_pool2d(x, (1, 1))
        return m.classifier(torch.flatten(x, 1))
    return _factory("mobilenet_v2", rest, batch, image, num_classes, checkpoint, segments)
