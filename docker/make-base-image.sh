#!/usr/bin/env bash
# Build the local base image (images cannot be pulled on this machine): a minimal Debian
# bookworm root filesystem made with debootstrap from Debian's package mirror, with Python 3.11
# and CA certificates, imported into podman as ${BASE_IMAGE:-localhost/aucstream-base:bookworm}.
# Idempotent: does nothing when the image exists (FORCE=1 rebuilds it).
set -euo pipefail
image="${BASE_IMAGE:-localhost/aucstream-base:bookworm}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

if podman image exists "$image" && [ "${FORCE:-0}" != 1 ]; then
  echo "base image $image already exists"
  exit 0
fi
command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap; }

rootfs="$(mktemp -d /tmp/aucstream-rootfs.XXXXXX)"
trap 'rm -rf "$rootfs"' EXIT
debootstrap --variant=minbase \
  --include=python3,python3-venv,ca-certificates \
  bookworm "$rootfs" "$mirror" >/tmp/aucstream-debootstrap.log
chroot "$rootfs" apt-get clean
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin
tar -C "$rootfs" -c . | podman import \
  --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' - "$image"
echo "built base image $image"
