#!/usr/bin/env bash
# The GPU measurement of issue 16, in one run on a lent machine with an NVIDIA GPU (prepare here
# with bench/gpu_device_prepare.sh, then run through the device tool with carry [".devpack", ".gl"]
# and this script as the command; it writes its logs under $OUT):
#   1. the devices tandem sees;
#   2. the GPU reference tests (ModelReferenceTest.Gpu*: the reference models packed by the
#      prepare script, standard and flash attention, F16 and Q8_0 caches, within the README's
#      bounds) on that GPU, so that the figures below come from kernels shown right there;
#   3. an 8B-shaped Q4_K_M model made there (`make-model --shape llama-3-8b`; N_LAYER, default 32,
#      keeps fewer layers to fit the time);
#   4. `tandem bench` pp512 and tg128 on the GPU (-ngl 99, --roofline: the GPU's read bandwidth
#      by tandem's read shader; --profile: where a decode step's time goes, by shader) and on the
#      machine's CPU cores (-dev CPU);
#   5. gpu_bench: the read shader and each weight type's products.
set -uo pipefail
out=${OUT:-/tmp/gpu-check}
mkdir -p "$out"
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
if [[ -f .devpack/devbin.tar.xz ]]; then tar -xJf .devpack/devbin.tar.xz; fi
export LD_LIBRARY_PATH="$PWD/.devbin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [[ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]]; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
t=.devbin/tandem
threads=$(nproc)
{
  echo "== devices"; nvidia-smi --query-gpu=name,memory.total --format=csv 2>&1 | head -3
  $t --list-devices
  echo "== GPU reference tests"
  TANDEM_SHARED_DIR="$PWD/.devbin/shared" TANDEM_REFERENCE_SUBSET=1 timeout 300 \
    .devbin/model_reference_test --gtest_filter='ModelReferenceTest.Gpu*'
  echo "== model"
  time $t make-model --shape llama-3-8b --type q4_K_M --n-layer "${N_LAYER:-32}" -o /tmp/8b-q4km.gguf
  echo "== GPU: pp512, tg128"
  $t bench -m /tmp/8b-q4km.gguf -p 512 -n 128 -r 3 -dev Vulkan0 -ngl 99 --roofline --profile
  echo "== CPU ($threads threads): pp512, tg128"
  $t bench -m /tmp/8b-q4km.gguf -p 512 -n 128 -r 3 -dev CPU -t "$threads" --roofline
  echo "== gpu_bench"
  TANDEM_DEVICE=Vulkan0 .devbin/gpu_bench --benchmark_filter='ReadBandwidth|MatVec/(q4_K|q6_K)|MatMul512/q4_K'
} 2>&1 | tee "$out/gpu_check.log"
