"""Small PyTorch models whose ONNX exports are vramscope fixtures (fixtures/onnx/) and whose
training steps are measured by the truth tool (fixtures/truth/onnx_models.jsonl):

    measure.py --model py:validation/onnx_models.py:FACTORY --batch B --seq S ...

* `lstm`: a 2-layer `nn.LSTM(32, 64, batch_first=True)` over `[B, S, 32]` features, the last
  step's output classified into 10 classes.
* `gru`: a bidirectional 1-layer `nn.GRU(32, 48, batch_first=True)`, same task.
* `volume`: `nn.Conv3d` layers and an `nn.Conv1d` with `padding="same"` over `[B, 2, 16, 32, 32]`.
* `text`: token embeddings + learned position embeddings, two pre-norm transformer blocks
  (packed qkv `nn.Linear`, `F.scaled_dot_product_attention` with dropout, `nn.GELU` MLP),
  mean pooling and a linear head over `input_ids [B, S]` (vocabulary 1000, 8 classes).
* `attn_text`: the same classifier with attention written out (`q @ k^T * scale`, `softmax`,
  dropout, `@ v`; no mask; locals deleted at their last use): the plain softmax under autocast
  is `fp32_set_opt_dtype`.

`make_onnx_fixtures.py` exports these same classes (`MODELS`).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class RNNClassifier(nn.Module):
    def __init__(self, kind, d_in, hidden, layers, bidirectional, num_classes):
        super().__init__()
        cls = {"lstm": nn.LSTM, "gru": nn.GRU}[kind]
        self.rnn = cls(d_in, hidden, num_layers=layers, batch_first=True,
                       bidirectional=bidirectional)
        self.head = nn.Linear(hidden * (2 if bidirectional else 1), num_classes)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.head(y[:, -1])


class Block(nn.Module):
    def __init__(self, dim, heads, p):
        super().__init__()
        self.heads, self.p = heads, p
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.drop1 = nn.Dropout(p)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.drop2 = nn.Dropout(p)

    def forward(self, x):
        b, s, e = x.shape
        h = self.ln1(x)
        q, k, v = self.qkv(h).view(b, s, 3, self.heads, e // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        a = F.scaled_dot_product_attention(q, k, v, dropout_p=self.p if self.training else 0.0)
        a = a.transpose(1, 2).reshape(b, s, e)
        x = x + self.drop1(self.proj(a))
        return x + self.drop2(self.mlp(self.ln2(x)))


class EagerBlock(Block):
    """`Block` with attention written out: scores, a plain softmax, dropout, values. Each local is
    deleted at its last use, so the program frees what its ONNX export's last reader frees (an ONNX
    graph has no Python locals): the fixture tests the ops' rules, not local-variable lifetimes."""

    def forward(self, x):
        b, s, e = x.shape
        h = self.ln1(x)
        qkv = self.qkv(h)
        del h
        q, k, v = qkv.view(b, s, 3, self.heads, e // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        del qkv
        scores = torch.matmul(q, k.transpose(-2, -1)) * (e // self.heads) ** -0.5
        del q, k
        p = scores.softmax(dim=-1)
        del scores
        p = F.dropout(p, self.p, self.training)
        a = torch.matmul(p, v)
        del p, v
        a = a.transpose(1, 2).reshape(b, s, e)
        x = x + self.drop1(self.proj(a))
        del a
        return x + self.drop2(self.mlp(self.ln2(x)))


class TextClassifier(nn.Module):
    def __init__(self, vocab=1000, dim=128, heads=4, layers=2, max_len=512, num_classes=8, p=0.1,
                 block=Block):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.blocks = nn.Sequential(*[block(dim, heads, p) for _ in range(layers)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, ids):
        s = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(s, device=ids.device))
        x = self.ln(self.blocks(x))
        return self.head(x.mean(dim=1))


class VolumeClassifier(nn.Module):
    """3-D and 1-D convolutions (`padding="same"` with an even kernel pads asymmetrically)."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.c3a = nn.Conv3d(2, 8, 3, padding=1)
        self.relu = nn.ReLU(inplace=True)
        self.c3b = nn.Conv3d(8, 8, 2, stride=2)
        self.c1 = nn.Conv1d(8, 16, 4, padding="same")
        self.head = nn.Linear(16, num_classes)

    def forward(self, x):
        x = self.c3b(self.relu(self.c3a(x)))
        x = self.c1(x.flatten(2))
        return self.head(x.mean(dim=2))


def volume(batch, image=None):
    model = VolumeClassifier()

    def make_batch():
        return torch.randn(batch, 2, 16, 32, 32), torch.randint(0, 10, (batch,))
    return model, make_batch, F.cross_entropy


def _rnn(kind, batch, seq, **kw):
    model = RNNClassifier(kind, **kw)
    k = kw["num_classes"]

    def make_batch():
        return torch.randn(batch, seq, kw["d_in"]), torch.randint(0, k, (batch,))
    return model, make_batch, F.cross_entropy


def lstm(batch, seq):
    return _rnn("lstm", batch, seq, d_in=32, hidden=64, layers=2, bidirectional=False,
                num_classes=10)


def gru(batch, seq):
    return _rnn("gru", batch, seq, d_in=32, hidden=48, layers=1, bidirectional=True,
                num_classes=10)


def text(batch, seq):
    model = TextClassifier()

    def make_batch():
        return torch.randint(0, 1000, (batch, seq)), torch.randint(0, 8, (batch,))
    return model, make_batch, F.cross_entropy


class EagerTextClassifier(TextClassifier):
    """`TextClassifier` of `EagerBlock`s whose forward names no local either."""

    def __init__(self):
        super().__init__(block=EagerBlock)

    def forward(self, ids):
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        return self.head(self.ln(self.blocks(x)).mean(dim=1))


def attn_text(batch, seq):
    model = EagerTextClassifier()

    def make_batch():
        return torch.randint(0, 1000, (batch, seq)), torch.randint(0, 8, (batch,))
    return model, make_batch, F.cross_entropy


# name -> (model factory for export, example input, input name, dynamic axes of the input)
MODELS = {
    "lstm_classifier": (lambda: lstm(2, 5)[0], lambda: torch.randn(2, 5, 32), "x",
                        {0: "batch", 1: "sequence"}),
    "gru_classifier": (lambda: gru(2, 5)[0], lambda: torch.randn(2, 5, 32), "x",
                       {0: "batch", 1: "sequence"}),
    "text_classifier": (lambda: text(2, 5)[0], lambda: torch.randint(0, 1000, (2, 5)),
                        "input_ids", {0: "batch", 1: "sequence"}),
    "attention_text_classifier": (lambda: attn_text(2, 5)[0], lambda: torch.randint(0, 1000, (2, 5)),
                                  "input_ids", {0: "batch", 1: "sequence"}),
    "volume_classifier": (lambda: volume(2)[0], lambda: torch.randn(2, 2, 16, 32, 32), "x",
                          {0: "batch"}),
}
