#!/bin/sh
# get-cuda-checkpoint.sh - brings NVIDIA's side of CUDA checkpointing into a cache folder, for
# bench/cuda-plugin.sh (gpusnap side by side with it): NVIDIA's cuda-checkpoint binary and CRIU's
# own cuda_plugin.so, built from CRIU's source against CRIU's own headers. Nothing of it is
# committed (NVIDIA's binary has its own license, copied next to it).
#
#   scripts/get-cuda-checkpoint.sh [OPTIONS] [DEST]        (default DEST: .cache/nvidia)
#
#   --cuda-checkpoint-repo DIR  a git clone (or bare mirror) of NVIDIA/cuda-checkpoint to take
#                               bin/x86_64_Linux/cuda-checkpoint from (else $GPUSNAP_CUDA_CHECKPOINT_REPO,
#                               else downloaded from GitHub)
#   --criu-repo DIR             a git clone (or bare mirror) of checkpoint-restore/criu (else
#                               $GPUSNAP_CRIU_REPO, else the tarball of --criu-ref from GitHub)
#   --criu-ref REF              the CRIU tag or commit whose plugins/cuda is built (default v4.2:
#                               Debian's criu 4.2.1 that scripts/get-criu.sh brings has the same
#                               criu-plugin.h; the script compares them when .cache/criu is there)
#   --offline                   never download; only the given repositories
#   --force                     fetch and build again even if DEST is ready
#   --verify                    also load the plugin into CRIU: criu dump + restore of a sleep
#                               process with --libdir DEST/criu-plugins (root; CRIU from $GPUSNAP_CRIU,
#                               else .cache/criu/bin/criu)
#
# Result (a few tens of KiB, meant to be carried to the GPU machine, which has no network):
#   DEST/bin/cuda-checkpoint         put DEST/bin first in PATH: CRIU's plugin runs it from PATH
#   DEST/criu-plugins/cuda_plugin.so a folder with that plugin alone, for criu --libdir
#   DEST/src/counter.cu              NVIDIA's counter example (UDP), which t87 builds and runs
#   DEST/LICENSE.cuda-checkpoint, DEST/SOURCES (where each came from)
# Building needs cc and make (CRIU's feature tests and compel's generated headers); nothing is
# installed system-wide. Exit status: 0 ready; 1 failure; 3 something missing and not downloadable.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
dest=""
cc_repo=${GPUSNAP_CUDA_CHECKPOINT_REPO:-}
criu_repo=${GPUSNAP_CRIU_REPO:-}
criu_ref=v4.2
offline=0 force=0 verify=0
while [ $# -gt 0 ]; do
	case "$1" in
	--cuda-checkpoint-repo) cc_repo=${2:?}; shift ;;
	--criu-repo) criu_repo=${2:?}; shift ;;
	--criu-ref) criu_ref=${2:?}; shift ;;
	--offline) offline=1 ;;
	--force) force=1 ;;
	--verify) verify=1 ;;
	-h | --help)
		sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	-*)
		echo "get-cuda-checkpoint: unknown option '$1'" >&2
		exit 1
		;;
	*) dest=$1 ;;
	esac
	shift
