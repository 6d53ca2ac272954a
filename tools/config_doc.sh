#!/usr/bin/env bash
# Prints the variables of one keelson binary as the Markdown table of
# docs/configuration.md, from the binary's own --help: the configuration
# table in the code is the authority, the document is regenerated from it.
#
#   tools/config_doc.sh build/keelson-auth
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 BINARY" >&2; exit 2; }
echo '| variable | type | default | range | what it does |'
echo '| --- | --- | --- | --- | --- |'
"$1" --help | awk '
function flush() {
        if (name == "") return
        printf "| `%s` | %s | %s | %s | %s |\n", name, type, def, range, help
        name = ""
}
/^  [A-Z][A-Z0-9_]+$/ { flush(); name = $1; type = ""; def = ""; range = "—"; help = ""; next }
name == "" { next }
/^      type: / { sub(/^      type: +/, ""); type = $0; next }
/^      default: / {
        sub(/^      default: +/, "")
        if ($0 ~ /^".*"$/) { v = substr($0, 2, length($0) - 2); def = (v == "" ? "(empty)" : "`" v "`") }
        else def = $0
        next
}
/^      range: / { sub(/^      range: +/, ""); range = $0; next }
/^      values: / { sub(/^      values: +/, ""); range = $0; next }
/^      / { sub(/^      /, ""); gsub(/\|/, "\\|"); help = (help == "" ? $0 : help " " $0); next }
END { flush() }
'
