#!/usr/bin/env bash
# Installs everything meridian needs to build, test and run, on Debian 12:
#  1. the Debian packages below (apt-get);
#  2. meridian's Python environment, $MERIDIAN_VENV (default /opt/meridian/venv), from the Python package
#     index: the LibTorch track this node runs (jobs/torch-tracks.tsv: cu13, PyTorch 2.15.0 with CUDA 13.2,
#     for driver 580+ and compute capability 7.5+; cu128, PyTorch 2.10.0 with CUDA 12.8, for driver 525+
#     and 7.0+), chosen from nvidia-smi (the driver's CUDA version, the oldest GPU), cu13 where there is no
#     GPU; its LibTorch is what meridian builds against, and NCCL, the CUDA runtime and the CUDA headers
#     come with it as wheels, gathered into one root at $MERIDIAN_VENV/cuda (jobs/lib/cuda_toolkit.sh), so
#     the node needs no CUDA toolkit; and the packages of the tests'
#     references. Every version is pinned in the track's jobs/python-requirements-<track>.txt. CMake, the
#     tests and the job scripts find it there.
# Run it on each node (VM) of a cluster (or once where the environment is on a shared file system).
# Idempotent: a second run installs nothing (apt skips what is present; the environment records the
# requirements it was made from). An environment of another track is made anew.
# Usage: jobs/setup-node.sh [--fuzz | --print-track]   (as root, or as a user with sudo; MERIDIAN_VENV=DIR for
#        another place, MERIDIAN_TORCH_TRACK=cu13|cu128 to choose the track)
#   --fuzz: also clang and libFuzzer, for tests/fuzz/build.sh and tests/sanitize.sh (developers; the test
#           command needs neither)
#   --print-track: print the track this node gets and why, install nothing (exit 2 where none runs)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  python3-venv                       # the project's Python environment: PyTorch 2.x with CUDA (below)
  libopenmpi-dev openmpi-bin         # MPI bootstrap, CPU collectives
  libhdf5-openmpi-dev hdf5-tools     # parallel HDF5 (MPI-IO)
  libopencv-dev                      # image decoding
  libturbojpeg0-dev                  # JPEG columns of datasets: encode in prep, decode in the loader
  libarchive-dev                     # webdataset tar shards as prep input
  libtiff-dev                        # multi-band TIFF (OpenCV reads at most 4 bands)
  libcxxopts-dev                     # CLI
  libgtest-dev libgmock-dev googletest
  libspdlog-dev libfmt-dev
  nlohmann-json3-dev libyaml-cpp-dev
  libsentencepiece-dev sentencepiece
  libprotobuf-dev                    # TensorBoard event files (wire format written by hand)
  clang-format                       # the test suite checks the formatting (tests/tools/format_check.sh)
  slurm-wlm munge                    # Slurm + its authentication: tests/cluster/slurm_test.sh runs a one-node cluster
  iproute2 iputils-ping              # the virtual cluster of tests/cluster (namespaces, links, tc)
  chromium fonts-dejavu-core         # tests/report opens the run report in headless Chromium; not for the build
)
print_track=0
if [[ ${1:-} == --fuzz ]]; then
  PACKAGES+=(clang libfuzzer-14-dev time)  # the fuzz targets' libFuzzer build, ASan/UBSan/TSan (tests/fuzz); time for the campaign's CPU seconds
elif [[ ${1:-} == --print-track ]]; then
  print_track=1