done
[ -n "$dest" ] || dest=$root/.cache/nvidia
case $dest in /*) ;; *) dest=$PWD/$dest ;; esac

# Where NVIDIA keeps the binary, and where GitHub serves both sources.
cc_path=bin/x86_64_Linux/cuda-checkpoint
cc_url=https://raw.githubusercontent.com/NVIDIA/cuda-checkpoint/main
criu_url=https://github.com/checkpoint-restore/criu/archive

say() { echo "get-cuda-checkpoint: $*" >&2; }
die() { say "$1"; exit "${2:-1}"; } # MESSAGE [EXIT STATUS]

# Downloads URL to FILE with curl or wget; 1 when neither works.
download() { # URL FILE
	if command -v curl >/dev/null 2>&1; then
		curl -fsSL --retry 2 -o "$2" "$1" && return 0
	elif command -v wget >/dev/null 2>&1; then
		wget -q -O "$2" "$1" && return 0
	else
		say "neither curl nor wget found"
	fi
	rm -f "$2"
	return 1
}

# The git directory of a clone or a bare mirror, or nothing.
git_dir() { # DIR
	git -C "$1" rev-parse --absolute-git-dir 2>/dev/null || true
}

# The CRIU binary (not the wrapper get-criu.sh writes) to check the plugin's symbols against.
criu_wrapper=${GPUSNAP_CRIU:-$root/.cache/criu/bin/criu}
criu_binary() {
	w=$(readlink -f "$criu_wrapper" 2>/dev/null) || return 0
	p=$(dirname "$(dirname "$w")")/usr/sbin/criu
	if [ -x "$p" ]; then echo "$p"; elif [ -x "$w" ] && head -c 4 "$w" | grep -q ELF; then echo "$w"; fi
}

mkdir -p "$dest"
if command -v flock >/dev/null 2>&1; then
	exec 9>"$dest/.lock"
	flock 9
fi

stamp_want="criu_ref=$criu_ref"
if [ "$force" = 0 ] && [ -f "$dest/.stamp" ] && [ "$(cat "$dest/.stamp")" = "$stamp_want" ] &&
	[ -x "$dest/bin/cuda-checkpoint" ] && [ -f "$dest/criu-plugins/cuda_plugin.so" ] && [ -f "$dest/src/counter.cu" ]; then
	say "already there (CRIU $criu_ref; --force fetches and builds again): $dest"
	ready=1
else
	ready=0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [ "$ready" = 0 ]; then
	# Everything is made in $new and replaces DEST's parts only once all of it is there.
	new=$work/new
	mkdir -p "$new/bin" "$new/criu-plugins"

	# 1. NVIDIA's cuda-checkpoint: from the given repository, else from GitHub.
	g=""
	[ -z "$cc_repo" ] || g=$(git_dir "$cc_repo")
	if [ -n "$cc_repo" ] && [ -z "$g" ]; then
		die "--cuda-checkpoint-repo '$cc_repo' is not a git repository"
	fi
	if [ -n "$g" ]; then
		commit=$(git --git-dir="$g" rev-parse HEAD)
		# NVIDIA's counter example (the UDP server of their README), built on the GPU machine by t87
		mkdir -p "$new/src"
		git --git-dir="$g" show "HEAD:src/counter.cu" >"$new/src/counter.cu" 2>/dev/null || rm -f "$new/src/counter.cu"
		git --git-dir="$g" show "HEAD:$cc_path" >"$work/cuda-checkpoint" ||
			die "no $cc_path in $cc_repo"
		git --git-dir="$g" show "HEAD:bin/x86_64_Linux/LICENSE" >"$new/LICENSE.cuda-checkpoint" 2>/dev/null ||
			git --git-dir="$g" show "HEAD:LICENSE" >"$new/LICENSE.cuda-checkpoint"
		cc_from="NVIDIA/cuda-checkpoint $commit ($cc_repo)"
	elif [ "$offline" = 1 ]; then
		die "offline and no --cuda-checkpoint-repo: nothing to take cuda-checkpoint from" 3
	else
		say "downloading cuda-checkpoint from $cc_url"
		download "$cc_url/$cc_path" "$work/cuda-checkpoint" ||
			die "could not download $cc_url/$cc_path (no network?); give --cuda-checkpoint-repo" 3
		mkdir -p "$new/src"
		download "$cc_url/src/counter.cu" "$new/src/counter.cu" || rm -f "$new/src/counter.cu"
		download "$cc_url/bin/x86_64_Linux/LICENSE" "$new/LICENSE.cuda-checkpoint" ||
			die "could not download NVIDIA's license of cuda-checkpoint" 3
		cc_from="NVIDIA/cuda-checkpoint main, $cc_url/$cc_path, downloaded $(date -u '+%Y-%m-%d')"
	fi
	# A Git LFS pointer or an HTML error page is no program.
	head -c 4 "$work/cuda-checkpoint" | grep -q ELF || die "cuda-checkpoint from $cc_from is not an ELF binary"
	install -m 755 "$work/cuda-checkpoint" "$new/bin/cuda-checkpoint"
	say "cuda-checkpoint: $cc_from -> $dest/bin/cuda-checkpoint"

	# 2. CRIU's source at $criu_ref, only what plugins/cuda needs built.
	src=$work/criu
	mkdir -p "$src"
	g=""
	[ -z "$criu_repo" ] || g=$(git_dir "$criu_repo")
	if [ -n "$criu_repo" ] && [ -z "$g" ]; then
		die "--criu-repo '$criu_repo' is not a git repository"
	fi
	if [ -n "$g" ]; then
		commit=$(git --git-dir="$g" rev-parse "$criu_ref^{commit}" 2>/dev/null) ||
			die "no '$criu_ref' in $criu_repo (tags: $(git --git-dir="$g" tag -l 'v4*' | tr '\n' ' '))"
		git --git-dir="$g" archive "$commit" | tar -x -C "$src"
		criu_from="checkpoint-restore/criu $criu_ref = $commit ($criu_repo)"
	elif [ "$offline" = 1 ]; then
		die "offline and no --criu-repo: nothing to build cuda_plugin.so from" 3
	else
		say "downloading CRIU $criu_ref from $criu_url"
		download "$criu_url/$criu_ref.tar.gz" "$work/criu.tar.gz" ||
			die "could not download $criu_url/$criu_ref.tar.gz (no network?); give --criu-repo" 3
		tar -xzf "$work/criu.tar.gz" -C "$src" --strip-components=1
		criu_from="checkpoint-restore/criu $criu_ref, $criu_url/$criu_ref.tar.gz"
	fi
	[ -f "$src/plugins/cuda/cuda_plugin.c" ] || die "CRIU $criu_ref has no plugins/cuda/cuda_plugin.c"
	version=$(awk '/^CRIU_VERSION_(MAJOR|MINOR|SUBLEVEL)/ { if ($3 != "") v = v (v == "" ? "" : ".") $3 } END { print v }' \
		"$src/Makefile.versions")

	# The plugin includes CRIU's internal headers; three of their parts are generated by CRIU's
	# make: common/config.h (feature tests), the asm links, compel's syscall tables (std.lib.a).
	say "building plugins/cuda of CRIU $version ($criu_ref): CRIU's generated headers first"
	if ! (cd "$src" && make -j2 include/common/config.h compel/include/asm include/common/asm \
		compel/plugins/std.lib.a) >"$work/make.log" 2>&1; then
		tail -n 15 "$work/make.log" >&2
		die "make of CRIU's generated headers failed (the lines above)"
	fi
	# cr_options.h includes libcap's <sys/capability.h> only for _LINUX_CAPABILITY_U32S_3, which
	# the kernel's header defines too: without libcap's headers, a stand-in that includes that one.
	inc=""
	if ! echo '#include <sys/capability.h>' | cc -E -x c - >/dev/null 2>&1; then
		mkdir -p "$work/inc/sys"
		echo '#include <linux/capability.h>' >"$work/inc/sys/capability.h"
		inc="-I $work/inc"
		say "no <sys/capability.h> (libcap-dev): using <linux/capability.h>, which defines what CRIU's header uses"
	fi
	# The flags of plugins/cuda/Makefile; `compel includes` of an uninstalled compel is compel/include/uapi.
	# shellcheck disable=SC2086 # $inc is empty or two words
	if ! (cd "$src/plugins/cuda" && cc -g -Wall -Werror -shared -nostartfiles -fPIC $inc -I ../../compel/include/uapi \
		cuda_plugin.c -o cuda_plugin.so -iquote../../include -iquote../../criu/include \
		-iquote../../criu/arch/x86/include/ -iquote../../) >"$work/cc.log" 2>&1; then
		cat "$work/cc.log" >&2
		die "cc of plugins/cuda/cuda_plugin.c failed"
	fi
	install -m 755 "$src/plugins/cuda/cuda_plugin.so" "$new/criu-plugins/cuda_plugin.so"
	say "cuda_plugin.so: $criu_from -> $dest/criu-plugins/cuda_plugin.so"

	# The header the plugin was built against, beside the one of the CRIU that will load it.
	ours=$(dirname "$(dirname "$(readlink -f "$criu_wrapper" 2>/dev/null || echo /nonexistent/bin/criu)")")/usr/include/criu/criu-plugin.h
	if [ -f "$ours" ]; then
		if cmp -s "$src/criu/include/criu-plugin.h" "$ours"; then
			hdr="criu-plugin.h of $criu_ref is the same as $ours"
		else
			hdr="WARNING: criu-plugin.h of $criu_ref differs from $ours"
		fi
		say "$hdr"
	else
		hdr="no $ours (scripts/get-criu.sh's libcriu-dev) to compare criu-plugin.h with"
	fi
	{
		echo "cuda-checkpoint: $cc_from"
		echo "cuda_plugin.so: $criu_from, CRIU $version, plugins/cuda/cuda_plugin.c built by scripts/get-cuda-checkpoint.sh"
		echo "header: $hdr"
	} >"$new/SOURCES"
	rm -f "$dest/.stamp"
	rm -rf "${dest:?}/bin" "$dest/criu-plugins" "$dest/SOURCES" "$dest/LICENSE.cuda-checkpoint" "$dest/src"
	mv "$new/bin" "$new/criu-plugins" "$new/SOURCES" "$new/LICENSE.cuda-checkpoint" "$dest/"
	if [ -s "$new/src/counter.cu" ]; then mv "$new/src" "$dest/"; else say "NVIDIA's counter example not found: t87 skips it"; fi
	echo "$stamp_want" >"$dest/.stamp"
fi

# Checks that hold on any machine: the plugin's symbols that are not libc's are all exported by
# the CRIU that loads it (it calls CRIU's internals); cuda-checkpoint starts.
bin=$(criu_binary)
if [ -n "$bin" ] && command -v nm >/dev/null 2>&1; then
	nm -D --undefined-only "$dest/criu-plugins/cuda_plugin.so" | awk '$2 !~ /@/ && $1 == "U" { print $2 }' |
		sort >"$work/wants"
	nm -D --defined-only "$bin" | awk '{ print $3 }' | sort >"$work/has"
	lacking=$(comm -23 "$work/wants" "$work/has" | tr '\n' ' ')
	[ -z "$lacking" ] || die "$bin does not export what cuda_plugin.so calls: $lacking"
	say "every CRIU symbol cuda_plugin.so calls ($(wc -l <"$work/wants")) is exported by $bin ($("$criu_wrapper" --version 2>/dev/null | head -n 1))"
fi
out=$("$dest/bin/cuda-checkpoint" --help 2>&1) && rc=0 || rc=$?
if echo "$out" | grep -q 'libcuda.so.1'; then
	say "cuda-checkpoint cannot start here: no libcuda.so.1 (no NVIDIA driver on this machine)"
elif [ "$rc" = 126 ] || [ "$rc" = 127 ]; then
	die "cuda-checkpoint does not start: $(echo "$out" | head -n 1)"
elif echo "$out" | grep -q -- '--action'; then
	say "cuda-checkpoint --help works and lists --action (what CRIU's plugin needs)"
else
	# Without an NVIDIA driver it stops at once: it needs libcuda.so.1's private export table.
	say "cuda-checkpoint starts but cannot work here (exit $rc: $(echo "$out" | head -n 1)); it needs the NVIDIA driver (r555 or newer for --action)"
fi

if [ "$verify" = 1 ]; then
	[ -x "$criu_wrapper" ] || die "--verify: no CRIU at $criu_wrapper (scripts/get-criu.sh, or set GPUSNAP_CRIU)"
	sleep 600 >/dev/null 2>&1 9>&- &
	victim=$!
	mkdir -p "$work/img"
	if ! (cd / && "$criu_wrapper" dump -t "$victim" -D "$work/img" --libdir "$dest/criu-plugins" --shell-job \
		-v4 -o dump.log); then
		kill "$victim" 2>/dev/null || true
		grep -E 'Error|cuda_plugin' "$work/img/dump.log" | tail -n 10 >&2
		die "--verify: criu dump with --libdir $dest/criu-plugins failed"
	fi
	loaded=$(grep -E 'cuda_plugin' "$work/img/dump.log" | head -n 3)
	ok=$(grep -E 'Plugin "cuda_plugin" \(version' "$work/img/dump.log" | head -n 1)
	if ! (cd / && "$criu_wrapper" restore -D "$work/img" --libdir "$dest/criu-plugins" --shell-job -d -v4 \
		-o restore.log --pidfile "$work/pid"); then
		grep -E 'Error|cuda_plugin' "$work/img/restore.log" | tail -n 10 >&2
		die "--verify: criu restore with --libdir $dest/criu-plugins failed"
	fi
	kill "$(cat "$work/pid")" 2>/dev/null || true
	[ -n "$ok" ] || die "--verify: the dump's log does not say the plugin was loaded"
	say "--verify: criu dump and restore of a sleep process with --libdir $dest/criu-plugins worked; the dump's log:"
	echo "$loaded" | sed 's/^/    /' >&2
fi
say "ready: $dest ($(du -sk "$dest" | cut -f1) KiB; carry it to the GPU machine with the rest of .cache)"
