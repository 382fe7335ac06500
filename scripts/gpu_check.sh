#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one command, on a machine with one (about 10 minutes on one H200):
#   1. the GPU-marked tests (tests/gpu/: vLLM's sleep mode frees the engine's memory and wakes to the
#      same samples; the collective sync's buffer on the device), and the vLLM backend contract with its
#      engine on the GPU (tests/agents/test_backend_contract.py: log-probs, greedy answers, weight updates,
#      LoRA adapters, and an engine that takes a weight broadcast itself, bit for bit);
#   2. the scale benchmarks: benchmarks/ray_overhead.py --gpu (Ray workers and learner actors sharing
#      the GPU: learners colocated, learner groups of 1 and 2; weight sync of the tiny model and a
#      100M model through shared memory, the object store and a collective group) and
#      benchmarks/rollout_vllm_vs_hf.py (vLLM against transformers' generate).
# Run from a checkout with cogym installed with the vllm, ray, bench and test extras:
#   pip install -e ".[test,ray,bench,vllm]" && scripts/gpu_check.sh
# Each step has a time limit (600 s in all); the script goes on after a failure and exits 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'gpu_check: torch sees no CUDA GPU')" || exit 2
failed=0
step() {  # step SECONDS NAME COMMAND...
  local limit=$1 name=$2; shift 2
  echo "== $name" >&2
  local t0=$SECONDS
  timeout "$limit" "$@"; local rc=$?
  echo "== $name: exit $rc in $((SECONDS - t0)) s" >&2
  [ "$rc" -eq 0 ] || failed=1
}
step 150 "GPU tests" "$PY" -m pytest -q -m gpu -p no:cacheprovider tests
step 150 "vLLM contract on the GPU" "$PY" -m pytest -q -p no:cacheprovider tests/agents/test_backend_contract.py
step 200 "Ray overhead on the GPU" "$PY" benchmarks/ray_overhead.py --gpu --iterations 4 --workers 1 \
  --match "learners colocated|learner group" --sync-models tiny,qwen-100m --sync-repeats 3
step 100 "vLLM against generate" "$PY" benchmarks/rollout_vllm_vs_hf.py
exit $failed
