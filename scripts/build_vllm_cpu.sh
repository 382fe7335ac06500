#!/usr/bin/env bash
# Build vLLM's CPU backend from source, for developing and testing cogym's vLLM generation backend on a
# machine without a GPU. A developer tool: CI does not run it. On a GPU machine install the `vllm` extra
# instead (pip install -e ".[vllm]"), which takes vLLM's CUDA wheel.
#
#   scripts/build_vllm_cpu.sh [DIR]        # default DIR: .vllm-cpu in the repository root
#
# It leaves DIR/venv: Python with torch 2.13.0 (CPU), vLLM 0.32.0 built for CPU (the newest release
# whose build pins torch 2.13.0, the local CPU torch) and cogym installed editable with its test extra.
# vLLM 0.32 wants transformers < 5.20, so this venv has its own transformers; cogym's main venv
# keeps its own. Idempotent: each finished step leaves a marker under DIR and is skipped on a rerun.
#
# Time on the 2-core development machine (MAX_JOBS=2): 58 minutes from nothing (3504 s, measured in one
# run into an empty DIR, while other jobs shared the two cores for much of it). oneDNN's 427 objects take
# most of it (about 12 a minute alone), vLLM's 39 kernel objects about 13 minutes; the venv, source and
# requirements 87 s, installing the wheel and cogym and the import check 28 s. A rerun after a finished build
# takes seconds.
#
# What it needs besides the package index:
# - gcc/g++ (12.x), and libnuma's headers (Debian: apt-get install libnuma-dev); the script checks them.
# - oneDNN's source at the tag vLLM's cmake names (v3.13). vLLM's build clones it from GitHub unless
#   FETCHCONTENT_SOURCE_DIR_ONEDNN names a local tree. Give the script one of:
#     ONEDNN_SRC=/path/to/oneDNN-source          a source tree at v3.13, or
#     ONEDNN_GIT=/path/to/oneDNN.git             a clone holding the tag (the script exports it);
#   with neither, it clones https://github.com/uxlfoundation/oneDNN at the tag.
# - vLLM's optional Rust frontend needs crates from crates.io. Cargo runs offline here
#   (CARGO_NET_OFFLINE=true), so that optional extension is skipped and the Python frontend is used.
# - The triton-cpu wheel that vLLM's requirements/cpu.txt lists comes from GitHub; it is left out.
#   vLLM's CPU platform then warns that Triton is missing and runs its other kernels.
# - vLLM's cmake refuses gcc < 12.3 on x86. The development machine has Debian 12's gcc 12.2 and no
#   newer one in its package index, so the script lowers that check to 12.2 in the unpacked source
#   (GCC_MIN=12.3 keeps vLLM's own check). Whether 12.2 compiles every kernel is what the build shows.
set -euo pipefail

VLLM_VERSION=0.32.0
VLLM_SHA256=d2c957d5eee3d0985012151315ddc62cbe0cd368fc96a5fc3510438d9dddf2ad
ONEDNN_TAG=v3.13
REPO="$(cd "$(dirname "$0")/.." && pwd)"
DIR="$(mkdir -p "${1:-$REPO/.vllm-cpu}" && cd "${1:-$REPO/.vllm-cpu}" && pwd)"
PY="${PYTHON:-python3}"
JOBS="${MAX_JOBS:-$(nproc)}"
START=$(date +%s)

if [ ! -f /usr/include/numa.h ]; then  # vLLM's CPU kernels bind threads to NUMA nodes (csrc/cpu/utils.cpp)
    echo "build_vllm_cpu: libnuma's headers are missing (/usr/include/numa.h); install them first:" >&2
    echo "    apt-get install -y libnuma-dev      # Debian/Ubuntu (dnf install numactl-devel on Fedora)" >&2
    exit 1
fi

say() { printf '[build_vllm_cpu %4ss] %s\n' "$(( $(date +%s) - START ))" "$*"; }
done_step() { [ -f "$DIR/.done-$1" ]; }
mark() { touch "$DIR/.done-$1"; }

if ! done_step venv; then
    say "virtual environment in $DIR/venv, torch 2.13.0 (CPU)"
    "$PY" -m venv "$DIR/venv"
    "$DIR/venv/bin/python" -m pip install -q --upgrade pip
    "$DIR/venv/bin/python" -m pip install -q torch==2.13.0
    mark venv
