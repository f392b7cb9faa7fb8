#!/usr/bin/env python3
"""Sets quantize_bench's runs side by side: the kernels built as kernel IR
through the LLVM backend against the NVRTC build of the same IR (the issue's
3% budget), and the NVRTC build against the kernels as they were before they
were built as IR (a quantize_bench of that commit, when one is given).

  merge_backend_results.py NVRTC.json LLVM.json BEFORE.json|- COMMIT BEFORE_COMMIT OUT.json
"""
import datetime
import json
import sys


def load(path):
    if path == "-":
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"merge_backend_results: cannot read {path}: {e}", file=sys.stderr)
        return None


def main():
    if len(sys.argv) != 7:
        print(__doc__, file=sys.stderr)
        return 2
    nvrtc, llvm, before = (load(p) for p in sys.argv[1:4])
    commit, before_commit, out_path = sys.argv[4:7]
    if nvrtc is None or llvm is None:
        return 1
    by_name = lambda run: {c["name"]: c for c in run["cases"]} if run else {}
    llvm_cases, before_cases = by_name(llvm), by_name(before)
    cases = []
    for c in nvrtc["cases"]:
        entry = {"name": c["name"], "nvrtc_us": c["median_us"], "nvrtc_verified": c["verified"]}
        if c["name"] in llvm_cases:
            l = llvm_cases[c["name"]]
            entry.update(llvm_us=l["median_us"], llvm_verified=l["verified"],
                         ratio_llvm_over_nvrtc=round(l["median_us"] / c["median_us"], 4))
        if c["name"] in before_cases:
            b = before_cases[c["name"]]
            entry.update(before_us=b["median_us"],
                         ratio_nvrtc_over_before=round(c["median_us"] / b["median_us"], 4))
        cases.append(entry)
    record = {
        "commit": commit,
        "gpu": nvrtc.get("device", "?"),
        "date": datetime.date.today().isoformat(),
        "command": "quantize_bench --backend nvrtc, --backend llvm, and the quantize_bench of "
                   f"{before_commit} (the kernels before they were kernel IR), one after the other "
                   f"in one call; {nvrtc['rows']} x {nvrtc['cols']} bf16, median of "
                   f"{nvrtc['iters']}, inputs rotated past L2",
        "what": "ours = the LLVM build of each kernel built as IR, peer = the NVRTC build of the "
                "same IR (goal: ratio_llvm_over_nvrtc <= 1.03); before = the hand-written CUDA "
                "kernel of the same kind (goal: ratio_nvrtc_over_before <= 1 within noise)",
        "cases": cases,
    }
    with open(out_path, "w") as f:
        json.dump(record, f, indent=2)
        f.write("\n")
    for e in cases:
        print(f"{e['name']:48s} nvrtc {e['nvrtc_us']:8.1f}"
              + (f"  llvm {e['llvm_us']:8.1f} ({e['ratio_llvm_over_nvrtc']:.3f})" if "llvm_us" in e else "")
              + (f"  before {e['before_us']:8.1f} ({e['ratio_nvrtc_over_before']:.3f})" if "before_us" in e else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
