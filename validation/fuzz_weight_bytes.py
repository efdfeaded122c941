#!/usr/bin/env python3
"""Corrupts the committed weight and ONNX fixtures byte by byte (1, 2, 4 or 8 random bytes set to
0, 255 or a random value, within the first 4 KiB of safetensors and GGUF files, anywhere in ONNX
files; a fifth of the variants also truncated) and runs `vramscope inspect` on each (and
`vramscope estimate` on the ONNX ones). A run fails the sweep if it panics, exits with a code other
than 0 or 1, or takes over 10 s; the failing file is kept as /tmp/vramscope_bad_N.EXT. Seeded, so
a rerun tries the same files.

    cargo build --release
    python3 validation/fuzz_weight_bytes.py [--bin target/release/vramscope] [--variants 150]
"""
import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/vramscope"))
    ap.add_argument("--variants", type=int, default=150)
    args = ap.parse_args()
    rng = random.Random(1)
    onnx = sorted(f for f in os.listdir(os.path.join(ROOT, "fixtures/onnx")) if f.endswith(".onnx"))
    files = ["fixtures/weights/tiny.safetensors", "fixtures/weights/tiny.gguf",
             "fixtures/weights/gguf/qwen3.gguf", "fixtures/weights/gguf/gemma2.gguf",
             "fixtures/weights/llama-mixed/model.safetensors"] + [f"fixtures/onnx/{f}" for f in onnx[:8]]
    runs = failed = 0
    tmp = tempfile.mkdtemp()
    for rel in files:
        data = open(os.path.join(ROOT, rel), "rb").read()
        ext = os.path.splitext(rel)[1]
        for _ in range(args.variants):
            d = bytearray(data)
            limit = len(d) if ext == ".onnx" else min(len(d), 4096)
            for _ in range(rng.choice([1, 2, 4, 8])):
                d[rng.randrange(limit)] = rng.choice([0, 255, rng.randrange(256)])
            if rng.random() < 0.2:
                d = d[: rng.randrange(len(d))]
            path = os.path.join(tmp, "m" + ext)
            open(path, "wb").write(d)
            commands = [[args.bin, "inspect", path]]
            if ext == ".onnx":
                commands.append([args.bin, "estimate", path])
            elif "/gguf/" in rel:
                commands.append([args.bin, "estimate", path, "--seq-len", "16", "-b", "1"])
            for c in commands:
                runs += 1
                try:
                    r = subprocess.run(c, capture_output=True, timeout=10,
                                       env=dict(os.environ, RUST_BACKTRACE="0"))
                    bad = r.returncode not in (0, 1) or b"panicked" in r.stderr
                    why = (r.returncode, r.stderr[:300])
                except subprocess.TimeoutExpired:
                    bad, why = True, "time-out"
                if bad:
                    failed += 1
                    keep = f"/tmp/vramscope_bad_{failed}{ext}"
                    shutil.copy(path, keep)
                    print(rel, c[1], why, "->", keep)
    shutil.rmtree(tmp)
    print(f"{runs} runs: {failed} failures")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
