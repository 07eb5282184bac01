#!/usr/bin/env bash
# Real coding agents for the `agents` test suite (issue 20): Claude Code, Codex CLI and the Claude
# Agent SDK, each in an npm prefix of its own under .cache/agents/<name>-<version>.
#
#   bash scripts/agents.sh install [--latest]   the pinned versions (+ the registry's newest)
#   bash scripts/agents.sh paths [--latest]     one line per agent: name version path
#
# install is idempotent (a prefix holding a `ready` stamp is not touched again; ~10-20 s per
# package cold, ~1.3 GB in all: each ships a native binary). When npm cannot install one, it
# writes the reason, one line, to .cache/agents/failed and exits 1, so the tests can skip
# saying why. `--latest` asks the registry (`npm view`) for the newest version of each.
#
# claude-agent-sdk 0.3.332 is the SDK release built on Claude Code 2.1.332 (its package.json
# `claudeCodeVersion`); the SDK's 0.2 line ends at 0.2.141.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=.cache/agents
PINNED=(
    "claude-code @anthropic-ai/claude-code ${CLAUDE_CODE_VERSION:-2.1.332} node_modules/.bin/claude"
    "codex @openai/codex ${CODEX_VERSION:-0.171.0} node_modules/.bin/codex"
    "claude-agent-sdk @anthropic-ai/claude-agent-sdk ${CLAUDE_AGENT_SDK_VERSION:-0.3.332} node_modules/@anthropic-ai/claude-agent-sdk/sdk.mjs"
)

fail() { mkdir -p "$ROOT"; echo "$1" > "$ROOT/failed"; echo "agents.sh: $1" >&2; exit 1; }

# name package version entry (pinned, then the newest where --latest)
agents() {
    local line name pkg version entry latest
    for line in "${PINNED[@]}"; do
        read -r name pkg version entry <<<"$line"
        echo "$name $pkg $version $entry"
        if [ "$WITH_LATEST" = 1 ]; then
            latest="$(npm view "$pkg" version 2>/dev/null)" \
                || fail "npm view $pkg version failed (no registry?)"
            [ "$latest" = "$version" ] || echo "$name $pkg $latest $entry"
        fi
    done
}

install_one() {
    local name="$1" pkg="$2" version="$3" entry="$4"
    local prefix="$ROOT/$name-$version"
    if [ -f "$prefix/ready" ] && [ -e "$prefix/$entry" ]; then
        return 0
    fi
    command -v npm >/dev/null || fail "npm is not installed (node >= 18 and npm are needed)"
    rm -rf "$prefix"
    mkdir -p "$prefix"
    # The package.json keeps npm from walking up to the project's directory for one.
    echo '{"private": true}' > "$prefix/package.json"
    if ! npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error \
            "$pkg@$version" >"$prefix/npm.log" 2>&1; then
        fail "npm install $pkg@$version failed: $(grep -m1 -i 'err' "$prefix/npm.log" || tail -n1 "$prefix/npm.log")"
    fi
    [ -e "$prefix/$entry" ] || fail "npm installed $pkg@$version but $prefix/$entry is missing"
    # The native binaries come from optional dependencies; a platform without one is a skip.
    if [ "${entry##*/}" != sdk.mjs ]; then
        "$prefix/$entry" --version >"$prefix/version.log" 2>&1 \
            || fail "$pkg@$version does not run here: $(tail -n1 "$prefix/version.log")"
    fi
    echo "$pkg@$version" > "$prefix/ready"
}

WITH_LATEST=0
cmd="${1:-}"
[ "${2:-}" = --latest ] && WITH_LATEST=1
case "$cmd" in
    install)
        rm -f "$ROOT/failed"
        agents | while read -r name pkg version entry; do
            start=$SECONDS
            install_one "$name" "$pkg" "$version" "$entry"
            echo "$name $version $PWD/$ROOT/$name-$version/$entry ($((SECONDS - start)) s)"
        done
        ;;
    paths)
        agents | while read -r name pkg version entry; do
            echo "$name $version $PWD/$ROOT/$name-$version/$entry"
        done
        ;;
    *) echo "usage: $0 install|paths [--latest]" >&2; exit 2 ;;
esac
