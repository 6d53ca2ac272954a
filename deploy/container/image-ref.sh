#!/usr/bin/env bash
# Prints the image's reference, keelson:<tag>, with the tag of the `images:`
# entry named keelson in k8s/base/kustomization.yaml: the one place a release
# sets it. build.sh tags the image with it; smoke.sh runs it.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KUSTOMIZATION=$SCRIPT_DIR/../../k8s/base/kustomization.yaml
NAME=keelson

tag=$(awk -v name="$NAME" '
        /^images:/ { in_images = 1; next }
        in_images && /^[^ -]/ { in_images = 0 }
        in_images && $1 == "-" && $2 == "name:" { mine = ($3 == name) }
        in_images && mine && $1 == "newTag:" { gsub(/"/, "", $2); print $2; exit }
' "$KUSTOMIZATION")
if [ -z "$tag" ]; then
        printf 'image-ref: no newTag for %s in %s\n' "$NAME" "$KUSTOMIZATION" >&2
        exit 1
fi
echo "$NAME:$tag"
