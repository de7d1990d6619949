#!/bin/sh
# Release check (`make release-check`): proves that once the modules are
# prepared, committed and tagged, a consumer can `go get` each published
# module at VERSION and build against it, with no replace directive and
# without shedkit on the network:
#
#  1. clone the repository into a temporary directory and copy the working
#     tree over the clone (uncommitted changes included), commit;
#  2. run tools/release/prepare.sh VERSION there, commit, create its tags;
#  3. outside the repository (GOWORK=off), with a temporary module cache,
#     fetch github.com/shedkit/shedkit directly (GOPRIVATE) from the clone,
#     which git finds through a temporary config (url.<clone>.insteadOf
#     https://github.com/shedkit/shedkit); third-party modules come from
#     GOPROXY as usual (the network is needed);
#  4. for each published module, as a user would: a fresh module, `go get`
#     of that module alone at VERSION, a program importing it built; then
#     one module with all of them, and every package of theirs built.
#
# Commits and tags are made in the clone only; the user's git config is not
# read (GIT_CONFIG_GLOBAL points at a temporary file) and the module cache
# is a temporary one, so the fake release reaches neither. Everything is
# removed at the end.
#
# Usage: tools/release/check.sh [VERSION]   (default v0.0.1-check)
set -eu

version=${1:-v0.0.1-check}
GO=${GO:-go}
MODULE=github.com/shedkit/shedkit
root=$(cd "$(dirname "$0")/../.." && pwd)

say() { echo "release-check: $*"; }
die() { echo "release-check: FAIL: $*" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/shedkit-release-check.XXXXXX")
cleanup() {
	# The module cache is read-only; -modcacherw below makes it removable.
	chmod -R u+w "$tmp" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# git: a temporary global config, no system config.
export GIT_CONFIG_GLOBAL="$tmp/gitconfig" GIT_CONFIG_NOSYSTEM=1
export GIT_AUTHOR_NAME='release check' GIT_AUTHOR_EMAIL='release-check@invalid'
export GIT_COMMITTER_NAME="$GIT_AUTHOR_NAME" GIT_COMMITTER_EMAIL="$GIT_AUTHOR_EMAIL"
: >"$GIT_CONFIG_GLOBAL"
git config --global advice.detachedHead false

say "cloning $root into $tmp/repo"
git clone -q --depth 1 "file://$root" "$tmp/repo"
repo="$tmp/repo"
git -C "$repo" remote remove origin # nothing can be pushed back
# The working tree as it is: tracked files (modified or not) and untracked
# ones that are not ignored; files deleted in the working tree stay deleted.
git -C "$repo" ls-files -z | (cd "$repo" && xargs -0 rm -f)
(cd "$root" && git ls-files -co --exclude-standard | while IFS= read -r f; do
	if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\n' "$f"; fi
done) | (cd "$root" && tar -cf - -T -) | tar -C "$repo" -xf -
git -C "$repo" add -A
git -C "$repo" commit -q --allow-empty -m 'release check: the working tree'

say "preparing $version"
tags=$(GO="$GO" "$repo/tools/release/prepare.sh" "$version")
git -C "$repo" add -A
git -C "$repo" commit -q --allow-empty -m "Release $version"
for t in $tags; do
	git -C "$repo" tag -a -m "shedkit $t" "$t"
done
say "tagged $(git -C "$repo" rev-parse --short HEAD): $(echo $tags)"
gomods=go.mod
for t in $tags; do
	case "$t" in */*) gomods="$gomods ${t%/*}/go.mod" ;; esac
done
# shellcheck disable=SC2086 # one argument per go.mod
if git -C "$repo" grep -n 'v0\.0\.0-00010101000000-000000000000' -- $gomods; then
	die "a published module still requires a sibling at the placeholder version"
fi

# Git finds "https://github.com/shedkit/shedkit" in the clone.
git config --global url."file://$repo".insteadOf "https://$MODULE"
git config --global protocol.file.allow always

# -mod=mod: the consumer records what it needs as it goes (go.sum included).
export GOWORK=off GOFLAGS="-modcacherw -mod=mod" GOMODCACHE="$tmp/modcache"
export GOPRIVATE='github.com/shedkit/*' GONOPROXY='github.com/shedkit/*' GONOSUMDB='github.com/shedkit/*'
export GOTOOLCHAIN=local

published="$MODULE"
for t in $tags; do
	case "$t" in */*) published="$published $MODULE/${t%/*}" ;; esac
done

# The package a user of module $1 imports, and one of its functions.
usage() {
	case "${1#"$MODULE"}" in
	'') echo 'shed shed.New' ;;
	/limits/gcl) echo 'limits/gcl gcl.NewGradient2' ;;
	/middleware/echo) echo 'middleware/echo echo.New' ;;
	/middleware/grpc) echo 'middleware/grpc grpc.NewServer' ;;
	/middleware/shedredis) echo 'middleware/shedredis shedredis.NewStore' ;;
	/sim) echo 'sim sim.RunBatch' ;;
	*) die "$1 is published: say in usage() of $0 what a user imports from it" ;;
	esac
}

