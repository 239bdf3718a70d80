set -u
out=$1; export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:$PWD/devrun/lib KILN_CACHE_DIR=/tmp/kiln-cache KILN_NO_PROGRESS=1
export KILN_BIN=$PWD/devrun/kiln KILN_TESTDATA=$PWD/devrun/data
K=$PWD/devrun/kiln T=$PWD/devrun/kiln-tests dir=/dev/shm/kiln-bench; mkdir -p $dir
for p in qwen3-0.6b qwen3-8b; do [ -f $dir/$p.gguf ] || timeout 150 $K synth --preset $p -o $dir/$p.gguf > /dev/null; done
KILN_TEST_DEVICE=cuda:0 timeout 120 $T -j8 --filter 'kernels_matmul/*' > $out/kmm.txt 2>&1; echo "rc=$?" >> $out/kmm.txt
KILN_TEST_DEVICE=cuda:0 timeout 120 $T -j8 --filter 'plan*/*' > $out/plan.txt 2>&1; echo "rc=$?" >> $out/plan.txt
prompt="The quick brown fox jumps over the lazy dog, and then it runs away into the woods behind the old"
timeout 90 $K run $dir/qwen3-8b.gguf -p "$prompt" -n 8 --device cuda:0 --no-echo --profile-tokens 24 > /dev/null 2> $out/prof8b24.txt
for w in old new; do KK=$PWD/devrun/kiln; [ $w = old ] && KK=$PWD/devrun/kiln-old
 for p in qwen3-0.6b qwen3-8b; do timeout 100 $KK bench $dir/$p.gguf -p 24,128,512 -n 32 -r 3 --device cuda:0 -o md > $out/b-$p-$w.md 2>&1; done; done
timeout 60 $K diverge $dir/qwen3-0.6b.gguf --device cuda:0 -n 16 > $out/div.md 2>&1; echo "rc=$?" >> $out/div.md
