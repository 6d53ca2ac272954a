#!/usr/bin/env bash
# The check of k8s/ (.ci/run's step "k8s check"; docs/operations.md,
# "Kubernetes"). Exits non-zero, saying what failed, when anything fails:
#
#   1. every overlay (k8s/overlays/*) renders with `kubectl kustomize`: the
#      kubectl on PATH (a current one) and Debian 12's kubectl 1.20 from the
#      package kubernetes-client, whose embedded kustomize v2.0.3 knows fewer
#      keys. The package cannot be installed beside a kubectl that another
#      package owns (both ship /usr/bin/kubectl), so it is fetched with
#      `apt-get download` and unpacked into the build tree, never installed;
#   2. check.mjs validates every rendered object against the Kubernetes API
#      schemas (the npm package kubernetes-models, at the versions of
#      package-lock.json, installed under the build tree) and keelson's policy,
#      checks that the two kubectls render the same objects, and scans k8s/
#      for committed Secret values;
#   3. the dev overlay's Secrets Job's script (secrets-job-test.sh): what it
#      writes when none, some or all of the Secrets exist;
#   4. the negative self-test: the same checker on a deliberately bad fixture
#      (fixtures/bad) must fail every one of its rules; on the dev overlay
#      plus an allow-all NetworkPolicy it must fail the flows rule, and plus
#      the Secrets Job's rights handed to a service it must fail rbac.
#
#   tests/k8s/check.sh [BUILD_DIR]      (default: build)
#
# Needs node (20 or later) and npm, and the npm registry the first time; the
# Debian registry for kubectl 1.20 the first time (without it that render is
# skipped, and said so, as long as another kubectl renders).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE=$ROOT/tests/k8s
BUILD=${1:-$ROOT/build}
mkdir -p "$BUILD"
WORK=$(cd "$BUILD" && pwd)/k8s-check
mkdir -p "$WORK"

say() { printf 'k8s check: %s\n' "$*"; }
die() {
        say "FAILED: $*"
        exit 1
}

# ---- tools ---------------------------------------------------------------------

command -v node >/dev/null 2>&1 || die "node is missing (Node.js 20 or later, with npm)"
command -v npm >/dev/null 2>&1 || die "npm is missing"
node_major=$(node -p 'process.versions.node.split(".")[0]')
[ "$node_major" -ge 20 ] || die "node $(node --version) is too old: 20 or later"

RENDERERS=() # name=path of each kubectl that renders
if command -v "${KUBECTL:-kubectl}" >/dev/null 2>&1; then
        RENDERERS+=("current=$(command -v "${KUBECTL:-kubectl}")")
fi
# Debian 12's kubernetes-client, unpacked (see the top of this file).
debian_kubectl=$WORK/debian-kubectl/usr/bin/kubectl
if [ ! -x "$debian_kubectl" ]; then
        rm -rf "$WORK/debian-kubectl" "$WORK/deb"
        mkdir -p "$WORK/deb"
        if (cd "$WORK/deb" && apt-get download kubernetes-client) >"$WORK/deb/download.log" 2>&1; then
                dpkg-deb -x "$WORK"/deb/kubernetes-client_*.deb "$WORK/debian-kubectl"
        else
                say "note: apt-get download kubernetes-client failed, its render is skipped:"
                sed 's/^/    /' "$WORK/deb/download.log" | tail -n 5
        fi