fi
. "$DIR/venv/bin/activate"

SRC="$DIR/vllm-$VLLM_VERSION"
if ! done_step source; then
    say "vLLM $VLLM_VERSION source distribution from PyPI"
    url=$(curl -fsSL https://pypi.org/simple/vllm/ | grep -o "https://[^\"#]*/vllm-$VLLM_VERSION\.tar\.gz" | head -1)
    [ -n "$url" ] || { echo "no vllm-$VLLM_VERSION.tar.gz on https://pypi.org/simple/vllm/" >&2; exit 1; }
    curl -fsSL -o "$DIR/vllm-$VLLM_VERSION.tar.gz" "$url"
    echo "$VLLM_SHA256  $DIR/vllm-$VLLM_VERSION.tar.gz" | sha256sum -c - >/dev/null
    rm -rf "$SRC" && tar -xzf "$DIR/vllm-$VLLM_VERSION.tar.gz" -C "$DIR"
    mark source
fi

ONEDNN="$DIR/oneDNN-$ONEDNN_TAG"
if ! done_step onednn; then
    rm -rf "$ONEDNN"
    if [ -n "${ONEDNN_SRC:-}" ]; then
        say "oneDNN source from $ONEDNN_SRC"
        cp -a "$ONEDNN_SRC" "$ONEDNN"
    elif [ -n "${ONEDNN_GIT:-}" ]; then
        say "oneDNN $ONEDNN_TAG exported from $ONEDNN_GIT"
        mkdir -p "$ONEDNN" && git -C "$ONEDNN_GIT" archive "$ONEDNN_TAG" | tar -x -C "$ONEDNN"
    else
        say "oneDNN $ONEDNN_TAG cloned from GitHub"
        git clone -q --depth 1 --branch "$ONEDNN_TAG" https://github.com/uxlfoundation/oneDNN "$ONEDNN"
    fi
    mark onednn
fi

GCC_MIN="${GCC_MIN:-12.2}"
sed -i "s/CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 12\.[0-9]*))/CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL $GCC_MIN))/" \
    "$SRC/cmake/cpu_extension.cmake"

# gcc 12.2 (not 12.3) stops with an internal compiler error (in lookup_template_class_1) on a constexpr
# local used as an array bound inside a lambda of a function template: sgl-kernels/flash_mla.cpp's
# kBLOCK_H_MAX. Making it `static constexpr` (same value, no capture) compiles on 12.2.
sed -i 's/^  constexpr int64_t kBLOCK_H_MAX = 16;/  static constexpr int64_t kBLOCK_H_MAX = 16;/' \
    "$SRC/csrc/cpu/sgl-kernels/flash_mla.cpp"

# Without triton-cpu, vLLM 0.32.0's CPU platform stands a Python function in for the Triton kernel that
# maps tokens to KV-cache slots, and calls it with the kernel's arguments in the kernel's order
# (vllm/triton_utils/dispatcher.py). The stand-in (vllm/utils/cpu_triton_utils.py) still takes an older
# order (block_size before slot_mapping), so its first step fails ("Boolean value of Tensor with more than
# one value is ambiguous"). Rewrite it in the kernel's order, same C++ op, padding as the kernel does.
python - "$SRC/vllm/utils/cpu_triton_utils.py" <<'EOF'
import sys
from pathlib import Path
path = Path(sys.argv[1])
text = path.read_text()
if "cogym: in the Triton kernel's argument order" not in text:
    start = text.index("def _compute_slot_mapping_kernel_impl(")
    end = text.index("def _ensure_int64(")
    text = text[:start] + '''def _compute_slot_mapping_kernel_impl(
    num_tokens: int,
    max_num_tokens: int,
    query_start_loc: torch.Tensor,  # [num_reqs + 1], int32
    positions: torch.Tensor,  # [num_tokens], int64
    block_table: torch.Tensor,  # [max_num_reqs, max_num_blocks_per_req], int32
    block_table_stride: int,  # max_num_blocks_per_req
    slot_mapping: torch.Tensor,  # [max_num_tokens], int64
    KV_CACHE_BLOCK_SIZE: int,
    TOTAL_CP_WORLD_SIZE: int = 1,
    TOTAL_CP_RANK: int = 0,
    CP_KV_CACHE_INTERLEAVE_SIZE: int = 1,
    PAD_ID: int = -1,
    BLOCK_SIZE: int = 1024,
) -> None:
    # cogym: in the Triton kernel's argument order (ComputeSlotMappingKernel.kernel)
    assert TOTAL_CP_WORLD_SIZE == 1, "Context Parallelism is not supported on CPU."
    torch.ops._C.compute_slot_mapping_kernel_impl(
        query_start_loc, positions, block_table, slot_mapping, KV_CACHE_BLOCK_SIZE
    )
    slot_mapping[num_tokens:max_num_tokens].fill_(PAD_ID)


''' + text[end:]
    path.write_text(text)
EOF

# On x86 vLLM builds three variants of its kernels (_C: AVX512-BF16 and AMX, _C_AVX512, _C_AVX2) and
# imports the one the CPU supports (vllm/platforms/cpu.py). The script builds only that one, a third of
# the compile time; the wheel then runs on CPUs of this class. VLLM_CPU_VARIANT=all builds all three.
if [ "$(uname -m)" = x86_64 ] && [ "${VLLM_CPU_VARIANT:-}" != all ]; then
    case "$(grep -m1 '^flags' /proc/cpuinfo)" in
        *avx512_bf16*) variant=_C ;;
        *avx512f*) variant=_C_AVX512 ;;
        *) variant=_C_AVX2 ;;
    esac
    variant="${VLLM_CPU_VARIANT:-$variant}"
    python - "$SRC/setup.py" "$variant" <<'EOF'
