#!/usr/bin/env bash
# Installs Ferry's build dependencies from Debian 12 packages, non-interactively, as root.
# Only what is missing is installed; a machine that has everything is left untouched.
# `scripts/setup.sh --list` prints the package list (scripts/check_deps.sh reads it) and installs nothing.
set -euo pipefail

packages=(build-essential cmake libtbb-dev libdnnl-dev libyaml-cpp-dev libgtest-dev nlohmann-json3-dev
          libcli11-dev libfmt-dev
          ocl-icd-opencl-dev)  # oneDNN's CMake config calls find_package(OpenCL); libdnnl-dev only Recommends it
case "${1:-}" in
  "") ;;
  --list) printf '%s\n' "${packages[@]}"; exit 0 ;;
  *) echo "setup: unknown argument '$1' (usage: $0 [--list])" >&2; exit 2 ;;
esac
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all build dependencies are installed"
  exit 0
fi
echo "setup: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "setup: need root to install packages (try: sudo $0)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
