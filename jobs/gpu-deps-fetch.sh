#!/usr/bin/env bash
# Refills .gpudeps/ (git-ignored) with the Debian packages listed in jobs/gpu-deps.manifest, for
# jobs/gpu-deps.sh on a GPU machine without apt. Run on a Debian 12 machine with apt access, from
# the repository root. Every file is checked against the manifest's sha256; a file already there with
# the right sha256 is kept, and .deb files the manifest does not name are removed (gpu-deps.sh unpacks
# every .deb it finds, so an old version left behind would be unpacked too).
# Group glibc-pre-2.36 (Debian 11 builds of libevent and libarchive, for hosts with glibc < 2.36) is not
# in Debian 12's archive: it is fetched with a private apt configuration in a temporary directory (its
# own sources list, package lists and cache; the machine's apt setup is not touched) naming the same
# archives as this machine's Debian 12 sources, for suites bullseye and bullseye-security. Where that
# fails, those packages are skipped with a warning (only hosts with glibc < 2.36 need them).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mkdir -p .gpudeps/prefer-system .gpudeps/glibc-pre-2.36  # git-ignored (.gitignore); works without a .git too

# apt-get download names a version with an epoch 1%3a2.1.5-2: plain characters travel more safely.
deb_name() { echo "${1}_${2//:/_}_${3}.deb"; }  # deb_name PACKAGE VERSION ARCH
dir_of() {
  case $1 in
    main) echo .gpudeps ;;
    prefer-system | glibc-pre-2.36) echo ".gpudeps/$1" ;;
    *) return 1 ;;
  esac
}

old=$(mktemp -d)
trap 'rm -rf "$old"' EXIT
old_apt=()
setup_bullseye() {  # a private apt configuration for Debian 11; returns 1 when it cannot be had
  local uris
  # The archive and security URIs this machine's apt uses for bookworm (deb822 or one-line sources).
  uris=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE)' 2>/dev/null |
    awk '$2 ~ /^bookworm(-security)?$/ { print $1, $2 }' | sort -u)
  [[ -n $uris ]] || return 1
  mkdir -p "$old"/lists/partial "$old"/cache/archives/partial "$old"/preferences.d
  awk '{ s = $2; sub(/^bookworm/, "bullseye", s); printf "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s %s main\n", $1, s }' \
    <<<"$uris" >"$old/sources.list"
  old_apt=(-o "Dir::Etc::SourceList=$old/sources.list" -o Dir::Etc::SourceParts=/nonexistent
    -o "Dir::State::Lists=$old/lists" -o "Dir::Cache=$old/cache" -o Dir::State::Status=/dev/null
    -o Dir::Etc::Preferences=/dev/null -o "Dir::Etc::PreferencesParts=$old/preferences.d"
    -o APT::Architectures::=amd64)
  apt-get "${old_apt[@]}" update -q >"$old/update.log" 2>&1 || { cat "$old/update.log" >&2; return 1; }
}
bullseye="unset"

wanted=" "
fail=0
while read -r group package version arch sha; do
  [[ -z $group || $group == \#* ]] && continue
  dir=$(dir_of "$group") || { echo "gpu-deps-fetch: unknown group '$group' ($package)" >&2; fail=1; continue; }
  f=$dir/$(deb_name "$package" "$version" "$arch")
  wanted+="$f "
  [[ -f $f && $(sha256sum "$f" | cut -c1-64) == "$sha" ]] && continue
  rm -f "$f"
  apt=()
  if [[ $group == glibc-pre-2.36 ]]; then
    if [[ $bullseye == unset ]]; then
      if setup_bullseye; then bullseye=ok; else bullseye=no; fi
    fi
    if [[ $bullseye == no ]]; then
      echo "gpu-deps-fetch: skipping $package ($group: Debian 11's archive could not be reached)" >&2
      continue
    fi
    apt=("${old_apt[@]}")
  fi
  (cd "$dir" && apt-get "${apt[@]}" download -q "$package=$version" >/dev/null) ||
    { echo "gpu-deps-fetch: could not download $package=$version" >&2; fail=1; continue; }
  got=$dir/${package}_${version//:/%3a}_${arch}.deb
  [[ $got == "$f" ]] || mv "$got" "$f"
  if [[ $(sha256sum "$f" | cut -c1-64) != "$sha" ]]; then
    echo "gpu-deps-fetch: $f does not have the manifest's sha256 (removed)" >&2
    rm -f "$f"
    fail=1
  fi
done < jobs/gpu-deps.manifest
for f in .gpudeps/*.deb .gpudeps/prefer-system/*.deb .gpudeps/glibc-pre-2.36/*.deb; do
  [[ -e $f && $wanted != *" $f "* ]] && { echo "gpu-deps-fetch: removing $f (not in the manifest)" >&2; rm -f "$f"; }
done
cp jobs/gpu-deps.manifest .gpudeps/MANIFEST.txt
du -sh .gpudeps
echo "gpu-deps-fetch: $(du -sb .gpudeps | cut -f1) bytes (the GPU machine's carry limit is 64 MiB with the work tree)"
exit $fail
