#!/usr/bin/env bash
# Unpacks Debian's Catch2 v3 development package (libcatch2-dev from bookworm-backports, built for Debian
# 12) into DIR, without installing it or touching the system's apt sources: a private apt configuration
# under DIR reads only that suite's package list (about 300 KB), downloads the one .deb and
# `dpkg-deb -x` unpacks it. Used by the test that builds part of the test suite against Catch2 v3 on a
# Debian 12 machine, whose own catch2 is v2. Prints the Catch2 CMake package directory on success;
# exits 2 when the archive cannot be reached (no network), 1 on any other failure. Reuses an earlier
# unpack in DIR.
#   usage: tools/catch2_v3_tree.sh DIR
set -euo pipefail
dir=${1:?usage: catch2_v3_tree.sh DIR}
# The suite carries one version at a time (3.7.1 in 2025); any 3.x will do.
pkg=libcatch2-dev${MOEJIT_CATCH2_V3_VERSION:+=$MOEJIT_CATCH2_V3_VERSION}
mirror=${MOEJIT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
cmake_dir="$dir/tree/usr/lib/cmake/Catch2"
if [ -f "$cmake_dir/Catch2Config.cmake" ]; then
  echo "$cmake_dir"
  exit 0
fi
mkdir -p "$dir"/apt/{lists/partial,cache/archives/partial,etc} "$dir/tree"
dir=$(cd "$dir" && pwd)
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror bookworm-backports main" \
  >"$dir/apt/etc/sources.list"
apt_opts=(-q -o "Dir::State::Lists=$dir/apt/lists" -o "Dir::Etc::SourceList=$dir/apt/etc/sources.list"
          -o "Dir::Etc::SourceParts=$dir/apt/etc/none" -o "Dir::Cache=$dir/apt/cache" -o Debug::NoLocking=1
          -o APT::Sandbox::User=root)
if ! timeout 180 apt-get "${apt_opts[@]}" update >"$dir/apt/update.log" 2>&1 ||
   grep -q '^\(Err\|W: Failed\)' "$dir/apt/update.log"; then
  echo "catch2_v3_tree: cannot reach $mirror bookworm-backports (see $dir/apt/update.log)" >&2
  exit 2
fi
(cd "$dir/apt" && timeout 180 apt-get "${apt_opts[@]}" download "$pkg" >"$dir/apt/download.log" 2>&1) || {
  echo "catch2_v3_tree: downloading $pkg failed (see $dir/apt/download.log)" >&2
  exit 1
}
dpkg-deb -x "$dir"/apt/libcatch2-dev_*.deb "$dir/tree"
[ -f "$cmake_dir/Catch2Config.cmake" ] || { echo "catch2_v3_tree: the package has no $cmake_dir" >&2; exit 1; }
echo "$cmake_dir"
