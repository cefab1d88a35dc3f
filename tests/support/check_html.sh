#!/usr/bin/env bash
# Usage: tests/support/check_html.sh PAGE.html
#
# Opens a page written by `collage explain --html` in headless Chromium and fails (exit 1) if
#   - the dumped DOM has no <svg,
#   - the page raised an uncaught exception or syntax error, or called console.error,
#   - the page references anything outside itself (http(s):// or protocol-relative src/href).
# Prints `html ok: N nodes` on success. Exit 2: bad usage, no Chromium, or Chromium did not run.
#
# How errors are told apart from Chromium's own noise (dbus, gpu, sandbox warnings): with
# --enable-logging=stderr, messages from the page's console are logged as
#   [pid:tid:date:INFO:CONSOLE:LINE] "message", source: file:///.../page.html (LINE)
# (older builds: `CONSOLE(LINE)]`). Only lines with CONSOLE and `source: file://` are looked at.
# Chromium logs every console level as INFO, so console.error is recognised by a one-line shim
# injected into a temporary copy of the page that prefixes its messages with `[console.error]`;
# uncaught exceptions (and unhandled rejections) always start with "Uncaught".
# CHROMIUM=/path/to/chrome overrides the browser.
set -u

if [ $# -ne 1 ] || [ ! -f "$1" ]; then
    echo "usage: $0 PAGE.html" >&2
    exit 2
fi
page=$1

chrome=${CHROMIUM:-}
if [ -z "$chrome" ]; then
    for c in chromium chromium-browser google-chrome google-chrome-stable; do
        if command -v "$c" >/dev/null 2>&1; then
            chrome=$(command -v "$c")
            break
        fi
    done
fi
if [ -z "$chrome" ]; then
    echo "check_html: no chromium found (set CHROMIUM=...)" >&2
    exit 2
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The copy under test: the console.error shim goes first thing after <head> (or at the very top).
shim='<script>(function(){var e=console.error;console.error=function(){var a=Array.prototype.slice.call(arguments);a.unshift("[console.error]");e.apply(console,a);};})();</script>'
copy="$tmp/page.html"
if grep -qi '<head>' "$page"; then
    awk -v shim="$shim" '!done && sub(/<[hH][eE][aA][dD]>/, "&" shim) { done = 1 } { print }' "$page" >"$copy"
else
    { printf '%s\n' "$shim"; cat "$page"; } >"$copy"
fi

timeout 120 "$chrome" --headless --disable-gpu --no-sandbox --enable-logging=stderr --v=0 \
    --user-data-dir="$tmp/profile" --dump-dom "file://$copy" >"$tmp/dom" 2>"$tmp/err"
rc=$?
if [ $rc -ne 0 ] || [ ! -s "$tmp/dom" ]; then
    echo "check_html: chromium failed (exit $rc)" >&2
    tail -n 20 "$tmp/err" >&2
    exit 2
fi

fail=0
if ! grep -q '<svg' "$tmp/dom"; then
    echo "check_html: no <svg in the DOM" >&2
    fail=1
fi

# Console lines from the page itself.
grep -E 'CONSOLE(:[0-9]+|\([0-9]+\))\]' "$tmp/err" | grep -F 'source: file://' >"$tmp/console" || true
if grep -E '\] "(Uncaught|\[console\.error\])' "$tmp/console" >"$tmp/errors"; then
    echo "check_html: console errors:" >&2
    sed -e 's/^\[[^]]*\] //' -e "s#file://$copy#$page#" "$tmp/errors" >&2
    fail=1
fi

# Nothing may be loaded from outside the page.
if grep -Eiq '(src|href)=["'"'"']?(https?:)?//' "$page"; then
    echo "check_html: external reference:" >&2
    grep -Eio '(src|href)=["'"'"']?(https?:)?//[^"'"'"' >]*' "$page" | head -n 5 >&2
    fail=1
fi

if [ $fail -ne 0 ]; then
    exit 1
fi
nodes=$(grep -o 'data-node="' "$tmp/dom" | wc -l)
echo "html ok: $nodes nodes"