fi
[ ! -x "$debian_kubectl" ] || RENDERERS+=("debian=$debian_kubectl")
[ ${#RENDERERS[@]} -gt 0 ] || die "no kubectl: install one (a current kubectl, or Debian's kubernetes-client)"
for r in "${RENDERERS[@]}"; do
        say "renderer ${r%%=*}: ${r#*=} ($("${r#*=}" version --client 2>/dev/null | head -n 1))"
done

# ---- render ----------------------------------------------------------------------

# A copy of the tree, as git has it plus what it does not ignore.
rm -rf "$WORK/tree" "$WORK/render"
mkdir -p "$WORK/tree" "$WORK/render"
cp -a "$ROOT/k8s" "$WORK/tree/k8s"

# Renders $1 (a kustomization folder) with every renderer into
# $WORK/render/$2.<renderer>.yaml; sets RENDERED to the comma-separated list.
render() {
        local dir=$1 name=$2 r out
        RENDERED=""
        for r in "${RENDERERS[@]}"; do
                out=$WORK/render/$name.${r%%=*}.yaml
                if ! "${r#*=}" kustomize "$dir" >"$out" 2>"$out.err"; then
                        cat "$out.err"
                        die "kubectl kustomize $dir failed with the ${r%%=*} kubectl (${r#*=})"
                fi
                # A current kustomize warns about the v2.0.3 keys kept on purpose
                # (base/kustomization.yaml); anything else is shown.
                grep -v -E "^# Warning: '(bases|patchesStrategicMerge)' is deprecated" "$out.err" || true
                RENDERED=${RENDERED:+$RENDERED,}$out
        done
}

overlay_args=()
for dir in "$WORK"/tree/k8s/overlays/*/; do
        name=$(basename "$dir")
        render "$dir" "$name"
        overlay_args+=(--overlay "$name=$RENDERED")
        say "rendered overlay $name: $RENDERED"
done
[ ${#overlay_args[@]} -gt 0 ] || die "no overlay under k8s/overlays"

# ---- the checker and its packages --------------------------------------------------

NODE_DIR=$WORK/node
mkdir -p "$NODE_DIR"
cp "$HERE/check.mjs" "$NODE_DIR/check.mjs"
if ! cmp -s "$HERE/package-lock.json" "$NODE_DIR/package-lock.json" ||
        [ ! -f "$NODE_DIR/node_modules/.package-lock.json" ]; then
        cp "$HERE/package.json" "$HERE/package-lock.json" "$NODE_DIR/"
        (cd "$NODE_DIR" && npm ci --no-audit --no-fund --loglevel=error) ||
                die "npm ci (tests/k8s/package-lock.json) failed"
fi

say "checking the overlays"
node "$NODE_DIR/check.mjs" "${overlay_args[@]}" --source "$ROOT/k8s" \
        --config-doc "$ROOT/docs/configuration.md" ||
        die "the overlays break the rules above (tests/k8s/check.mjs says what each rule wants)"

# ---- the dev Secrets Job's script -------------------------------------------------------

say "the dev overlay's Secrets Job: its script, with none, some and all of the Secrets there"
bash "$HERE/secrets-job-test.sh" "$ROOT/k8s/overlays/dev/secrets-job.sh" "$WORK/secrets-job" ||
        die "secrets-job.sh does not do what the Job needs (secrets-job-test.sh says what)"

# ---- negative self-test ----------------------------------------------------------------

# Runs the checker expecting it to fail the rules $1; its own output is kept
# out of the way unless the expectation is not met.
expect_failure() {
        local rules=$1 log=$WORK/negative.log
        shift
        if node "$NODE_DIR/check.mjs" "$@" --expect "$rules" >"$log" 2>&1; then
                grep -E '^k8s check: (overlay|source|negative)' "$log"
        else
                cat "$log"
                die "negative self-test: the checker passed (or missed a rule) on input it must refuse"
        fi
}

say "negative self-test: a bad fixture must fail every rule"
render "$HERE/fixtures/bad" bad
expect_failure "all,-flows" --overlay "bad=${RENDERED%%,*},$HERE/fixtures/bad/other-render.yaml" \
        --add "bad=$HERE/fixtures/bad/broken.yaml" --source "$HERE/fixtures/bad" \
        --config-doc "$ROOT/docs/configuration.md"
say "negative self-test: the dev overlay with an allow-all NetworkPolicy must fail the flows"
dev_render=$WORK/render/dev.${RENDERERS[0]%%=*}.yaml
expect_failure flows --overlay "dev=$dev_render" --add "dev=$HERE/fixtures/allow-all-netpol.yaml"
say "negative self-test: the dev overlay with the Secrets Job's rights leaked must fail rbac"
expect_failure rbac --overlay "dev=$dev_render" --add "dev=$HERE/fixtures/dev-rbac-leak.yaml"

say "ok"
