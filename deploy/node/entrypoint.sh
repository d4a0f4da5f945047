#!/bin/sh
# Entrypoint of the gslice node image (deploy/node/Containerfile).
#
#   gslice-node tokend ARGS...          the token daemon (gslice tokend ARGS...)
#   gslice-node kubelet-plugin ARGS...  the Kubernetes kubelet plugin
#   gslice-node ANYTHING...             gslice ANYTHING... (status, install-shim, ...)
#
# First, when GSLICE_SHIM_PREFIX is set, the shim is copied to
# $GSLICE_SHIM_PREFIX/<version>/lib/libgslice.so for the node's containers
# (`gslice install-shim`: a new version gets a new folder, and a file is
# only ever replaced by rename, never rewritten under a running process).
set -eu

if [ -n "${GSLICE_SHIM_PREFIX:-}" ]; then
  gslice install-shim --prefix "$GSLICE_SHIM_PREFIX" >&2
fi

role=${1:-tokend}
[ "$#" -eq 0 ] || shift
case "$role" in
  tokend)
    exec gslice tokend "$@"
    ;;
  kubelet-plugin)
    # The Kubernetes DRA kubelet plugin needs the wheel's `kubernetes` extra
    # (the Containerfile installs gslice[kubernetes]).
    if python -c 'import kubernetes' >/dev/null 2>&1; then
      exec gslice-dra "$@"
    fi
    echo "gslice-node: this image's gslice has no Kubernetes kubelet plugin (install gslice[kubernetes])" >&2
    exit 2
    ;;
  *)
    exec gslice "$role" "$@"
    ;;
esac
