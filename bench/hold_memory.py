"""Another program on the GPU, for the expert cache's measures (bench/h200-issue20-cache.sh):
holds device memory on a schedule of (seconds from start, GiB held from then on) pairs,
then exits; each change printed with the device's free memory (torch's view of the card).
  python3 bench/hold_memory.py 0:50 30:52 60:50 90:0"""
import sys, time
import torch

plan = [(float(t), float(g)) for t, g in (a.split(':') for a in sys.argv[1:])]
held, t0 = [], time.time()
for at, gib in plan:
    time.sleep(max(0.0, at - (time.time() - t0)))
    want = int(gib * 1024)  # in 1 MiB pieces, so a change is exact
    while len(held) > want: held.pop()
    while len(held) < want: held.append(torch.empty(1 << 20, dtype=torch.uint8, device='cuda'))
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info()
    print(f'{time.time() - t0:7.1f} s: holding {gib:.1f} GiB, the card has {free / 2**30:.1f} of {total / 2**30:.1f} GiB free',
          flush=True)
