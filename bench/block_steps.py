#!/usr/bin/env python3
"""Block-scaled layer steps as the spec runs them (gemm = auto: cuBLASLt's
block-scaled FP8 GEMM, or the generated GEMM for the forms cuBLASLt lacks,
MXFP8 among them) against the dequantize path they took before
(FP8C_BLOCK_SCALED_GEMM=0 --gemm cublaslt: operands dequantized to bf16, bf16
GEMMs), in one run on one GPU, runs interleaved.

  bench/block_steps.py FP8C_BINARY COMMIT OUT_JSON [SPEC...]

Each spec is benched with `fp8c bench --tokens 8192` (one rank per layer),
twice each way; per layer the record keeps the better median of each way.
The goal (issue 13): at least 1.9x faster per step than the dequantize path.
"""
import datetime
import json
import os
import re
import subprocess
import sys

LINE = re.compile(r"^layer (\S+) \((\d+) tokens, in (\d+), out (\d+)\): step ([\d.]+) ms, "
                  r"its GEMMs alone ([\d.]+) ms, ratio [\d.]+, (\d+) TFLOP/s")


def bench(binary, spec, block):
    env = dict(os.environ, FP8C_BLOCK_SCALED_GEMM="1" if block else "0")
    # The path before: every layer on cuBLASLt, which then dequantizes (auto
    # would put those GEMMs on the generated GEMM, MXFP8's among them).
    extra = [] if block else ["--gemm", "cublaslt"]
    out = subprocess.run([binary, "bench", spec, "--tokens", "8192"] + extra, env=env,
                         capture_output=True, text=True, timeout=180)
    if out.returncode != 0:
        raise RuntimeError(f"{spec}: fp8c bench exited {out.returncode}: {out.stderr[-500:]}")
    rows = {}
    for line in out.stdout.splitlines():
        m = LINE.match(line)
        if m:
            rows[m.group(1)] = {"tokens": int(m.group(2)), "in": int(m.group(3)),
                                "out": int(m.group(4)), "step_ms": float(m.group(5)),
                                "gemms_ms": float(m.group(6)), "tflops": int(m.group(7))}
    return rows, out.stdout


def main():
    binary, commit, out_json = sys.argv[1:4]
    specs = sys.argv[4:] or ["examples/blockwise_mlp.fp8", "examples/mxfp8_proj.fp8"]
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip().splitlines()
    cases, logs = [], []
    for spec in specs:
        best = {True: {}, False: {}}
        for _ in range(2):
            for block in (True, False):
                rows, log = bench(binary, spec, block)
                logs.append(f"== {spec} block_scaled_gemm={int(block)}\n{log}")
                for layer, r in rows.items():
                    if layer not in best[block] or r["step_ms"] < best[block][layer]["step_ms"]:
                        best[block][layer] = r
        for layer, ours in best[True].items():
            before = best[False].get(layer)
            if not before:
                continue
            cases.append({
                "name": f"{os.path.basename(spec)}:{layer}",
                "shape": [ours["tokens"], ours["out"], ours["in"]],
                "fp8c_step_ms": ours["step_ms"],
                "fp8c_gemms_alone_ms": ours["gemms_ms"],
                "fp8c_tflops_over_step": ours["tflops"],
                "dequantized_step_ms": before["step_ms"],
                "dequantized_tflops_over_step": before["tflops"],
                "speedup": round(before["step_ms"] / ours["step_ms"], 3),
                "goal_speedup": 1.9,
            })
    record = {"benchmark": "block_scaled_steps", "commit": commit,
              "gpu": gpu[0] if gpu else "unknown",
              "date": datetime.date.today().isoformat(),
              "peer": "fp8c with FP8C_BLOCK_SCALED_GEMM=0 --gemm cublaslt (operands dequantized "
                      "to bf16, bf16 cuBLASLt GEMMs: the path before block-scaled FP8 GEMMs)",
              "cases": cases}
    with open(out_json, "w") as f:
        json.dump(record, f, indent=1)
    with open(os.path.splitext(out_json)[0] + ".log", "w") as f:
        f.write("\n".join(logs))
    for c in cases:
        print(f"{c['name']:28s} {c['fp8c_step_ms']:7.3f} ms ({c['fp8c_tflops_over_step']} TFLOP/s)"
              f"  dequantized {c['dequantized_step_ms']:7.3f} ms  speedup {c['speedup']:.2f}x")


if __name__ == "__main__":
    main()
