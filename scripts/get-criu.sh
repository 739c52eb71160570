#!/bin/sh
# get-criu.sh - brings a private CRIU 4 (Debian trixie's packages) into a prefix,
# without touching the system's apt sources or installing anything system-wide.
#
#   scripts/get-criu.sh [--offline] [PREFIX]      (default PREFIX: .cache/criu)
#
# The .debs are kept in .cache/criu-debs (or $GPUSNAP_CRIU_DEBS) and downloaded only
# when some are missing, so that folder can be carried to a machine without a network
# (the GPU machine) and unpacked there with --offline (also chosen by itself when apt
# cannot reach a mirror). The result is PREFIX/bin/criu, a wrapper that runs trixie's
# criu the way the machine it runs on needs (see the comment inside it). Why trixie's
# and not the distribution's: docs/CRIU.md and shared FACTS (CRIU 3.17 fails on 6.x
# kernels with "kerndat_vdso_fill_symtable failed").
#
# Exit status: 0 ready; 1 failure; 3 packages missing and none could be downloaded.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
offline=0
prefix=""
for arg in "$@"; do
	case "$arg" in
	--offline) offline=1 ;;
	-h | --help)
		sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	-*)
		echo "get-criu: unknown option '$arg'" >&2
		exit 1
		;;
	*) prefix=$arg ;;
	esac
done
[ -n "$prefix" ] || prefix=$root/.cache/criu
debs=${GPUSNAP_CRIU_DEBS:-$root/.cache/criu-debs}
suite=trixie

# criu and what its binary and libraries load (checked with readelf -d on 4.1.1-1),
# libcriu for the plugin header, and trixie's glibc for machines whose own is older.
packages="criu libcompel1 libnet1 libnftables1 libnftnl11 libmnl0 libjansson4 libxtables12
libnl-3-200 libprotobuf-c1 libbsd0 libmd0 libuuid1 libgnutls30t64 libidn2-0 libunistring5
libtasn1-6 libnettle8t64 libhogweed6t64 libgmp10 libp11-kit0 libffi8 libcriu2 libcriu-dev libc6"

say() { echo "get-criu: $*" >&2; }

deb_of() { # the cached .deb of package $1, or nothing
	for f in "$debs/$1"_*_amd64.deb "$debs/$1"_*_all.deb; do
		[ -f "$f" ] && { echo "$f"; return 0; }
	done
	return 0
}

missing() {
	for p in $packages; do
		[ -n "$(deb_of "$p")" ] || echo "$p"
	done
}

# The mirror this machine already uses (deb822 or one-line format), so no new host is named.
mirror_uri() {
	uri=""
	if [ -f /etc/apt/sources.list.d/debian.sources ]; then
		uri=$(awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i !~ /security/) { print $i; exit } }' \
			/etc/apt/sources.list.d/debian.sources)
	fi
	if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
		uri=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { if ($i !~ /security/) { print $i; exit } } }' \
			/etc/apt/sources.list)
	fi
	echo "${uri:-http://deb.debian.org/debian}"
}

