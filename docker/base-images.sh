#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# docker/base-images.sh — the two Debian 12 base images of docker/Containerfile,
# made once per machine: debootstrap --variant=minbase from the Debian mirror
# apt uses here, then `podman import`.  Prints "BASE_IMAGE BUILD_IMAGE".
#
#   heisen-base:KEY-DATE   minbase + libunwind8 libdw1 libelf1 libjansson4 python3
#   heisen-build:KEY-DATE  the same + gcc meson ninja-build pkg-config and the -dev packages
#
# Cache: $HEISEN_IMAGE_CACHE (default /var/cache/heisen-test) keeps the root
# file systems as tarballs named by the package lists' key and the date; the newest is
# used, so debootstrap (minutes) runs only on a machine that has none, and
# podman's own store keeps the imported images.  Needs root (debootstrap,
# chroot).  Exit status 0, or 1 with the reason on stderr.
set -euo pipefail

CACHE=${HEISEN_IMAGE_CACHE:-/var/cache/heisen-test}
RUNTIME_PKGS=libunwind8,libdw1,libelf1,libjansson4,python3
BUILD_PKGS="gcc libc6-dev meson ninja-build pkg-config libunwind-dev libdw-dev libelf-dev uthash-dev libjansson-dev"
# the package lists name the cache: a changed list makes new images, never reuses old ones
KEY=$(printf '%s\n%s\n' "$RUNTIME_PKGS" "$BUILD_PKGS" | sha256sum | cut -c1-8)

die() { printf 'base-images: %s\n' "$*" >&2; exit 1; }

mirror() {
	# the first Debian (not security) URI apt uses on this machine
	local m
	m=$(grep -hsE '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null |
		grep -v security | sed -E 's/^URIs:[[:space:]]*//; s/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?//' |
		awk '{print $1; exit}')
	printf '%s\n' "${m:-http://deb.debian.org/debian}"
}

newest() { ls -1 "$CACHE"/"$1"-"$KEY"-*.tar 2>/dev/null | sort | tail -n 1; }

make_tarballs() {
	local d rootfs
	d=$(date -u +%Y%m%d)
	command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
	mkdir -p "$CACHE"
	rootfs=$(mktemp -d "$CACHE/rootfs.XXXXXX")
	trap 'rm -rf "$rootfs"' EXIT
	debootstrap --variant=minbase --include="$RUNTIME_PKGS" bookworm "$rootfs" "$(mirror)" >"$CACHE/debootstrap.log" 2>&1 ||
		die "debootstrap failed: see $CACHE/debootstrap.log"
	tar -C "$rootfs" -c . >"$CACHE/.bookworm-minbase-$KEY-$d.tar" && mv "$CACHE/.bookworm-minbase-$KEY-$d.tar" "$CACHE/bookworm-minbase-$KEY-$d.tar"
	cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
	# shellcheck disable=SC2086
	chroot "$rootfs" /usr/bin/env DEBIAN_FRONTEND=noninteractive sh -c \
		"apt-get update -q && apt-get install -y -q --no-install-recommends $BUILD_PKGS && apt-get clean" \
		>"$CACHE/build-apt.log" 2>&1 || die "installing the build packages failed: see $CACHE/build-apt.log"
	rm -f "$rootfs/etc/resolv.conf"
	tar -C "$rootfs" -c . >"$CACHE/.bookworm-build-$KEY-$d.tar" && mv "$CACHE/.bookworm-build-$KEY-$d.tar" "$CACHE/bookworm-build-$KEY-$d.tar"
	rm -rf "$rootfs"
	trap - EXIT
}

import() { # NAME TARBALL: NAME:KEY-DATE in podman's store, imported once
	local tag
	tag=$1:$(basename "$2" .tar | sed -E 's/.*-([0-9a-f]{8}-[0-9]{8})$/\1/')
	podman image exists "$tag" || podman import "$2" "$tag" >/dev/null || die "podman import $2 failed"
	printf '%s' "$tag"
}

command -v podman >/dev/null || die "podman is not installed (apt-get install podman runc)"
if [[ -z $(newest bookworm-minbase) || -z $(newest bookworm-build) ]]; then
	((EUID == 0)) || die "no cached base image in $CACHE and not root: debootstrap needs root"
	make_tarballs
fi
base=$(import heisen-base "$(newest bookworm-minbase)")
build=$(import heisen-build "$(newest bookworm-build)")
printf '%s %s\n' "$base" "$build"
