#!/usr/bin/env bash
# t7020 - the manual pages and the completion scripts come from the option
# tables the parser uses (src/cli/cli_doc.c), as the build wrote them:
#  - every command `gpusnap --help` lists has its page, and every option its
#    `-h` shows is in that page and in the bash completion of the command;
#  - every page renders without a warning (groff -ww, man --warnings);
#  - `gpusnap help dump` shows the page (the usage where man is missing);
#  - the bash script loads and completes commands, options, image directories
#    and the PIDs of CUDA processes (an app under the agent, fake driver);
#  - usage errors: an unknown command for help, an unknown shell.
# Needs GPUSNAP_BUILD (set by ctest).
. "$(dirname "$0")/lib.sh"
# the words of a list on one line
oneline() { tr '\n' ' ' <<<"$1" | sed 's/  */ /g; s/^ //; s/ $//'; }

doc=${GPUSNAP_BUILD:?GPUSNAP_BUILD must point at the build directory}/doc
[ -f "$doc/man1/gpusnap.1" ] || { echo "not ok - $doc/man1/gpusnap.1 was not built"; exit 1; }

# what `gpusnap --help` lists, and what `gpusnap CMD -h` shows of each option
commands=$("$GPUSNAP_BIN" --help | awk '/^commands:/ {on = 1; next} on && NF == 0 {exit} on {print $1}')
check "gpusnap --help lists the commands ($(oneline "$commands"))" \
  sh -c "echo '$commands' | grep -qx dump && echo '$commands' | grep -qx container-spec && [ $(echo "$commands" | wc -l) -ge 8 ]"
options_of() { # CMD -> one option a line, as -h shows them: -D, --dir, --tree ...
  "$GPUSNAP_BIN" "$1" -h | sed -n 's/^    \(-[^ ,]*\)\(, \(--[^ ]*\)\)\{0,1\}.*/\1 \3/p; s/^        \(--[^ ]*\).*/\1/p' | tr ' ' '\n' | sed '/^$/d'
}

# the completion function as bash runs it: COMPREPLY for the words given (the last is the one completed)
complete_words() {
  bash -c '. "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _gpusnap; printf "%s\n" "${COMPREPLY[@]}"' \
    _ "$doc/bash/gpusnap" "$@"
}

for cmd in $commands; do
  page=$doc/man1/gpusnap-$cmd.1
  if [ ! -f "$page" ]; then
    fail "gpusnap-$cmd(1) was built" "missing $page"
    continue
  fi
  opts=$(options_of "$cmd")
  text=$(MANWIDTH=200 man -l "$page" 2>/dev/null || groff -man -Tascii "$page" 2>/dev/null | col -b)
  comp=$(complete_words "$GPUSNAP_BIN" "$cmd" -)
  missing_page='' missing_comp=''
  for o in $opts; do
    # roff writes each - as \-
    grep -qF -- "$(printf '%s' "$o" | sed 's/-/\\-/g')" "$page" || missing_page+=" $o"
    printf '%s\n' "$comp" | grep -qx -- "$o" || missing_comp+=" $o"
  done
  check "gpusnap-$cmd(1) has every option of its table:$(oneline "$opts")${missing_page:+ (missing:$missing_page)}" \
    test -z "$missing_page"
  check "... and bash completes each of them${missing_comp:+ (missing:$missing_comp)}" test -z "$missing_comp"
  check "... the page has a synopsis, exit status and examples" \
    sh -c "printf '%s' \"\$1\" | grep -q '^SYNOPSIS' && printf '%s' \"\$1\" | grep -q '^EXIT STATUS' && printf '%s' \"\$1\" | grep -q '^EXAMPLES'" _ "$text"
done
check "gpusnap-dump(1) names the variables dump reads (GPUSNAP_CRIU)" grep -q GPUSNAP_CRIU "$doc/man1/gpusnap-dump.1"
missing=
for c in $commands; do
  grep -qF -- "gpusnap\\-$(printf '%s' "$c" | sed 's/-/\\-/g')\\fR(1)" "$doc/man1/gpusnap.1" || missing+=" $c"
