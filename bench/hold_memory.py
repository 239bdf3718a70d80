"""Another program on the GPU, for the expert cache's squeeze (bench/h200-issue20-cache.sh):
holds device memory on a schedule of steps WHEN:GiB, then exits. WHEN is seconds from the
start, or with --log FILE the lines FILE has (kiln run --token-log: tokens generated). A
step that cannot be had at once takes what it can and keeps asking (as a program would
while kiln gives memory back). Each change printed with the card's free memory.
  python3 bench/hold_memory.py --log /tmp/tokens.log 0:100 100:102 250:100 --until 400"""
import os, sys, time
import torch

args = sys.argv[1:]
log = until = None
if args[:1] == ['--log']: log, args = args[1], args[2:]
if '--until' in args:
    i = args.index('--until'); until = float(args[i + 1]); del args[i:i + 2]
plan = [(float(w), float(g)) for w, g in (a.split(':') for a in args)]
held, t0 = [], time.time()

def now():
    if not log: return time.time() - t0
    try:
        with open(log) as f: return sum(1 for _ in f)
    except OSError: return 0

def report(what):
    free, total = torch.cuda.mem_get_info()
    print(f'{time.time() - t0:8.2f} s, at {now():6.0f}: {what}; holding {len(held) / 1024:.2f} GiB, '
          f'the card has {free / 2**30:.2f} of {total / 2**30:.2f} GiB free', flush=True)

for when, gib in plan:
    while now() < when: time.sleep(0.02)
    want = int(gib * 1024)  # in 1 MiB pieces
    while len(held) > want: held.pop()
    torch.cuda.empty_cache()
    short = False
    while len(held) < want:
        try: held.append(torch.empty(1 << 20, dtype=torch.uint8, device='cuda'))
        except torch.cuda.OutOfMemoryError:
            if not short: report(f'short of {gib:.2f} GiB'); short = True
            time.sleep(0.05)
            if until is not None and now() >= until: break
    torch.cuda.synchronize()
    report(f'step to {gib:.2f} GiB')
while until is not None and now() < until: time.sleep(0.1)
report('done')
