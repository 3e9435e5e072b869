#!/usr/bin/env bash
# Installs every Debian 12 package meridian needs to build, test and run.
# Run it on each node (VM) of a cluster. Idempotent: packages already present are skipped by apt.
# Usage: jobs/setup-node.sh            (as root, or as a user with sudo)
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libtorch-dev                       # LibTorch (Debian: 1.13, CPU)
  libopenblas0-openmp                # fast BLAS for Debian's LibTorch (15x over reference BLAS)
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
  python3-h5py                       # tests read checkpoints as users do (docs/formats.md)
  python3-yaml                       # tests read resolved configs
  clang-format                       # the test suite checks the formatting (tests/tools/format_check.sh)
  slurm-wlm munge                    # Slurm + its authentication: tests/cluster/slurm_test.sh runs a one-node cluster
  iproute2 iputils-ping              # the virtual cluster of tests/cluster (namespaces, links, tc)
  python3-torch                      # the PyTorch references of jobs/bench and tests (same 1.13 as LibTorch); not for the build
  python3-sentencepiece              # the Hugging Face SigLIP reference of tests/models (its tokenizer rules)
  chromium fonts-dejavu-core         # tests/report opens the run report in headless Chromium; not for the build
)

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
  echo "setup-node.sh: all ${#PACKAGES[@]} packages already installed"
  exit 0
fi
echo "setup-node.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "setup-node.sh: done"
