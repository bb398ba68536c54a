#!/usr/bin/env bash
# Builds the k3s-js renderer: installs the pinned toolchain from package-lock.json (npm ci,
# skipped when node_modules already holds exactly that lock file), then componentizes
# src/index.js against the world userdata-renderer-plugin of wit/v0.1.
#
#   examples/plugins/k3s-js/build.sh [OUT]
#
# OUT is the component to write: the argument, else $JOINERY_JS_PLUGIN, else
# target/plugins-js/k3s-js/plugin.wasm (relative paths are relative to the repository root).
# Next to it goes plugin.yaml, this directory's manifest with `component:` naming OUT's file
# and its `sha256:` filled in, so OUT's directory is a plugin directory Joinery can load.
#
# Every WASI feature of the JS engine is disabled (--disable stdio random clocks http
# fetch-event): the component imports joinery:plugin/log, config and types and nothing else.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"

out="${1:-${JOINERY_JS_PLUGIN:-target/plugins-js/k3s-js/plugin.wasm}}"
case "$out" in
  *.wasm) ;;
  *) echo "build.sh: the output $out must end in .wasm (plugin.yaml's component must)" >&2; exit 2 ;;
esac
case "$out" in
  /*) ;;
  *) out="$repo/$out" ;;
esac
mkdir -p "$(dirname "$out")"

command -v npm >/dev/null || { echo "build.sh: npm (with node 18 or later) is required" >&2; exit 1; }
cd "$here"

# npm ci deletes and reinstalls node_modules (a minute, 400 MB); skip it when the installed
# tree came from this very lock file.
lock_digest="$(sha256sum package-lock.json | cut -d' ' -f1)"
stamp="node_modules/.joinery-lock-sha256"
if [ "$(cat "$stamp" 2>/dev/null)" != "$lock_digest" ]; then
  echo "==> npm ci (examples/plugins/k3s-js)"
  npm ci --no-audit --no-fund
  echo "$lock_digest" >"$stamp"
fi

echo "==> componentize-js src/index.js -> $out"
started=$SECONDS
# Run from this directory with a relative source path: componentize-js then maps it to `/`
# inside the component, so no path of the build machine ends up in the snapshot.
node_modules/.bin/componentize-js \
  --wit ../../../wit/v0.1 \
  --world-name userdata-renderer-plugin \
  --disable stdio random clocks http fetch-event \
  --out "$out.tmp.$$" \
  src/index.js
mv -f "$out.tmp.$$" "$out"

digest="$(sha256sum "$out" | cut -d' ' -f1)"
manifest="$(dirname "$out")/plugin.yaml"
sed -e "s|^component: .*|component: $(basename "$out")|" -e '/^# sha256:/d' plugin.yaml >"$manifest.tmp.$$"
echo "sha256: $digest" >>"$manifest.tmp.$$"
mv -f "$manifest.tmp.$$" "$manifest"
echo "built $out ($(wc -c <"$out") bytes, sha256 $digest) in $((SECONDS - started)) s; manifest $manifest"
