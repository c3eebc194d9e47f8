#!/bin/sh
# The device choice through the real programs, over the CUDA stand-in (tests/nccl/fake: two
# devices, or those CUDA_VISIBLE_DEVICES lists), first on LD_LIBRARY_PATH: the devices the
# launcher counts for --nproc-per-node gpu, and so scripts/gpu/visible_gpus.sh, are those CUDA
# shows the process; Gloo with --device cuda shares 2 devices among 4 ranks; NCCL refuses that.
# Usage: device_choice_e2e.sh DISTRUN REPO_ROOT
distrun=$1
root=$2
count() { sh "$root/scripts/gpu/visible_gpus.sh" "$distrun" "$root" 2>/dev/null; }
fail=0
expect() {  # WANT GOT WHAT
  if [ "$1" = "$2" ]; then echo "ok: $3: $2"; else echo "FAIL: $3: $2, expected $1"; fail=1; fi
}
expect 2 "$(unset CUDA_VISIBLE_DEVICES; count)" "every device"
expect 1 "$(CUDA_VISIBLE_DEVICES=1 count)" "CUDA_VISIBLE_DEVICES=1"
expect 2 "$(CUDA_VISIBLE_DEVICES=0,1 count)" "CUDA_VISIBLE_DEVICES=0,1"
expect 0 "$(CUDA_VISIBLE_DEVICES= count)" "CUDA_VISIBLE_DEVICES empty"
out=$(CUDA_VISIBLE_DEVICES= "$distrun" --nproc-per-node gpu --check "$root/configs/demo.yaml" 2>&1)
rc=$?
expect 2 "$rc" "--nproc-per-node gpu with none visible exits"
case $out in *"no CUDA device is visible"*"CUDA_VISIBLE_DEVICES="*) echo "ok: the message names CUDA_VISIBLE_DEVICES" ;;
  *) echo "FAIL: message: $out"; fail=1 ;; esac
scenario=$root/tests/launcher/data/all_reduce_4.yaml
out=$(timeout 120 "$distrun" --device cuda --backend gloo "$scenario" 2>&1)
case $out in *"Rank 3 after all_reduce"*"[ 6. 10. 14. 18.]"*) echo "ok: Gloo, 4 ranks on 2 devices" ;;
  *) echo "FAIL: Gloo with --device cuda on 4 ranks: $out"; fail=1 ;; esac
out=$(timeout 120 "$distrun" --device cuda --backend nccl "$scenario" 2>&1)
rc=$?
case $out in *"4 ranks on this node but only 2 CUDA device"*) echo "ok: NCCL refuses 4 ranks on 2 devices" ;;
  *) echo "FAIL: NCCL with 4 ranks on 2 devices: $out"; fail=1 ;; esac
expect 2 "$rc" "NCCL with 4 ranks on 2 devices exits"
# One visible GPU: each worker alone cannot tell it is not its own; the launcher refuses.
out=$(CUDA_VISIBLE_DEVICES=1 timeout 120 "$distrun" --nproc-per-node 2 --device cuda "$root/configs/demo.yaml" 2>&1)
rc=$?
case $out in *"2 ranks on this node but only 1 CUDA device"*) echo "ok: NCCL refuses 2 ranks on 1 device" ;;
  *) echo "FAIL: NCCL with 2 ranks on 1 device: $out"; fail=1 ;; esac
expect 2 "$rc" "NCCL with 2 ranks on 1 device exits"
exit $fail