# $1: the consumer's directory; $2...: the packages it imports, each
# followed by a function of it (as usage prints them).
consumer() {
	dir=$1
	shift
	mkdir "$dir"
	{
		echo 'package main'
		echo
		echo 'import ('
		n=0
		for w in "$@"; do
			n=$((n + 1))
			if [ $((n % 2)) = 1 ]; then echo "	\"$MODULE/$w\""; fi
		done
		echo ')'
		echo
		echo 'var ('
		n=0
		for w in "$@"; do
			n=$((n + 1))
			if [ $((n % 2)) = 0 ]; then echo "	_ = $w"; fi
		done
		echo ')'
		echo
		echo 'func main() {}'
	} >"$dir/main.go"
	(cd "$dir" && "$GO" mod init example.com/consumer >/dev/null 2>&1)
}

# The shedkit modules of the consumer in the current directory must all be
# at $version, none replaced.
check_versions() {
	if grep -q '^replace' go.mod; then die "the consumer's go.mod has a replace directive"; fi
	"$GO" list -m -f '{{.Path}} {{.Version}}{{with .Replace}} => {{.Path}}{{end}}' all |
		grep "^$MODULE[ /]" >"$tmp/mods" || true
	sed 's/^/  /' "$tmp/mods"
	if bad=$(grep -v "^[^ ]* $version\$" "$tmp/mods"); then
		die "shedkit modules not at $version: $bad"
	fi
}

# What a user does: a fresh module, `go get` of one shedkit module, a build.
i=0
for m in $published; do
	i=$((i + 1))
	# shellcheck disable=SC2046 # the package and its function
	consumer "$tmp/consumer$i" $(usage "$m")
	cd "$tmp/consumer$i"
	say "a fresh module: go get $m@$version"
	"$GO" get "$m@$version" || die "go get $m@$version"
	"$GO" build -o /dev/null . || die "a program importing $m does not build"
	check_versions
done

# One service with all of them, and every package of the published modules.
all='limits limits.NewGradient retrybudget retrybudget.NewTransport middleware/nethttp nethttp.New'
for m in $published; do all="$all $(usage "$m")"; done
# shellcheck disable=SC2086 # pairs of words
consumer "$tmp/consumer" $all
cd "$tmp/consumer"
say "a fresh module requiring all of them:$(for m in $published; do printf ' %s' "${m#"$MODULE"/}@$version"; done)"
for m in $published; do
	"$GO" get "$m@$version" || die "go get $m@$version"
done
"$GO" build -o /dev/null . || die "a program importing them all does not build"
check_versions
say "building every package of the published modules as a dependency"
"$GO" build "$MODULE/..." || die "a package of the published modules does not build as a dependency"
"$GO" list -f '{{.Module.Path}}' "$MODULE/..." | sort | uniq -c | sed 's/^ */  /'

say "ok: each of the $(echo "$published" | wc -w | tr -d ' ') published modules fetched by go get at $version from its tag, without replace directives, and built"
