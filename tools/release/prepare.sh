#!/bin/sh
# Prepares a release of shedkit's published modules at VERSION (e.g. v0.1.0):
# in every go.mod of the repository, a requirement of a published module of
# the repository is set to VERSION with `go mod edit`. The replace directives
# stay: they keep local development on the working tree, and Go ignores them
# in a dependency, where the required versions, that is the tags, count.
#
# Prints the tags to create on the release commit, one a line, on stdout:
# VERSION for the root module, DIR/VERSION for the module in DIR. Messages go
# to stderr. It creates no commit and no tag: see RELEASING.md.
#
# Usage: tools/release/prepare.sh VERSION
set -eu

# The published modules, the root aside: the library's integrations, and sim,
# the simulator's library (cmd/shedsim is its front end). Every sibling a
# published module requires must be published too (checked below). cmd,
# bench, dashboards, e2e and tools/jaeger are not: nothing published
# requires them, and `go install .../cmd/shedsim@VERSION` would refuse
# cmd's replace directives anyway (README, "Installing shedsim").
PUBLISHED='limits/gcl middleware/echo middleware/grpc middleware/shedredis sim'
MODULE=github.com/shedkit/shedkit
GO=${GO:-go}

die() { echo "prepare: $*" >&2; exit 1; }

[ "$#" -eq 1 ] || die "usage: $0 VERSION (e.g. v0.1.0)"
version=$1
# A canonical semantic version, major 0 or 1: the module paths carry no /vN.
echo "$version" | grep -Eq '^v[01]\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$' ||
	die "$version is not a version like v0.1.0 or v0.1.0-rc.1 (major 0 or 1, no build metadata)"

cd "$(dirname "$0")/../.."
[ "$(GOWORK=off "$GO" list -m)" = "$MODULE" ] || die "$(pwd) is not the root of $MODULE"

# The module paths required by the go.mod $1 (direct and indirect).
requires() {
	"$GO" mod edit -print "$1" | awk '
		/^require \($/ { block = 1; next }
		block && /^\)/ { block = 0; next }
		block { print $1 }
		/^require [^(]/ { print $2 }'
}

published_path() {
	case " $PUBLISHED " in *" ${1#"$MODULE"/} "*) return 0 ;; esac
	[ "$1" = "$MODULE" ]
}

for d in $PUBLISHED; do
	[ -f "$d/go.mod" ] || die "published module $d has no go.mod"
done

# Every go.mod of the repository.
gomods=$(find . -name go.mod -not -path './.git/*' -not -path './.cache/*' -not -path './out/*' | sed 's|^\./||' | sort)

# First the requirements to set, so that nothing is edited if one is wrong.
fail=0
edits=
for f in $gomods; do
	dir=$(dirname "$f")
	for p in $(requires "$f"); do
		case "$p" in "$MODULE" | "$MODULE"/*) ;; *) continue ;; esac
		if published_path "$p"; then
			edits="$edits $f:$p"
		elif [ "$dir" = . ] || published_path "$MODULE/$dir"; then
			echo "prepare: $f requires $p, which is not published: publish it too (PUBLISHED in $0) or drop the requirement" >&2
			fail=1
		fi
	done
done
[ "$fail" = 0 ] || exit 1

edited=
for e in $edits; do
	f=${e%%:*} p=${e#*:}
	"$GO" mod edit -require="$p@$version" "$f"
	echo "$f: $p $version" >&2
	dir=$(dirname "$f")
	case " $edited " in *" $dir "*) ;; *) edited="$edited $dir" ;; esac
done

# The edited modules must still load on their own, tests included, with
# their go.sum as it is (GOWORK=off, as `make test` builds them).
for d in $edited; do
	(cd "$d" && GOWORK=off GOFLAGS=-mod=readonly "$GO" list -deps -test ./... >/dev/null) ||
		die "module $d no longer loads with GOWORK=off after the edit"
done

echo "prepare: go.mod files set to $version; commit them, then create these tags on that commit:" >&2
echo "$version"
for d in $PUBLISHED; do
	echo "$d/$version"
done
