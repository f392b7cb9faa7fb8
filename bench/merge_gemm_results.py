# Joins the GEMM benchmark's JSON (bench/gemm_bench.cpp: the generated GEMM
# and cuBLASLt through fp8c's runner) with the peers' cuBLASLt programs'
# output (best of the heuristic's top candidates) into the record kept in
# bench/results/: commit, GPU, date, and per case ours, each peer, their times
# and the ratio (peer time / our time: above 1 means fp8c is faster). Fused
# cases (bias + GELU + FP8 D + amax) compare with cuBLASLt's same fused
# epilogue and with the plain generated GEMM (fused_over_plain), not with
# the peers' plain programs.
#   python3 bench/merge_gemm_results.py OURS.json PEER_PER_TENSOR.json PEER_BLOCK.json COMMIT OUT.json
# A peer file that is missing or unreadable leaves its columns out.
import datetime, json, sys


def load_peer(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return {}


ours = json.load(open(sys.argv[1]))
per_tensor, block = load_peer(sys.argv[2]), load_peer(sys.argv[3])
commit, out_path = sys.argv[4], sys.argv[5]
record = {"benchmark": "gemm", "commit": commit, "gpu": ours["gpu"],
          "date": datetime.date.today().isoformat(), "iters": ours["iters"], "cases": []}
for case in ours["cases"]:
    m, n, k = case["m"], case["n"], case["k"]
    flops = 2.0 * m * n * k
    # MXFP8 has no cuBLASLt form on Hopper: its peer is the block-scaled GEMM.
    is_block = case["name"].startswith(("block", "mxfp8"))
    # The peers time fast accumulation for per-tensor; block scaling has
    # precise accumulation only.
    key = f"{m}x{n}x{k}_fast{0 if is_block else 1}"
    row = {"name": case["name"], "config": case["config"], "verified": case["verified"],
           "fp8c_ms": round(case["ours_ms"], 4), "fp8c_tflops": round(case["ours_tflops"], 1),
           "cublaslt_runner_ms": round(case["peer_ms"], 4),
           "cublaslt_runner_tflops": round(case["peer_tflops"], 1),
           "cublaslt_runner_ratio": round(case["ratio"], 3), "peer_form": case["peer"]}
    fused = "fused_over_plain" in case
    if fused:
        # The fused epilogue's cost: the same generated GEMM with a plain
        # bf16 D, and cuBLASLt (the runner) with the same fused epilogue.
        row["plain_generated_ms"] = round(case["plain_generated_ms"], 4)
        row["fused_over_plain"] = round(case["fused_over_plain"], 3)
    peer = None if fused else (block if is_block else per_tensor).get(key)
    if isinstance(peer, dict):
        best = next(v for name, v in peer.items() if name.startswith("best_of"))
        row["cublaslt_best_tflops"] = best
        row["cublaslt_best_ms"] = round(flops / (best * 1e12) * 1e3, 4)
        row["cublaslt_best_ratio"] = round(case["ours_tflops"] / best, 3)
    record["cases"].append(row)
json.dump(record, open(out_path, "w"), indent=2)
for r in record["cases"]:
    print(f'{r["name"]:36s} fp8c {r["fp8c_tflops"]:7.1f} TFLOP/s | cuBLASLt runner '
          f'{r["cublaslt_runner_tflops"]:7.1f} x{r["cublaslt_runner_ratio"]:.3f} | best-of-8 '
          f'{r.get("cublaslt_best_tflops", float("nan")):7.1f} x{r.get("cublaslt_best_ratio", float("nan")):.3f}'
          + (f' | fused at x{r["fused_over_plain"]:.3f} of plain' if "fused_over_plain" in r else ''))
