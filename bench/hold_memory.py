"""Another program on the GPU, for the expert cache's squeeze (bench/h200-issue20-cache.sh):
holds device memory on a schedule of steps WHEN:GiB, then exits. WHEN is seconds from the
start, or with --log FILE the lines FILE has (kiln run --token-log: tokens generated). With
--leave G, first the card is filled until G GiB are free (the base hold, measured by the
driver's count after this program's own context), and each step's GiB are held on top of
it. A step that cannot be had at once takes what it can and keeps asking (as a program
would while kiln gives memory back). Each change printed with the card's free memory.
  python3 bench/hold_memory.py --log /tmp/tokens.log --leave 24 0:0 100:2 250:0 --until 400

Memory is held in pieces of 64 MiB (the last of a step in 2 MiB ones): a piece of 1 MiB
each, as this took before, cost the card about a sixth more than it held (55 GiB held took
64 of it)."""
import os, sys, time
os.environ['PYTORCH_NO_CUDA_MEMORY_CACHING'] = '1'  # each piece its own cudaMalloc, freed when dropped
import torch

args = sys.argv[1:]
log = until = leave = None
if args[:1] == ['--log']: log, args = args[1], args[2:]
if '--leave' in args:
    i = args.index('--leave'); leave = float(args[i + 1]); del args[i:i + 2]
if '--until' in args:
    i = args.index('--until'); until = float(args[i + 1]); del args[i:i + 2]
plan = [(float(w), float(g)) for w, g in (a.split(':') for a in args)]
MiB, BIG = 1 << 20, 64
base, held, t0 = [], [], time.time()  # pieces: (tensor, MiB)

def now():
    if not log: return time.time() - t0
    try:
        with open(log) as f: return sum(1 for _ in f)
    except OSError: return 0

def mib(pieces): return sum(m for _, m in pieces)

def report(what):
    free, total = torch.cuda.mem_get_info()
    print(f'{time.time() - t0:8.2f} s, at {now():6.0f}: {what}; holding {(mib(base) + mib(held)) / 1024:.2f} GiB, '
          f'the card has {free / 2**30:.2f} of {total / 2**30:.2f} GiB free', flush=True)

def take(pieces, want_mib, give_up):
    """Grows pieces to want_mib (64 MiB at a time, then 2): False where give_up() came first."""
    short = False
    while mib(pieces) < want_mib:
        step = BIG if want_mib - mib(pieces) >= BIG else 2
        try: pieces.append((torch.empty(step * MiB, dtype=torch.uint8, device='cuda'), step))
        except Exception:  # out of memory (without the cache torch raises AcceleratorError)
            if not short: report(f'short of {want_mib / 1024:.2f} GiB'); short = True
            time.sleep(0.05)
            if give_up(): return False
    return True

torch.cuda.init()
torch.empty(1, device='cuda')  # the context first: its memory is not the hold's
if leave is not None:
    free, _ = torch.cuda.mem_get_info()
    take(base, max(0, int((free - leave * 2**30) / MiB) // 2 * 2), lambda: False)
    torch.cuda.synchronize()
    report(f'base hold, {leave:.2f} GiB left free')
for when, gib in plan:
    while now() < when: time.sleep(0.02)
    want = int(gib * 1024) // 2 * 2
    while mib(held) > want: held.pop()
    torch.cuda.empty_cache()
    take(held, want, lambda: until is not None and now() >= until)
    torch.cuda.synchronize()
    report(f'step to {gib:.2f} GiB over the base')
while until is not None and now() < until: time.sleep(0.1)
report('done')
