# Joins fp8c's benchmark JSON with the peers' into the record kept in
# bench/results/: commit, GPU, date, and per case ours, each peer, their
# times and the ratio (peer time / our time: above 1 means fp8c is faster).
#   python3 bench/merge_results.py OURS.json PEERS.json COMMIT OUT.json
import datetime, json, sys

ours, peers, commit, out_path = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3], sys.argv[4]
record = {
    "benchmark": "quantize",
    "commit": commit,
    "gpu": ours["device"],
    "date": datetime.date.today().isoformat(),
    "shape": [ours["rows"], ours["cols"]],
    "torch": peers.get("torch"),
    "cases": [],
}
for case in ours["cases"]:
    peer = peers["cases"].get(case["name"], {})
    row = {"name": case["name"], "fp8c_us": round(case["median_us"], 2),
           "fp8c_effective_TBps": round(case["effective_TBps"], 3),
           "fp8c_actual_TBps": round(case["actual_TBps"], 3), "verified": case["verified"]}
    for p in ("torch_eager", "torch_compile"):
        if p + "_us" in peer:
            row[p + "_us"] = round(peer[p + "_us"], 2)
            row[p + "_ratio"] = round(peer[p + "_us"] / case["median_us"], 3)
    record["cases"].append(row)
json.dump(record, open(out_path, "w"), indent=2)
for r in record["cases"]:
    print(f'{r["name"]:36s} fp8c {r["fp8c_us"]:9.1f} us {r["fp8c_effective_TBps"]:5.2f} TB/s eff | '
          f'eager {r.get("torch_eager_us", float("nan")):9.1f} | compile {r.get("torch_compile_us", float("nan")):9.1f} | '
          f'x{r.get("torch_compile_ratio", float("nan")):.2f} vs compile')
