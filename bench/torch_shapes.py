"""cuBLAS (torch) and SDPA reference rates on the device for a model's prefill shapes:
the peer kiln's product and attention kernels are measured against.
  python3 bench/torch_shapes.py HIDDEN Q_DIM KV_DIM FFN HEADS KV_HEADS HEAD_DIM TOKENS..."""
import sys, time
import torch

def timed(fn, reps=20):
    fn(); torch.cuda.synchronize()
    best = float('inf')
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps): fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best

d, q, kv, ff, nh, nkv, hd = (int(a) for a in sys.argv[1:8])
toks = [int(a) for a in sys.argv[8:]]
shapes = {'qkv': (q + 2 * kv, d), 'o': (d, q), 'gate_up': (ff, d), 'down': (d, ff)}
dev = 'cuda'
print('| shape | tokens | rows x cols | cuBLAS us | TFLOP/s |')
print('|---|---:|---|---:|---:|')
for n in toks:
    for name, (r, c) in shapes.items():
        w = torch.randn(r, c, device=dev, dtype=torch.bfloat16)
        x = torch.randn(n, c, device=dev, dtype=torch.bfloat16)
        t = timed(lambda: torch.matmul(x, w.t()))
        print('| %s | %d | %dx%d | %.1f | %.1f |' % (name, n, r, c, t * 1e6, 2 * r * c * n / t * 1e-12))
print()
print('| attention | tokens | us | TFLOP/s (causal) |')
print('|---|---:|---:|---:|')
for n in toks:
    qt = torch.randn(1, nh, n, hd, device=dev, dtype=torch.bfloat16)
    kt = torch.randn(1, nh, n, hd, device=dev, dtype=torch.bfloat16)
    vt = torch.randn(1, nh, n, hd, device=dev, dtype=torch.bfloat16)
    t = timed(lambda: torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=True))
    fl = 2 * 2 * nh * hd * n * (n + 1) / 2
    print('| sdpa %d heads of %d | %d | %.1f | %.1f |' % (nh, hd, n, t * 1e6, fl / t * 1e-12))
