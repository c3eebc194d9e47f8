#!/usr/bin/env bash
# Runs COMMAND as on a host without CUDA: in a private mount namespace where the CUDA runtime,
# NCCL and the driver library (every libcudart/libnccl/libcuda the loader knows, and those in
# the folders given with -d) are gone. A folder of CUDA's own is hidden under an empty tmpfs; a
# library in a shared system folder is covered with /dev/null. Exit 77 when no mount namespace
# can be made here (not root, no user namespaces).
# Usage: hide_cuda.sh [-d FOLDER]... COMMAND [ARGS...]
set -euo pipefail
dirs=()
while [[ ${1:-} == -d ]]; do dirs+=("$2"); shift 2; done
if [[ ${DISTRUN_IN_HIDDEN_CUDA:-} != 1 ]]; then
  unshare -m true 2>/dev/null || unshare -rm true 2>/dev/null ||
    { echo "SKIP: cannot make a mount namespace here (unshare -m), so CUDA cannot be hidden"; exit 77; }
  flag=-m
  unshare -m true 2>/dev/null || flag=-rm
  args=()
  for d in "${dirs[@]}"; do args+=(-d "$d"); done
  DISTRUN_IN_HIDDEN_CUDA=1 exec unshare $flag "$0" "${args[@]}" "$@"
fi
# Inside the namespace: the libraries to hide, resolved to real files.
libs=()
while read -r path; do libs+=("$path"); done < <(
  { ldconfig -p | sed -n 's/.*\(libcudart\|libnccl\|libcuda\)\.so.* => \(.*\)$/\2/p'
    for d in "${dirs[@]}"; do ls "$d"/libcudart.so* "$d"/libnccl.so* "$d"/libcuda.so* 2>/dev/null || true; done
  } | xargs -r -n1 realpath -e 2>/dev/null | sort -u)
for lib in "${libs[@]}"; do
  [[ -e $lib ]] || continue  # its folder was hidden already
  folder=$(dirname "$lib")
  if [[ -e $folder/libc.so.6 || $folder == /usr/lib* || $folder == /lib* ]]; then
    mount --bind /dev/null "$lib"
  else
    mount -t tmpfs -o size=1m distrun-no-cuda "$folder"
  fi
done
for lib in "${libs[@]}"; do
  if [[ -s $lib ]]; then echo "FAIL: $lib is still readable in the namespace"; exit 1; fi
done
exec "$@"