download() {
	command -v apt-get >/dev/null 2>&1 || { say "apt-get not found, cannot download"; return 1; }
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
	mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/parts" "$work/prefs" "$debs"
	keyring=/usr/share/keyrings/debian-archive-keyring.gpg
	if [ -f "$keyring" ]; then
		echo "deb [signed-by=$keyring] $(mirror_uri) $suite main" >"$work/sources.list"
	else
		echo "deb $(mirror_uri) $suite main" >"$work/sources.list"
	fi
	set -- -o Dir::Etc::SourceList="$work/sources.list" -o Dir::Etc::SourceParts="$work/parts" \
		-o Dir::Etc::Preferences="$work/prefs/none" -o Dir::Etc::PreferencesParts="$work/prefs" \
		-o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache" -o Debug::NoLocking=1 \
		-o APT::Sandbox::User=root -o APT::Architecture=amd64 -q
	say "fetching the $suite package list from $(mirror_uri)"
	apt-get "$@" update >"$work/update.log" 2>&1 || { tail -n 5 "$work/update.log" >&2; return 1; }
	want=""
	for p in $(missing); do want="$want $p/$suite"; done
	say "downloading$want"
	# shellcheck disable=SC2086 # word splitting of the package list is intended
	(cd "$work" && apt-get "$@" download $want >"$work/download.log" 2>&1) ||
		{ tail -n 5 "$work/download.log" >&2; return 1; }
	mv "$work"/*.deb "$debs"/
}

# One get-criu at a time per package folder (test runs of two builds may start together).
mkdir -p "$debs"
if command -v flock >/dev/null 2>&1; then
	exec 9>"$debs/.lock"
	flock 9
fi

if [ -n "$(missing)" ]; then
	if [ "$offline" = 1 ]; then
		say "offline and these packages are not in $debs: $(missing | tr '\n' ' ')"
		exit 3
	fi
	if ! download; then
		say "could not download the packages (no network or no apt?); copy a filled $debs here and use --offline"
		exit 3
	fi
	if [ -n "$(missing)" ]; then
		say "still missing after download: $(missing | tr '\n' ' ')"
		exit 1
	fi
fi

# Unpack unless the prefix already holds exactly these .debs.
stamp_want=$(for p in $packages; do basename "$(deb_of "$p")"; done)
if [ -f "$prefix/.get-criu-stamp" ] && [ "$(cat "$prefix/.get-criu-stamp")" = "$stamp_want" ] &&
	[ -x "$prefix/bin/criu" ]; then
	say "ready: $prefix/bin/criu"
	exit 0
fi
if [ -e "$prefix" ] && [ ! -f "$prefix/.get-criu-stamp" ] && [ -n "$(ls -A "$prefix")" ]; then
	say "'$prefix' exists, is not empty and was not made by get-criu.sh; refusing to overwrite it"
	exit 1
fi
rm -rf "$prefix"
mkdir -p "$prefix/bin" "$prefix/glibc"
for p in $packages; do
	# glibc goes into its own tree: on a machine whose glibc is new enough the wrapper puts
	# $prefix/usr/lib on LD_LIBRARY_PATH, and trixie's libc.so.6 there would be mixed with
	# the system's loader.
	case "$p" in
	libc6) dpkg -x "$(deb_of "$p")" "$prefix/glibc" ;;
	*) dpkg -x "$(deb_of "$p")" "$prefix" ;;
	esac
done
lib=$prefix/usr/lib/x86_64-linux-gnu
[ -x "$prefix/usr/sbin/criu" ] || { say "no usr/sbin/criu after unpacking"; exit 1; }
[ -x "$prefix/glibc/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" ] ||
	{ say "no ld-linux-x86-64.so.2 in trixie's libc6"; exit 1; }

# The newest GLIBC_x.y symbol version that criu or its (non-libc) libraries ask for: the
# system glibc must be at least that for the LD_LIBRARY_PATH way to work.
need=$(cat "$prefix/usr/sbin/criu" "$lib"/*.so* | tr -c 'A-Za-z0-9_.' '\n' |
	grep -E '^GLIBC_2\.[0-9]+$' | sed 's/^GLIBC_//' | sort -t. -k1,1n -k2,2n | tail -n 1)
[ -n "$need" ] || need=99.0

cat >"$prefix/bin/criu" <<EOF
#!/bin/sh
# criu wrapper written by gpusnap's scripts/get-criu.sh: runs Debian trixie's CRIU from
# the tree this file is in (which may have been copied to another machine).
#  - system glibc >= $need (what criu and its libraries need): the system's loader and libc,
#    trixie's other libraries through LD_LIBRARY_PATH.
#  - older system glibc: trixie's own loader with --library-path, so nothing leaks into
#    the environment of the programs criu starts. Restored processes get their memory
#    and environment from the image, not from criu, in either way.
# GPUSNAP_CRIU_MODE=loader|env forces one way.
need=$need
EOF
cat >>"$prefix/bin/criu" <<'EOF'
self=$(readlink -f "$0")
prefix=$(cd "$(dirname "$self")/.." && pwd)
lib=$prefix/usr/lib/x86_64-linux-gnu
glibc=$prefix/glibc/usr/lib/x86_64-linux-gnu
mode=${GPUSNAP_CRIU_MODE:-}
if [ -z "$mode" ]; then
	have=$(getconf GNU_LIBC_VERSION 2>/dev/null | sed -n 's/^glibc \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p')
	mode=loader
	if [ -n "$have" ]; then
		hmaj=${have%%.*} hmin=${have#*.} nmaj=${need%%.*} nmin=${need#*.}
		if [ "$hmaj" -gt "$nmaj" ] || { [ "$hmaj" -eq "$nmaj" ] && [ "$hmin" -ge "$nmin" ]; }; then
			mode=env
		fi
	fi
fi
if [ "$mode" = env ]; then
	LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec "$prefix/usr/sbin/criu" "$@"
fi
exec "$glibc/ld-linux-x86-64.so.2" --library-path "$glibc:$lib" "$prefix/usr/sbin/criu" "$@"
EOF
chmod 755 "$prefix/bin/criu"
echo "$stamp_want" >"$prefix/.get-criu-stamp"
say "ready: $prefix/bin/criu (trixie criu needs glibc >= $need)"
