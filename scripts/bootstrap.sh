# Sourced by scripts/test and scripts/demo: installs what gslice needs on a
# fresh Debian/Ubuntu machine, then (re)builds the native parts.
#   apt: a C compiler, and libnanopb-dev + libnghttp2-dev for the RPC
#        client's test and benchmark programs only (tests/rpc_client,
#        benchmarks/native_build.py link the system's copies; the shim
#        compiles its own from third_party/nanopb and third_party/nghttp2);
#        only what is missing, via sudo when not root.
#   .venv: the package in editable mode with its test extras, and the zig
#        C cross compiler (PyPI `ziglang`) that builds the shim for old glibc.
# Safe to run again: each step is skipped when already done.
set -euo pipefail
GSLICE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$GSLICE_ROOT"

log() { printf '[bootstrap] %s\n' "$*" >&2; }

apt_packages=(gcc libc6-dev pkg-config libnghttp2-dev libnanopb-dev)
missing=()
for pkg in "${apt_packages[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1; then missing+=(python3-venv); fi
if ! "$PYTHON" -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
  missing+=(python3-dev)
fi
if [ ${#missing[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null; then
    log "missing ${missing[*]} and no apt-get: install them with your package manager"; exit 1
  fi
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  log "installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# podman + runc: the Kubernetes CDI test starts a real container with them
# (tests/kubernetes/test_podman_cdi.py; it skips without them). Only as root,
# where the test can run; a failed install only means that test skips.
# GSLICE_NO_PODMAN=1 skips this step.
if [ "$(id -u)" -eq 0 ] && [ -z "${GSLICE_NO_PODMAN:-}" ] && command -v apt-get >/dev/null \
    && ! { dpkg -s podman >/dev/null 2>&1 && dpkg -s runc >/dev/null 2>&1; }; then
  log "installing podman runc (for the CDI container test)"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc >/dev/null; } \
    || log "podman/runc could not be installed: tests/kubernetes/test_podman_cdi.py will skip"
fi

VENV="$GSLICE_ROOT/.venv"
if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
stamp="$VENV/.gslice-installed"
want=$(sha256sum pyproject.toml setup.py | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  log "installing gslice and its dependencies into $VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  # Build requirements first (pyproject.toml [build-system]), so the editable
  # install needs no isolated env; ziglang is the C cross compiler that
  # builds the shim for glibc 2.17 (tools/toolchain.py). grpcio-tools here is
  # any version (nanopb's generator uses it); the Python stubs come from the
  # pinned one, which tools/build_native.py keeps under build/.
  "$VENV/bin/python" -m pip install -q "setuptools>=77,<81" wheel "cffi>=1.16" "grpcio-tools>=1.60" \
    "nanopb==0.4.7" "ziglang>=0.13"
  "$VENV/bin/python" tools/build_native.py proto   # generated packages must exist before the install
  "$VENV/bin/python" -m pip install -q --no-build-isolation -e ".[test]"
  echo "$want" >"$stamp"
fi
# Always rebuild the native parts: quick, and never stale after a pull.
"$VENV/bin/python" tools/build_native.py all
export PATH="$VENV/bin:$PATH"
