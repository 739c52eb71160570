#!/usr/bin/env bash
# t7003 - the Python client (python/, docs/python.md): its pytest tests
# (python/tests) against this build's gpusnap on the fake libcuda, with CRIU
# where it can be used (dump, inspect, restore); and `pip install` of python/
# offline (--no-build-isolation, Debian's setuptools) gives an importable
# package that finds the binary through GPUSNAP_BIN. Skips (77) without
# python3-pytest; the pip part skips alone without pip or setuptools.
. "$(dirname "$0")/lib.sh"

src=${GPUSNAP_SRC:?GPUSNAP_SRC not set}
PY=
for py in python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null && "$py" -c 'import pytest' 2>/dev/null; then PY=$(command -v "$py"); break; fi
done
[ -n "$PY" ] || skip "python3-pytest is not installed (scripts/install-deps.sh installs it for make test)"
have_criu || unset GPUSNAP_CRIU

# pytest's own cache and bytecode stay out of the source tree
if (cd "$TEST_TMP" && PYTHONDONTWRITEBYTECODE=1 "$PY" -m pytest -q -p no:cacheprovider -rs "$src/python/tests" \
      >"$TEST_TMP/pytest.log" 2>&1); then
  pass "python/tests: $(tail -n 1 "$TEST_TMP/pytest.log")"
else
  fail "python/tests" "$(tail -n 40 "$TEST_TMP/pytest.log")"
fi
grep -E "SKIPPED" "$TEST_TMP/pytest.log" | sed 's/^/    /'

# pip install, offline
if "$PY" -m pip --version >/dev/null 2>&1 && "$PY" -c 'import setuptools' 2>/dev/null; then
  cp -r "$src/python" "$TEST_TMP/python-src" # the build writes beside the sources
  if PIP_NO_INDEX=1 "$PY" -m pip install -q --no-build-isolation --no-deps --target "$TEST_TMP/site" \
      "$TEST_TMP/python-src" >"$TEST_TMP/pip.log" 2>&1; then
    pass "pip install --no-build-isolation python/, offline"
    check "... the installed package imports and runs gpusnap --version" \
      sh -c "cd '$TEST_TMP' && PYTHONPATH='$TEST_TMP/site' '$PY' -c 'import gpusnap, sys; sys.exit(gpusnap.Gpusnap().version() != gpusnap.__version__)'"
    check "... pure Python: no compiled file installed" \
      [ -z "$(find "$TEST_TMP/site" -name '*.so')" ]
  else
    fail "pip install --no-build-isolation python/, offline" "$(tail -n 20 "$TEST_TMP/pip.log")"
  fi
else
  echo "SKIP: no pip or setuptools for $PY: pip install of python/ is not checked"
fi

test_done
