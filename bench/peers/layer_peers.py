# The PyTorch peers of bench/layer_bench, measured the way the issue's
# reference figures were (../shared/peers/layer_anchor.py's method): one FP8
# linear layer forward + backward with per-tensor current scaling written the
# usual way (amax, scale, cast, transpose, torch._scaled_mm), eager and
# torch.compile'd; its three FP8 GEMMs alone; the bf16 layer; and torchao's
# Float8Linear (tensorwise and rowwise recipes) under torch.compile when
# torchao imports on this machine.
# Medians of CUDA-event timings.
#   python3 bench/peers/layer_peers.py OUT.json
import json, statistics, sys, time
import torch

dev = torch.device("cuda")
E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2


def bench(fn, iters=30, warm=5):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); e.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def quantize(t, dt):
    fmax = torch.finfo(dt).max
    amax = t.abs().amax().float().clamp(min=1e-12)
    s = fmax / amax
    return (t.float() * s).clamp(-fmax, fmax).to(dt), 1.0 / s


def fp8_layer(x, w, dy):
    xq, sx = quantize(x, E4); wq, sw = quantize(w, E4); dyq, sdy = quantize(dy, E5)
    y = torch._scaled_mm(xq, wq.t(), scale_a=sx, scale_b=sw, out_dtype=torch.bfloat16, use_fast_accum=True)
    dx = torch._scaled_mm(dyq, wq.t().contiguous().t(), scale_a=sdy, scale_b=sw, out_dtype=torch.bfloat16)
    dw = torch._scaled_mm(dyq.t().contiguous(), xq.t().contiguous().t(), scale_a=sdy, scale_b=sx, out_dtype=torch.bfloat16)
    return y, dx, dw


def bf16_layer(x, w, dy):
    return x @ w.t(), dy @ w, dy.t() @ x


def torchao_import():
    try:
        import torchao
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    except Exception as e:  # no wheel on this machine (bench/gpu.sh installs a carried one)
        return None, f"torchao not importable: {e.__class__.__name__}: {e}"
    return (convert_to_float8_training, Float8LinearConfig), torchao.__version__


out_path = sys.argv[1] if len(sys.argv) > 1 else "layer_peers.json"
res = {"torch": torch.__version__, "cases": {}}
torchao, res["torchao"] = torchao_import()
for (M, K, N) in [(16384, 8192, 8192), (16384, 8192, 28672), (8192, 4096, 4096)]:
    x = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
    w = torch.randn(N, K, device=dev, dtype=torch.bfloat16) * 0.02
    dy = torch.randn(M, N, device=dev, dtype=torch.bfloat16) * 0.01
    row = {}
    xq, sx = quantize(x, E4); wq, sw = quantize(w, E4); dyq, sdy = quantize(dy, E5)
    wqt = wq.t().contiguous(); dyqt = dyq.t().contiguous(); xqt = xq.t().contiguous()

    def gemms():
        torch._scaled_mm(xq, wq.t(), scale_a=sx, scale_b=sw, out_dtype=torch.bfloat16, use_fast_accum=True)
        torch._scaled_mm(dyq, wqt.t(), scale_a=sdy, scale_b=sw, out_dtype=torch.bfloat16)
        torch._scaled_mm(dyqt, xqt.t(), scale_a=sdy, scale_b=sx, out_dtype=torch.bfloat16)

    row["torch_gemms_only_ms"] = bench(gemms)
    row["torch_eager_ms"] = bench(lambda: fp8_layer(x, w, dy))
    compiled = torch.compile(fp8_layer)
    compiled(x, w, dy)
    row["torch_compile_ms"] = bench(lambda: compiled(x, w, dy))
    row["bf16_ms"] = bench(lambda: bf16_layer(x, w, dy))
    if torchao is not None:
        # torchao's Float8Linear as ../shared/peers/torchao_layer.py measures
        # it: an nn.Linear without bias converted with each recipe, forward +
        # backward under torch.compile (its first call compiles).
        convert, config = torchao
        for recipe in ("tensorwise", "rowwise"):
            try:
                torch._dynamo.reset()
                lin = torch.nn.Sequential(torch.nn.Linear(K, N, bias=False, device=dev, dtype=torch.bfloat16))
                model = torch.compile(convert(lin, config=config.from_recipe_name(recipe)))
                xi = x.clone().requires_grad_(True)

                def ao_step():
                    model(xi).backward(dy)
                row[f"torchao_{recipe}_ms"] = bench(ao_step)
                del model, lin, xi
            except Exception as e:
                row[f"torchao_{recipe}_error"] = f"{e.__class__.__name__}: {e}"[:300]
    res["cases"][f"{M}x{K}x{N}"] = row
    print(f"{M}x{K}x{N}: " + ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                                      for k, v in row.items()), flush=True)
    del x, w, dy, xq, wq, dyq, wqt, dyqt, xqt
    torch.cuda.empty_cache()
json.dump(res, open(out_path, "w"), indent=1)
