# Joins bench/layer_bench's JSON with bench/peers/layer_peers.py's into the
# record kept in bench/results/: commit, GPU, date, and per case fp8c's step
# time, its GEMMs alone, each peer's time and the ratios (peer / fp8c: above
# 1 means fp8c is faster).
#   python3 bench/merge_layer_results.py OURS.json PEERS.json COMMIT OUT.json
import datetime, json, sys

ours, peers, commit, out_path = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3], sys.argv[4]
record = {"benchmark": "layer", "commit": commit, "gpu": ours["device"],
          "date": datetime.date.today().isoformat(), "torch": peers.get("torch"),
          "torchao": peers.get("torchao"), "cases": []}
for case in ours["cases"]:
    shape = f'{case["tokens"]}x{case["in"]}x{case["out"]}'
    peer = peers["cases"].get(shape, {})
    row = {"name": case["name"], "fp8c_step_ms": round(case["step_ms"], 4),
           "fp8c_gemms_alone_ms": round(case["gemm_ms"], 4),
           "fp8c_ratio_to_gemms": round(case["ratio_to_gemms"], 4), "goal_ratio": 1.08,
           "fp8c_graphs": case.get("graphs", False)}
    if "eager_step_ms" in case:  # the same steps launched one by one, no CUDA graphs
        row["fp8c_eager_step_ms"] = round(case["eager_step_ms"], 4)
    for p in ("torch_eager_ms", "torch_compile_ms", "bf16_ms", "torch_gemms_only_ms",
              "torchao_tensorwise_ms", "torchao_rowwise_ms"):
        if p in peer:
            row[p] = round(peer[p], 4)
            row[p.replace("_ms", "_ratio")] = round(peer[p] / case["step_ms"], 3)
    for recipe in ("tensorwise", "rowwise"):
        if f"torchao_{recipe}_error" in peer:
            row[f"torchao_{recipe}_error"] = peer[f"torchao_{recipe}_error"]
    record["cases"].append(row)
json.dump(record, open(out_path, "w"), indent=2)
for r in record["cases"]:
    print(f'{r["name"]:28s} fp8c {r["fp8c_step_ms"]:8.3f} ms (x{r["fp8c_ratio_to_gemms"]:.3f} of its GEMMs) | '
          f'compile {r.get("torch_compile_ms", float("nan")):8.3f} | '
          f'torchao {r.get("torchao_tensorwise_ms", float("nan")):8.3f} / {r.get("torchao_rowwise_ms", float("nan")):8.3f} | '
          f'bf16 {r.get("bf16_ms", float("nan")):8.3f}')