elif [[ $# -gt 0 ]]; then
  echo "setup-node.sh: unknown argument '$1' (the options are --fuzz and --print-track)" >&2
  exit 2
fi

# The LibTorch track, first: a node no track runs on is told so before anything is installed.
TRACKS_TABLE=$root/jobs/torch-tracks.tsv
source "$root/jobs/lib/torch_track.sh"
rc=0
choose_torch_track || rc=$?
if ((print_track)); then
  echo "${TRACK:-none}: $TRACK_WHY"
  exit "$rc"
fi
if ((rc != 0)); then
  echo "setup-node.sh: $TRACK_WHY" >&2
  exit "$rc"
fi
echo "setup-node.sh: torch track $TRACK (torch $(track_field "$TRACK" torch), CUDA $(track_field "$TRACK" cuda)): $TRACK_WHY"

if [[ ! -r /etc/os-release ]] || ! grep -qiE '^(ID|ID_LIKE)=.*debian' /etc/os-release; then
  echo "setup-node.sh: this script installs Debian 12 packages with apt-get; this system is not Debian-based." >&2
  echo "Install the equivalents of: ${PACKAGES[*]}" >&2
  exit 2
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "setup-node.sh: not root and sudo is missing" >&2; exit 2; }
  SUDO="sudo"
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup-node.sh: all ${#PACKAGES[@]} Debian packages already installed"
else
  echo "setup-node.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The Python environment. Its stamp is the hash of the track's requirements file and the Python that
# made it: when both match, nothing is downloaded.
source "$root/jobs/python-env.sh"  # MERIDIAN_VENV and its default, shared with the job scripts
source "$root/jobs/lib/cuda_toolkit.sh"
venv=$MERIDIAN_VENV
requirements=$root/$(track_field "$TRACK" requirements)
python=/usr/bin/python3  # Debian's, which python3-venv belongs to
stamp=$({ sha256sum <"$requirements"; "$python" --version; } | sha256sum | cut -c1-16)
if [[ -f $venv/.meridian-stamp && $(cat "$venv/.meridian-stamp") == "$stamp" && -e $venv/cuda/include/cuda.h ]]; then
  echo "setup-node.sh: Python environment $venv up to date (track $TRACK, torch $(sed -n 's/^torch==//p' "$requirements"))"
  exit 0
fi
wheels=$(grep -c '==' "$requirements")
echo "setup-node.sh: installing the Python environment $venv: $wheels pinned packages from the Python package index" \
  "(${requirements#"$root/"}), torch $(sed -n 's/^torch==//p' "$requirements") with CUDA $(track_field "$TRACK" cuda)" \
  "among them: about 3.3 GB to download, 6.4 GB on disk"
start=$SECONDS
if [[ ! -w $(dirname "$venv") && -n $SUDO ]]; then
  $SUDO mkdir -p "$venv" && $SUDO chown "$(id -u):$(id -g)" "$venv"
fi
rm -f "$venv/.meridian-stamp"
# Another track's environment is made anew: its nvidia wheels are other packages, not other versions.
clear=()
[[ -f $venv/.meridian-track && $(cat "$venv/.meridian-track") != "$TRACK" ]] && clear=(--clear)
"$python" -m venv "${clear[@]}" "$venv"
# Byte-compiled afterwards on every core: pip compiles the 14,000 .py files one at a time (25 s of the
# install on 2 cores; 14 s so). A file that does not compile (a package's Python 2 test data) is left,
# as pip leaves it.
"$venv/bin/pip" install --no-input --disable-pip-version-check --progress-bar off -q --no-compile -r "$requirements"
"$venv/bin/python" -m compileall -q -j 0 "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
  >/dev/null || true
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cuda_version=$(cuda_toolkit_view "$site" "$venv/cuda") || {
  echo "setup-node.sh: the environment's nvidia wheels lack CUDA runtime headers (cuda.h, cuda_runtime_api.h," \
    "crt/host_config.h: nvidia-cuda-runtime, nvidia-cuda-crt or nvidia-cuda-nvcc-cu12, pinned in ${requirements#"$root/"})" >&2
  exit 1
}
echo "$TRACK" >"$venv/.meridian-track"
echo "$stamp" >"$venv/.meridian-stamp"
echo "setup-node.sh: Python environment installed in $((SECONDS - start)) s ($(du -sh "$venv" | cut -f1) in $venv);" \
  "CUDA $cuda_version headers and libraries of its wheels at $venv/cuda"
"$venv/bin/python" -c 'import torch; print("setup-node.sh: torch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version(), "NCCL", ".".join(map(str, torch.cuda.nccl.version())))'
