#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian machine: kcat (librdkafka's
# command-line client). Idempotent; needs root (or sudo) only when something
# is missing.
set -euo pipefail

need=()
command -v kcat >/dev/null 2>&1 || need+=(kcat)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "installing: ${need[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
kcat -V 2>&1 | head -1 >&2
