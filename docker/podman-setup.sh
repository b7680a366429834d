#!/usr/bin/env bash
# Make podman usable on this kind of machine: runc as the OCI runtime, host networking, and no
# default ulimits (the sandbox refuses to raise them).  Installs podman, runc and
# podman-compose from Debian's packages when missing.  Safe to run twice.
set -euo pipefail
missing=()
for tool in podman runc; do command -v "$tool" >/dev/null || missing+=("$tool"); done
command -v podman-compose >/dev/null || missing+=(podman-compose)
if [ "${#missing[@]}" -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
mkdir -p /etc/containers
if ! grep -qs 'aucstream' /etc/containers/containers.conf; then
  cat >/etc/containers/containers.conf <<'CONF'
# written by aucstream docker/podman-setup.sh
[containers]
default_ulimits = []
netns = "host"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
fi
podman info --format '{{.Host.OCIRuntime.Name}} {{.Store.GraphDriverName}}'
