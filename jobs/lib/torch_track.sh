# shellcheck shell=bash
# Which LibTorch track of jobs/torch-tracks.tsv a node runs: sourced by jobs/setup-node.sh.
# From nvidia-smi: the driver release and the CUDA version it supports, and the smallest compute capability
# among the node's GPUs. No nvidia-smi, or none listed: the first track (cu13), as on a CPU-only machine.

# track_field TRACK COLUMN: a column of the track's row (torch cuda driver_cuda driver full_driver cc requirements).
track_field() {
  local col
  case $2 in
    torch) col=2 ;; cuda) col=3 ;; driver_cuda) col=4 ;; driver) col=5 ;; full_driver) col=6 ;; cc) col=7 ;;
    requirements) col=8 ;; *) return 1 ;;
  esac
  awk -F'\t' -v t="$1" -v c="$col" '$1 == t { print $c; found = 1 } END { exit !found }' "$TRACKS_TABLE"
}

# "12.4" -> 124 (compared as integers; minors are one digit in CUDA versions and compute capabilities)
track_num() { awk -F. '{ printf "%d", $1 * 10 + $2 }' <<<"$1"; }

# choose_torch_track: sets TRACK and TRACK_WHY; returns 0, or 2 where no track runs on this node
# (TRACK empty, TRACK_WHY the driver or GPU found and what each track needs). MERIDIAN_TORCH_TRACK
# overrides the choice.
choose_torch_track() {
  TRACK="" TRACK_WHY=""
  local tracks driver="" cuda="" min_cc="" min_name="" gpus="" line name cc t needs
  tracks=$(awk -F'\t' '/^[a-z]/ { print $1 }' "$TRACKS_TABLE")
  if [[ -n ${MERIDIAN_TORCH_TRACK:-} ]]; then
    if ! grep -qx "$MERIDIAN_TORCH_TRACK" <<<"$tracks"; then
      TRACK_WHY="MERIDIAN_TORCH_TRACK=$MERIDIAN_TORCH_TRACK is not a track of jobs/torch-tracks.tsv ($(echo $tracks | tr ' ' ','))"
      return 2
    fi
    TRACK=$MERIDIAN_TORCH_TRACK
    TRACK_WHY="MERIDIAN_TORCH_TRACK=$TRACK"
    return 0
  fi
  local default
  default=$(head -1 <<<"$tracks")
  if ! command -v nvidia-smi >/dev/null; then
    TRACK=$default
    TRACK_WHY="no nvidia-smi on this node (no NVIDIA driver): the default track"
    return 0
  fi
  # One line per GPU. compute_cap is a field from driver 510 on; older drivers answer the query with an
  # error, and their GPUs are judged by the driver alone.
  if ! gpus=$(nvidia-smi --query-gpu=driver_version,compute_cap,name --format=csv,noheader 2>/dev/null); then
    gpus=$(nvidia-smi --query-gpu=driver_version,name --format=csv,noheader 2>/dev/null | sed 's/, */, ?, /') || gpus=""
  fi
  gpus=$(grep -E '^[0-9]' <<<"$gpus" || true)
  if [[ -z $gpus ]]; then
    TRACK=$default
    TRACK_WHY="nvidia-smi lists no GPU: the default track"
    return 0
  fi
  driver=$(head -1 <<<"$gpus" | cut -d, -f1 | tr -d ' ')
  while IFS= read -r line; do
    cc=$(cut -d, -f2 <<<"$line" | tr -d ' ')
    name=$(cut -d, -f3- <<<"$line" | sed 's/^ *//')
    if [[ $cc =~ ^[0-9]+\.[0-9]$ ]] && { [[ -z $min_cc ]] || (($(track_num "$cc") < $(track_num "$min_cc"))); }; then
      min_cc=$cc min_name=$name
    fi
    [[ -n $min_name ]] || min_name=$name
  done <<<"$gpus"
  # The CUDA version the driver supports, from nvidia-smi's banner ("CUDA Version: 12.4").
  cuda=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9]*\.[0-9]\).*/\1/p' | head -1)
  local node="driver $driver (CUDA ${cuda:-unknown}), $(wc -l <<<"$gpus") GPU(s), the oldest ${min_name}${min_cc:+ (compute capability $min_cc)}"
  # The first track, in the table's order (newest first), whose driver and compute capability this node meets.
  for t in $tracks; do
    if [[ -n $cuda ]]; then
      (($(track_num "$cuda") >= $(track_num "$(track_field "$t" driver_cuda)"))) || continue
    else
      ((${driver%%.*} >= $(track_field "$t" driver))) || continue
    fi
    if [[ -n $min_cc ]]; then (($(track_num "$min_cc") >= $(track_num "$(track_field "$t" cc)"))) || continue; fi
    TRACK=$t
    break
  done
  needs=""
  for t in $tracks; do
    needs+="${needs:+; }$t (torch $(track_field "$t" torch), CUDA $(track_field "$t" cuda)) needs driver $(track_field "$t" driver)+"
    needs+=" (CUDA $(track_field "$t" driver_cuda)+"
    [[ $(track_field "$t" full_driver) != "$(track_field "$t" driver)" ]] && needs+=", $(track_field "$t" full_driver)+ for all of CUDA $(track_field "$t" cuda)"
    needs+=") and compute capability $(track_field "$t" cc)+"
  done
  if [[ -z $TRACK ]]; then
    TRACK_WHY="no track runs on this node: $node. $needs. No PyTorch 2.x build on the Python package index runs there: update the NVIDIA driver (or use a newer GPU)"
    return 2
  fi
  if [[ $TRACK == "$default" ]]; then
    TRACK_WHY="$node: the default track runs here"
  else
    TRACK_WHY="$node: $default cannot run here, $TRACK can. $needs"
  fi
  return 0
}