done
check "gpusnap(1) lists every command${missing:+ (missing:$missing)}" test -z "$missing"

# rendering: no warning from groff or man
if command -v groff >/dev/null; then
  for page in "$doc"/man1/*.1; do
    warn=$(groff -man -Tutf8 -ww -z "$page" 2>&1)
    check "$(basename "$page") renders with groff -ww without a warning${warn:+: $warn}" test -z "$warn"
  done
  # the check itself finds a warning where there is one
  printf '.TH X 1\n.SH NAME\nx \\- y\n.BOGUS\n' >"$TEST_TMP/bad.1"
  check "... (groff -ww does warn of a bad page)" test -n "$(groff -man -Tutf8 -ww -z "$TEST_TMP/bad.1" 2>&1)"
else
  echo "SKIP: no groff (apt-get install groff-base): the pages' rendering is not checked"
fi
if command -v man >/dev/null; then
  warn=$(man --warnings -l "$doc/man1/gpusnap-dump.1" 2>&1 >/dev/null)
  check "man --warnings -l gpusnap-dump.1: no warning${warn:+: $warn}" test -z "$warn"
fi

# gpusnap help
run_gpusnap help dump; expect "gpusnap help dump" 0
if command -v man >/dev/null; then
  check "... shows the manual page" grep -q 'GPUSNAP-DUMP(1)' "$OUT_TXT"
fi
check "... with dump's options" grep -q 'leave-running' "$OUT_TXT"
RC=0
PATH=/nonexistent "$GPUSNAP_BIN" help dump >"$TEST_TMP/out" 2>"$TEST_TMP/err" || RC=$?
check "without man, gpusnap help dump prints the usage (exit $RC)" \
  sh -c "[ $RC = 0 ] && grep -q '^usage: gpusnap dump' '$TEST_TMP/out' && grep -q -- '--leave-running' '$TEST_TMP/out'"
run_gpusnap help; expect "gpusnap help without a command lists the commands" 0 "container-spec"
run_gpusnap help frobnicate; expect "gpusnap help of an unknown command: usage error" 2 "'frobnicate' is not a gpusnap command"
run_gpusnap completion fish; expect "gpusnap completion fish: usage error" 2 "'fish' is not a shell"
run_gpusnap completion; expect "gpusnap completion without a shell: usage error" 2 "is required"
run_gpusnap completion bash; expect "gpusnap completion bash" 0
check "... is the script the build installs" cmp -s "$OUT_TXT" "$doc/bash/gpusnap"
run_gpusnap completion zsh; expect "gpusnap completion zsh" 0 "#compdef gpusnap"
check "... is the script the build installs" cmp -s "$OUT_TXT" "$doc/zsh/_gpusnap"
if command -v zsh >/dev/null; then
  check "the zsh script parses (zsh -n)" zsh -n "$doc/zsh/_gpusnap"
  # an interactive zsh (zpty) with the script first in fpath: LINE<TAB> must show WANT within 30 s
  cat >"$TEST_TMP/drive.zsh" <<'ZSH'
zmodload zsh/zpty || exit 2
zpty z zsh -f -i
zpty -w z "fpath=($1 \$fpath); PS1='> '; autoload -U compinit; compinit -u -D; PATH=$2:\$PATH; echo RE''ADY"
zpty -r z out '*READY*' || exit 2
zpty -n -w z "$3"$'\t'
out=
while (( SECONDS < 30 )); do
  zpty -r -t z chunk && out+=$chunk
  [[ $out == *"$4"* ]] && exit 0
  sleep 0.1
done
print -r -- "${out//[^[:print:]]/}"
exit 1
ZSH
  zsh_complete() { zsh -f "$TEST_TMP/drive.zsh" "$doc/zsh" "$(dirname "$GPUSNAP_BIN")" "$1" "$2"; }
  check "zsh: gpusnap du<TAB> completes to dump" zsh_complete 'gpusnap du' 'gpusnap dump'
  check "zsh: gpusnap dump --le<TAB> completes to --leave-running" zsh_complete 'gpusnap dump --le' '--leave-running'
  check "zsh: gpusnap help rest<TAB> completes to restore" zsh_complete 'gpusnap help rest' 'help restore'
  check "zsh: gpusnap completion z<TAB> completes to zsh" zsh_complete 'gpusnap completion z' 'completion zsh'
else
  echo "SKIP: no zsh: the zsh script is not checked beyond being written"
fi

# bash completion
check "the bash script loads and registers _gpusnap for gpusnap" \
  bash -c '. "$1" && complete -p gpusnap | grep -q -- "-F _gpusnap"' _ "$doc/bash/gpusnap"
got=$(complete_words gpusnap du)
check "gpusnap du<TAB> completes to dump ($got)" test "$got" = dump
got=$(complete_words gpusnap dump --le)
check "gpusnap dump --le<TAB> completes to --leave-running ($got)" test "$got" = --leave-running
mkdir -p "$TEST_TMP/images/job-a" "$TEST_TMP/images/job-b"
touch "$TEST_TMP/images/job-file"
got=$(complete_words gpusnap dump -D "$TEST_TMP/images/jo" | sort | tr '\n' ' ')
check "gpusnap dump -D DIR<TAB> completes directories only ($got)" \
  test "$got" = "$TEST_TMP/images/job-a $TEST_TMP/images/job-b "
got=$(complete_words gpusnap inspect "$TEST_TMP/images/jo" | sort | tr '\n' ' ')
check "gpusnap inspect <TAB> completes image directories ($got)" \
  test "$got" = "$TEST_TMP/images/job-a $TEST_TMP/images/job-b "
got=$(complete_words gpusnap suspend --timeout "")
check "gpusnap suspend --timeout <TAB> offers nothing (seconds) ($got)" test -z "$got"
got=$(complete_words gpusnap help res | sort)
check "gpusnap help res<TAB> completes commands ($(oneline "$got"))" test "$(oneline "$got")" = "restore resume"
got=$(complete_words gpusnap completion "")
check "gpusnap completion <TAB> offers bash and zsh ($(oneline "$got"))" test "$(oneline "$got")" = "bash zsh"

# PIDs: the CUDA processes `gpusnap state` lists (an app under the agent, fake driver)
app=$GPUSNAP_BUILD/tests/agent/agent_app
if [ -f "$GPUSNAP_BUILD/libgpusnap.so" ] && [ -x "$app" ] && command -v python3 >/dev/null; then
  . "$(dirname "$0")/fake_agent.sh"
  fake_agent_env
  start_app
  got=$(complete_words "$GPUSNAP_BIN" suspend "")
  check "gpusnap suspend <TAB> offers the CUDA process $APP ($(oneline "$got"))" sh -c "printf '%s\n' '$got' | grep -qx '$APP'"
  check "... and no process that is not a CUDA process (this shell, $$)" sh -c "! printf '%s\n' '$got' | grep -qx '$$'"
  got=$(complete_words "$GPUSNAP_BIN" switch "$APP" "")
  check "gpusnap switch PID <TAB> offers the CUDA process for the second PID too ($(oneline "$got"))" \
    sh -c "printf '%s\n' '$got' | grep -qx '$APP'"
  got=$(complete_words "$GPUSNAP_BIN" switch "$APP" "$APP" "")
  check "gpusnap switch PID PID <TAB> offers nothing more ($(oneline "$got"))" test -z "$got"
  got=$(complete_words "$GPUSNAP_BIN" suspend "$APP" "")
  check "gpusnap suspend PID <TAB> offers nothing more ($(oneline "$got"))" test -z "$got"
  quit_app "the app ends well"
else
  echo "SKIP: no agent or python3: PID completion is not checked"
fi
got=$(GPUSNAP_LIBCUDA=/nonexistent complete_words "$GPUSNAP_BIN" suspend "" 2>&1)
check "without a driver, gpusnap suspend <TAB> offers nothing, quietly ($got)" test -z "$got"

test_done
