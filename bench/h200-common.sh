# Sourced by the bench/h200-issue14-*.sh scripts on the H200: the environment for the
# binaries in devrun/ (kiln, kiln-tests, lib/, data/), synthesized models in /dev/shm, and
# the CUDA suites. Expects $out (the output folder) set.
# the pack bench/devrun.sh leaves (binaries and libraries), unpacked once per machine
[ -x devrun/kiln ] || [ ! -f devrun/pack.tar.xz ] || tar -xJf devrun/pack.tar.xz -C devrun
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:$PWD/devrun/lib KILN_CACHE_DIR=/tmp/kiln-cache KILN_NO_PROGRESS=1
export KILN_BIN=$PWD/devrun/kiln KILN_TESTDATA=$PWD/devrun/data
K=$PWD/devrun/kiln T=$PWD/devrun/kiln-tests dir=/dev/shm/kiln-bench
mkdir -p "$out" $dir
L=/opt/peer/llama.cpp/build/bin/llama-bench # llama_build's
nvidia-smi --query-gpu=name,memory.total --format=csv > $out/gpu.txt 2>&1
prompt="The quick brown fox jumps over the lazy dog, and then it runs away into the woods behind the old"
# synth PRESET...: the presets' GGUFs in $dir, once per machine
synth() { for p in "$@"; do [ -f $dir/$p.gguf ] || timeout 150 $K synth --preset $p -o $dir/$p.gguf > /dev/null; done; }
# suites JOBS PLAN_TIMEOUT: the kernel, plan and device suites on cuda:0, each to its file with its rc
suites() {
  KILN_TEST_DEVICE=cuda:0 timeout 200 $T -j$1 --filter 'kernels*/*' > $out/kern.txt 2>&1; echo "rc=$?" >> $out/kern.txt
  KILN_TEST_DEVICE=cuda:0 timeout $2 $T -j$1 --filter 'plan*/*' > $out/plan.txt 2>&1; echo "rc=$?" >> $out/plan.txt
  timeout 60 $T --filter 'cuda/*' > $out/cuda.txt 2>&1; echo "rc=$?" >> $out/cuda.txt
}
# stamp WHAT: a line "WHAT at N s" (seconds since this file was sourced) in $out/times.txt
start=$(date +%s)
stamp() { echo "$1 at $(( $(date +%s) - start )) s" >> $out/times.txt; }
# llama_build / llama_wait: llama.cpp built in the background (.peers), its log in $out
llama_build() { (bash .peers/build-llamacpp-cuda.sh > $out/llbuild.txt 2>&1) & llama_pid=$!; }
llama_wait() { wait $llama_pid; stamp llbuild; }
# tarball: $out as $out.tar (what comes back even where a later step runs past the limit)
tarball() { tar cf $out.tar -C $(dirname $out) $(basename $out); }
# sbs NAME P DEVICES MODELS...: kiln beside llama-bench (.peers/side-by-side.sh, tg32, medians
# of 3) on the presets' GGUFs, to $out/sbs-NAME.md; after llama_wait
sbs() { # name P devices models...
  local name=$1 p=$2 devs=$3; shift 3
  local ms=""; for m in "$@"; do ms="$ms $dir/$m.gguf"; done
  KILN=$K MODELS="$ms" P=$p N=32 R=3 DEVICES="$devs" timeout 200 bash .peers/side-by-side.sh > $out/sbs-$name.md 2>&1
  stamp "sbs $name"
  tarball
}
