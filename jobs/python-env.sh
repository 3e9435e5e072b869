# Sourced by the job scripts: meridian's Python environment (jobs/setup-node.sh installs it; CMake finds
# it at the same place) first on the PATH, so `python3` is the PyTorch 2.x that meridian is built
# against, with h5py, yaml and sentencepiece. MERIDIAN_VENV=DIR names another place.
export MERIDIAN_VENV=${MERIDIAN_VENV:-/opt/meridian/venv}
export PATH="$MERIDIAN_VENV/bin:$PATH"
