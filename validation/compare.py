#!/usr/bin/env python3
"""Compare `vramscope estimate --json` with truth records (JSONL from ../shared/truth/run_cases.py).

Usage: python3 validation/compare.py TRUTH.jsonl [--only SUBSTR] [--phases] [--exact] [--bin target/release/vramscope]
Prints, per case, truth vs vramscope peak allocated / reserved and the error; with --phases, the
per-phase allocated-after values; with --exact, every byte difference (peak allocated and
reserved, each phase's allocated-after, peak allocated and peak reserved) and how many cases are
byte-exact in all of them. Needs only the Python standard library.
"""
import argparse, json, subprocess, sys, statistics

OPTIM = {"sgd": "sgd", "sgdm": "sgd-momentum", "adam": "adam", "adamw": "adamw", "adagrad": "adagrad", "rmsprop": "rmsprop",
         "adam_fused": "adam-fused", "adamw_fused": "adamw-fused", "adafactor": "adafactor"}
AMP = {"fp32": "fp32", "bf16": "amp-bf16", "fp16": "amp-fp16"}


def args_for(case):
    """CLI flags for a truth case (torchvision, `hf:` configs, or compact fixture lines)."""
    model = case["model"].split(":", 1)[1] if ":" in case["model"] else case["model"]
    a = [model, "--batch-size", str(case["batch"]), "--json"]
    if case.get("seq"):
        a += ["--seq-len", str(case["seq"])]
    if case.get("task"):
        a += ["--task", case["task"]]
    if case.get("image"):
        a += ["--input", f"3x{case['image']}x{case['image']}"]
    if case.get("num_classes"):
        a += ["--num-classes", str(case["num_classes"])]
    mode = case.get("mode") or "train"
    a += ["--mode", mode]
    if mode == "train":
        a += ["--optimizer", OPTIM[case.get("optim") or "adam"]]
    amp, pd = case.get("amp") or "fp32", case.get("param_dtype") or "fp32"
    a += ["--precision", AMP[amp] if amp != "fp32" or pd == "fp32" else pd]
    if isinstance(case.get("checkpoint"), str):
        a += ["--checkpoint", case["checkpoint"]]
    elif case.get("checkpoint") is True:
        a += ["--gradient-checkpointing"]
    a += case.get("extra_args") or []
    return a


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("truth")
    ap.add_argument("--only", default="")
    ap.add_argument("--phases", action="store_true")
    ap.add_argument("--exact", action="store_true", help="list byte differences and count byte-exact cases")
    ap.add_argument("--bin", default="target/release/vramscope")
    ap.add_argument("--json-out")
    ap.add_argument("--markdown", help="append a Markdown table of the results to this file")
    ap.add_argument("--title", default=None)
    o = ap.parse_args()
    rows, errs, inexact = [], [], []
    for line in open(o.truth):
        rec = json.loads(line)
        if "case" not in rec:  # the compact fixture format of fixtures/truth/*.jsonl
            c = dict(rec)
            if not c["model"].endswith(".json"):
                c["model"] = "torchvision:" + c["model"]
            rec = {"case": c, "ok": True,
                   "overall": {"peak": {"alloc": c["peak_alloc"], "reserved": c["peak_reserved"]}, "peak_phase": c["peak_phase"]},
                   "phases": [{"phase": p["phase"], "after": {"alloc": p["after_alloc"]}, "peak": {"alloc": p["peak_alloc"], "reserved": p["peak_reserved"]}} for p in c["phases"]]}
        case = rec["case"]
        if not rec.get("ok", True) or o.only not in case["name"]:
            continue
        p = subprocess.run([o.bin, "estimate", *args_for(case)], capture_output=True, text=True)
        if p.returncode != 0:
            print(f"{case['name']:45s} ERROR {p.stderr.strip()[:200]}")
            continue
        est = json.loads(p.stdout)
        t_alloc = rec["overall"]["peak"]["alloc"]
        t_res = rec["overall"]["peak"]["reserved"]
        e_alloc = est["peak"]["allocated_bytes"]
        e_res = est["peak"]["reserved_bytes"]
        err = 100.0 * (e_alloc - t_alloc) / t_alloc
        rerr = 100.0 * (e_res - t_res) / t_res
        errs.append(err)
        tph = {ph["phase"]: ph for ph in rec["phases"]}
        worst_phase = max(
            (abs(ph["allocated_after_bytes"] - tph[ph["name"]]["after"]["alloc"]) / max(tph[ph["name"]]["after"]["alloc"], 1) * 100, ph["name"])
            for ph in est["phases"] if ph["name"] in tph and tph[ph["name"]]["after"]["alloc"] > 0
        )
        rows.append(dict(case=case["name"], truth_alloc=t_alloc, est_alloc=e_alloc, err=err, truth_reserved=t_res, est_reserved=e_res, rerr=rerr,
                         truth_phase=rec["overall"]["peak_phase"], est_phase=est["peak"]["phase"], worst_phase=worst_phase))
        print(f"{case['name']:45s} truth {t_alloc/2**20:9.1f} est {e_alloc/2**20:9.1f} MiB {err:+6.2f}%  reserved {rerr:+6.2f}%  "
              f"peak {rec['overall']['peak_phase']}/{est['peak']['phase']}  worst phase {worst_phase[1]} {worst_phase[0]:.2f}%")
        if o.exact:
            diffs = [(k, e - t) for k, e, t in [("peak", e_alloc, t_alloc), ("reserved", e_res, t_res)] if e != t]
            for ph in est["phases"]:
                t = tph.get(ph["name"])
                if t:
                    for k, e, tv in [("after", ph["allocated_after_bytes"], t["after"]["alloc"]),
                                     ("peak", ph["peak_allocated_bytes"], t["peak"]["alloc"]),
                                     ("peak reserved", ph["peak_reserved_bytes"], t["peak"]["reserved"])]:
                        if e != tv:
                            diffs.append((f"{ph['name']} {k}", e - tv))
            if diffs:
                inexact.append(case["name"])
                print("    not byte-exact: " + ", ".join(f"{k} {d:+d} B" for k, d in diffs[:6]))
        if o.phases:
            for ph in est["phases"]:
                t = tph.get(ph["name"])
                if t:
                    print(f"    {ph['name']:14s} after {t['after']['alloc']/2**20:9.1f} / {ph['allocated_after_bytes']/2**20:9.1f}   "
                          f"peak {t['peak']['alloc']/2**20:9.1f} / {ph['peak_allocated_bytes']/2**20:9.1f}   "
                          f"resv {t['peak']['reserved']/2**20:8.1f} / {ph['peak_reserved_bytes']/2**20:8.1f}")
    if errs:
        a = [abs(e) for e in errs]
        print(f"\n{len(errs)} cases: median |err| {statistics.median(a):.2f}%, worst {max(a):.2f}%, under-estimates >3%: {sum(e < -3 for e in errs)}")
        if o.exact:
            print(f"{len(errs) - len(inexact)} of {len(errs)} cases byte-exact in every phase")
    if o.json_out:
        json.dump(rows, open(o.json_out, "w"), indent=1)
    if o.markdown:
        with open(o.markdown, "a") as f:
            f.write(f"\n## {o.title or o.truth}\n\n")
            f.write("| case | truth peak alloc MiB | vramscope MiB | error | truth reserved MiB | vramscope MiB | error | peak phase (truth / vramscope) | worst phase error |\n")
            f.write("|---|---:|---:|---:|---:|---:|---:|---|---|\n")
            for r in rows:
                f.write(f"| {r['case']} | {r['truth_alloc']/2**20:.1f} | {r['est_alloc']/2**20:.1f} | {r['err']:+.2f}% | "
                        f"{r['truth_reserved']/2**20:.1f} | {r['est_reserved']/2**20:.1f} | {r['rerr']:+.2f}% | "
                        f"{r['truth_phase']} / {r['est_phase']} | {r['worst_phase'][1]} {r['worst_phase'][0]:.2f}% |\n")
            if errs:
                a = [abs(e) for e in errs]
                f.write(f"\n{len(errs)} cases: median |error| {statistics.median(a):.2f}%, worst {max(a):.2f}%, "
                        f"under-estimated by more than 3%: {sum(e < -3 for e in errs)}.\n")


if __name__ == "__main__":
    main()
