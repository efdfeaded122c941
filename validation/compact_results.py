#!/usr/bin/env python3
"""Convert full truth records (run_cases.py / measure.py --json output, one JSON object per line)
into the compact fixture format used by vramscope's tests.

    python3 validation/compact_results.py IN.jsonl [IN2.jsonl ...] --out fixtures/truth/X.jsonl \
        [--prefix torchvision:] [--order CASES.jsonl] [--onnx-exports fixtures/onnx] [--skip NAME ...]

One output line per successful record whose model starts with --prefix (default "torchvision:"):
  {"name","model","batch","image","num_classes","amp","optim","mode","checkpoint","seq","task","param_dtype",
   "param_count","peak_alloc","peak_reserved","peak_phase",
   "phases":[{"phase","after_alloc","peak_alloc","after_reserved","peak_reserved"}, ...]}
"model" has the prefix stripped.  Failed records are reported on stderr and skipped.
Only the Python standard library is needed.
"""
import argparse
import json
import sys


def compact(rec, prefix, rename_dir=None):
    c = rec["case"]
    model = c["model"]
    if prefix and model.startswith(prefix):
        model = model[len(prefix):]
    if rename_dir is not None and model.endswith(".json"):
        model = rename_dir + "/" + model.rsplit("/", 1)[-1]
    ov = rec["overall"]
    return {
        "name": c.get("name"),
        "model": model,
        "batch": c.get("batch"),
        "image": c.get("image"),
        "num_classes": c.get("num_classes"),
        "amp": c.get("amp"),
        "optim": c.get("optim"),
        "mode": c.get("mode"),
        "checkpoint": c.get("checkpoint"),
        "seq": c.get("seq"),
        "task": c.get("task"),
        "param_dtype": c.get("param_dtype"),
        "param_count": rec.get("param_count"),
        "peak_alloc": ov["peak"]["alloc"],
        "peak_reserved": ov["peak"]["reserved"],
        "peak_phase": ov["peak_phase"],
        "phases": [
            {
                "phase": p["phase"],
                "after_alloc": p["after"]["alloc"],
                "peak_alloc": p["peak"]["alloc"],
                "after_reserved": p["after"]["reserved"],
                "peak_reserved": p["peak"]["reserved"],
            }
            for p in rec["phases"]
        ],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--prefix", default="torchvision:", help="keep only models with this prefix ('' = all)")
    ap.add_argument("--config-dir", help="hf: rewrite config paths to DIR/NAME.json (the committed copies)")
    ap.add_argument("--order", help="a case list (.jsonl); output follows its order and only its names")
    ap.add_argument("--onnx-exports", metavar="DIR",
                    help="py:FILE:FACTORY models become DIR/FACTORY_classifier.onnx (their exports, see "
                         "validation/make_onnx_fixtures.py); the measured program is kept as truth_model")
    ap.add_argument("--skip", nargs="*", default=[], help="case names to leave out")
    args = ap.parse_args()

    recs = []
    for path in args.inputs:
        with open(path) as f:
            for line in f:
                if line.strip():
                    recs.append(json.loads(line))
    out, failed = {}, []
    for r in recs:
        c = r.get("case", {})
        if args.prefix and not str(c.get("model", "")).startswith(args.prefix):
            continue
        if not r.get("ok"):
            failed.append((c.get("name"), (r.get("error") or "")[:200]))
            continue
        out[c["name"]] = compact(r, args.prefix, args.config_dir)
    names = list(out)
    if args.order:
        with open(args.order) as f:
            cases = [json.loads(l) for l in f if l.strip() and not l.lstrip().startswith(("#", "//"))]
        order = [c["name"] for c in cases if not args.prefix or str(c.get("model", "")).startswith(args.prefix)]
        names = [n for n in order if n in out]
        for n in order:
            if n not in out and n not in dict(failed):
                print(f"note: {n}: no record", file=sys.stderr)
    names = [n for n in names if n not in set(args.skip)]
    if args.onnx_exports:
        for n in names:
            m = out[n]["model"]
            if m.startswith("py:"):
                out[n]["truth_model"] = m
                out[n]["model"] = f"{args.onnx_exports}/{m.rsplit(':', 1)[-1]}_classifier.onnx"
    with open(args.out, "w") as f:
        for n in names:
            f.write(json.dumps(out[n], separators=(",", ":")) + "\n")
    for n, e in failed:
        print(f"FAILED {n}: {e}", file=sys.stderr)
    print(f"wrote {len(names)} records to {args.out} ({len(failed)} failed)", file=sys.stderr)


if __name__ == "__main__":
    main()
