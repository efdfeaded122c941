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


class _Checkpointed(torch.nn.Module):
    """Runs the wrapped module under checkpoint(use_reentrant=False), as measure.py's wrapper."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, *args):
        from torch.utils.checkpoint import checkpoint
        return checkpoint(self.inner, *args, use_reentrant=False)


def nested(batch, image=224, num_classes=1000, checkpoint=None, model="vit_b_16", modules="",
           sequential=""):
    """A torchvision model with checkpointing below its top level, as `vramscope tricks` offers
    it: `modules` (comma-separated dotted paths, e.g. ViT's `encoder.layers.encoder_layer_0`,
    ...) each wrapped in checkpoint(use_reentrant=False), or `sequential` = `PATH:N`:
    checkpoint_sequential over that nn.Sequential (ViT's `encoder.layers:4`). This is
    `vramscope estimate MODEL --checkpoint <the same list>`."""
    image, num_classes = image or 224, num_classes or 1000
    net = getattr(torchvision.models, model)(weights=None, num_classes=num_classes)
    for path in [p for p in modules.split(",") if p]:
        parent, _, leaf = path.rpartition(".")
        holder = net.get_submodule(parent) if parent else net
        setattr(holder, leaf, _Checkpointed(holder.get_submodule(leaf)))
    if sequential:
        path, n = sequential.rsplit(":", 1)
        seq = net.get_submodule(path)

        def run(x, seq=seq, n=int(n)):
            return checkpoint_sequential(seq, n, x, use_reentrant=False)
        seq.forward = run

    def make_batch():
        return torch.randn(batch, 3, image, image), torch.randint(0, num_classes, (batch,))
    return net, make_batch, F.cross_entropy
