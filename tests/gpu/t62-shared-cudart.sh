#!/usr/bin/env bash
# t62-shared-cudart.sh - the pattern app linked with the shared cudart
# (libcudart.so) also suspends, resumes and verifies; the other apps use nvcc's
# default static cudart, so both linkages are covered.
# gpu-test-shared: yes
. "$(dirname "$0")/lib.sh"
gs_test_init t62-shared-cudart

bin=$GS_APPS/pattern_shared
needed() { readelf -d "$1" 2>/dev/null | grep NEEDED; }
if needed "$bin" | grep -q 'libcudart\.so'; then
  pass "pattern_shared loads libcudart.so ($(ldd "$bin" | awk '/libcudart/ { print $3 }'))"
else
  fail "pattern_shared does not link libcudart.so dynamically"
fi
if needed "$GS_APPS/pattern" | grep -q 'libcudart\.so'; then
  fail "pattern should link cudart statically"
else
  pass "pattern links cudart statically"
fi

app_start p 120 "$bin" --size 1G --seed 62 || finish
suspend_checked p 1024 || finish
resume_checked p || finish
app_verify p "1 GiB pattern (shared cudart) after resume"
app_quit p
finish
