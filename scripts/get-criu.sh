#!/bin/sh
# get-criu.sh - brings a private CRIU >= 4.2 (Debian forky's or sid's packages) into a
# prefix, without touching the system's apt sources or installing anything system-wide.
#
#   scripts/get-criu.sh [--offline] [PREFIX]      (default PREFIX: .cache/criu)
#
# The .debs are kept in .cache/criu-debs (or $GPUSNAP_CRIU_DEBS) and downloaded only
# when some are missing, so that folder can be carried to a machine without a network
# (the GPU machine) and unpacked there with --offline (also chosen by itself when apt
# cannot reach a mirror). Where the folder holds several versions of a package, the
# newest is used; a criu older than 4.2 counts as missing. The result is PREFIX/bin/criu,
# a wrapper that runs Debian's criu the way the machine it runs on needs (see the comment
# inside it). Why 4.2 and why Debian's: docs/CRIU.md (CRIU 4.1 cannot dump a process
# holding an inet socket on Linux >= 6.16; CRIU 3.17 fails on 6.x kernels).
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
		sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
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
# Tried in this order; the first whose criu is >= $min_criu is used.
suites="forky sid"
# CRIU 4.1 cannot dump an inet socket on Linux >= 6.16 (SO_PASSCRED is refused there).
min_criu=4.2
# criu's own packages: all four must be the same version, at least $min_criu.
criu_packages="criu libcompel1 libcriu2 libcriu-dev"

# criu and what its binary and libraries load (checked with readelf -d on 4.2.1-1),
# libcriu for the plugin header, and the suite's glibc for machines whose own is older.
packages="criu libcompel1 libnet9 libnftables1 libnftnl11 libmnl0 libjansson4 libxtables12
libnl-3-200 libprotobuf-c1 libbsd0 libmd0 libuuid1 libgnutls30t64 libidn2-0 libunistring5
libtasn1-6 libnettle8t64 libhogweed6t64 libgmp10 libp11-kit0 libffi8 libcriu2 libcriu-dev libc6"

say() { echo "get-criu: $*" >&2; }

# The Debian version in a .deb's file name (PKG_VERSION_ARCH.deb; the epoch's ':' is %3a).
deb_version() {
	v=$(basename "$1")
	v=${v#*_}
	v=${v%_*}
	echo "$v" | sed 's/%3a/:/'
}

# True if Debian version $1 >= $2 (dpkg's order; sort -V where dpkg is missing).
version_ge() {
	if command -v dpkg >/dev/null 2>&1; then
		dpkg --compare-versions "$1" ge "$2"
	else
		[ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n 1)" = "$2" ]
	fi
}

deb_of() { # the newest cached .deb of package $1 (criu's own: >= $min_criu), or nothing
	best=""
	for f in "$debs/$1"_*_amd64.deb "$debs/$1"_*_all.deb; do
		[ -f "$f" ] || continue
		case " $criu_packages " in
		*" $1 "*) version_ge "$(deb_version "$f")" "$min_criu" || continue ;;
		esac
		if [ -z "$best" ] || ! version_ge "$(deb_version "$best")" "$(deb_version "$f")"; then
			best=$f
		fi
	done
	echo "$best"
}

missing() {
	{
		for p in $packages; do
			[ -n "$(deb_of "$p")" ] || echo "$p"
		done
		# criu's packages of different versions do not go together (libcompel1 is pinned to criu's)
		criu_deb=$(deb_of criu)
		if [ -n "$criu_deb" ]; then
			for p in $criu_packages; do
				f=$(deb_of "$p")
				[ -z "$f" ] || [ "$(deb_version "$f")" = "$(deb_version "$criu_deb")" ] || echo "$p"
			done
		fi
	} | sort -u
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

# Downloads the missing packages from the first suite in $suites that has criu >= $min_criu.
download() {
	command -v apt-get >/dev/null 2>&1 || { say "apt-get not found, cannot download"; return 1; }
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
	mkdir -p "$work/parts" "$work/prefs" "$debs"
	keyring=/usr/share/keyrings/debian-archive-keyring.gpg
	for suite in $suites; do
		rm -rf "$work/lists" "$work/cache"
		mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
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
		if ! apt-get "$@" update >"$work/update.log" 2>&1; then
			tail -n 5 "$work/update.log" >&2
			continue
		fi
		have=$(apt-cache "$@" policy criu 2>/dev/null | awk '/Candidate:/ { print $2; exit }')
		if [ -z "$have" ] || [ "$have" = "(none)" ] || ! version_ge "$have" "$min_criu"; then
			say "$suite has criu ${have:-none}, not >= $min_criu"
			continue
		fi
		want=""
		for p in $(missing); do want="$want $p/$suite"; done
		say "downloading$want (criu $have from $suite)"
		# shellcheck disable=SC2086 # word splitting of the package list is intended
		(cd "$work" && apt-get "$@" download $want >"$work/download.log" 2>&1) ||
			{ tail -n 5 "$work/download.log" >&2; return 1; }
		mv "$work"/*.deb "$debs"/
		return 0
	done
	return 1
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
say "unpacking $(echo $packages | wc -w) packages ($(basename "$(deb_of criu)" .deb)) into $prefix"
rm -rf "$prefix"
mkdir -p "$prefix/bin" "$prefix/glibc"
for p in $packages; do
	# glibc goes into its own tree: on a machine whose glibc is new enough the wrapper puts
	# $prefix/usr/lib on LD_LIBRARY_PATH, and the suite's libc.so.6 there would be mixed with
	# the system's loader.
	case "$p" in
	libc6) dpkg -x "$(deb_of "$p")" "$prefix/glibc" ;;
	*) dpkg -x "$(deb_of "$p")" "$prefix" ;;
	esac
done
lib=$prefix/usr/lib/x86_64-linux-gnu
[ -x "$prefix/usr/sbin/criu" ] || { say "no usr/sbin/criu after unpacking"; exit 1; }
[ -x "$prefix/glibc/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" ] ||
	{ say "no ld-linux-x86-64.so.2 in the suite's libc6"; exit 1; }

# The newest GLIBC_x.y symbol version that criu or its (non-libc) libraries ask for: the
# system glibc must be at least that for the LD_LIBRARY_PATH way to work.
need=$(cat "$prefix/usr/sbin/criu" "$lib"/*.so* | tr -c 'A-Za-z0-9_.' '\n' |
	grep -E '^GLIBC_2\.[0-9]+$' | sed 's/^GLIBC_//' | sort -t. -k1,1n -k2,2n | tail -n 1)
[ -n "$need" ] || need=99.0
criu_name=$(basename "$(deb_of criu)" .deb)

cat >"$prefix/bin/criu" <<EOF
#!/bin/sh
# criu wrapper written by gpusnap's scripts/get-criu.sh: runs Debian's CRIU ($criu_name)
# from the tree this file is in (which may have been copied to another machine).
#  - system glibc >= $need (what criu and its libraries need): the system's loader and libc,
#    Debian's other libraries through LD_LIBRARY_PATH.
#  - older system glibc: Debian's own loader with --library-path, so nothing leaks into
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
say "ready: $prefix/bin/criu ($criu_name needs glibc >= $need)"