import sys
from pathlib import Path
path, keep = Path(sys.argv[1]), sys.argv[2]
lines = path.read_text().splitlines(keepends=True)
x86 = next(i for i, line in enumerate(lines) if 'platform.machine() in ("x86_64", "AMD64")' in line)
block = [i for i in range(x86 + 1, x86 + 4) if 'CMakeExtension(name="vllm._C' in lines[i]]
if len(block) == 3:  # not patched yet: keep the one variant
    for i in reversed(block):
        if f'name="vllm.{keep}"' not in lines[i]:
            del lines[i]
    path.write_text("".join(lines))
EOF
    say "x86 kernels: building vllm.$variant only (what vLLM imports on this CPU)"
fi

if ! done_step deps; then
    say "build and runtime requirements (requirements/common.txt, cpu.txt less torch and triton)"
    grep -v -E '^(torch|torchaudio|torchvision|torchcodec|triton)\b|^triton @|^-r ' "$SRC/requirements/cpu.txt" \
        > "$DIR/cpu-requirements.txt"
    pip install -q "cmake>=3.26" ninja "setuptools==78.1.1" "setuptools-scm>=8" "setuptools-rust>=1.9" wheel \
        packaging jinja2
    pip install -q -r "$SRC/requirements/common.txt" -r "$DIR/cpu-requirements.txt"
    mark deps
fi

if ! done_step build; then
    say "building vLLM for CPU with $JOBS jobs (the long step)"
    (cd "$SRC" && VLLM_TARGET_DEVICE=cpu MAX_JOBS="$JOBS" FETCHCONTENT_SOURCE_DIR_ONEDNN="$ONEDNN" \
        CARGO_NET_OFFLINE="${CARGO_NET_OFFLINE:-true}" \
        SETUPTOOLS_SCM_PRETEND_VERSION="$VLLM_VERSION" \
        pip wheel -v --no-build-isolation --no-deps . -w "$DIR/wheels" > "$DIR/build.log" 2>&1) \
        || { tail -40 "$DIR/build.log" >&2; echo "build failed: the whole log is $DIR/build.log" >&2; exit 1; }
    mark build
fi

if ! done_step install; then
    say "installing the wheel and cogym (editable, test extra)"
    pip install -q --no-deps --force-reinstall "$DIR"/wheels/vllm-*.whl
    pip install -q -e "$REPO[test]" > "$DIR/install.log" 2>&1 || { tail -20 "$DIR/install.log" >&2; exit 1; }
    mark install
fi

say "check: import vllm on the CPU platform"
python - <<'EOF'
import vllm
from vllm.platforms import current_platform
print(f"vllm {vllm.__version__} on {current_platform.device_type}")
assert current_platform.device_type == "cpu", current_platform
EOF
say "done: . $DIR/venv/bin/activate"
