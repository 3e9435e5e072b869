#!/usr/bin/env bash
# Refills .gpudeps/ (git-ignored) with the Debian 12 packages listed in jobs/gpu-deps.manifest, for
# jobs/gpu-deps.sh on a GPU machine without apt. Run on a Debian 12 machine with apt access, from
# the repository root. The two Debian 11 libevent packages (group glibc-pre-2.36, only needed on
# hosts with glibc < 2.36) cannot come from Debian 12's archive and are skipped with a warning.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mkdir -p .gpudeps/prefer-system
grep -q '^/.gpudeps/' .git/info/exclude 2>/dev/null || echo '/.gpudeps/' >>.git/info/exclude
while read -r group package version arch _; do
  [[ $group == group || -z $group ]] && continue
  case $group in
    main) dir=.gpudeps ;;
    prefer-system) dir=.gpudeps/prefer-system ;;
    *) echo "gpu-deps-fetch: skipping $package ($group: not in Debian 12's archive)" >&2; continue ;;
  esac
  (cd "$dir" && apt-get download -q "$package=$version" >/dev/null) || echo "gpu-deps-fetch: could not download $package=$version" >&2
done < jobs/gpu-deps.manifest
# Epochs make apt name files like libspdlog1.10_1%3a1.10.0...: plain characters travel more safely.
for f in .gpudeps/*%3a* .gpudeps/prefer-system/*%3a*; do [[ -e $f ]] && mv "$f" "${f//%3a/_}"; done
cp jobs/gpu-deps.manifest .gpudeps/MANIFEST.txt
du -sh .gpudeps
