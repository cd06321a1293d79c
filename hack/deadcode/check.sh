#!/usr/bin/env bash
# check.sh DEADCODE [DIR ALLOW]: reports the functions of the Go module in DIR
# (default: the repository root) that no main package reaches, as
# golang.org/x/tools/cmd/deadcode finds them, less those ALLOW (default:
# hack/deadcode/allow.txt) allows; exits 1 when any is left or an ALLOW line
# allows nothing (stale). Without DIR it first checks itself on
# testdata/fixture, which must report exactly its three dead functions.
# make deadcode builds DEADCODE from this module's pinned version and runs it.
#
# ALLOW holds one rule a line, "KIND REGEXP # reason" (the reason is required;
# REGEXP is an extended regexp matched against the whole string):
#   api  PKG   exported functions and methods of exported types in the
#              packages PKG matches are allowed: they are API for importers
#   pkg  PKG   every function in the packages PKG matches is allowed
#   func NAME  the function PKGPATH.NAME (methods: PKGPATH.Type.Method)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="$1"
case "$bin" in /*) ;; *) bin="$PWD/$bin" ;; esac

# check DIR ALLOW: prints the report, returns 1 when something is dead.
check() {
	local dir="$1" allow="$2" found
	found="$(cd "$dir" && "$bin" -f '{{range .Funcs}}{{$.Path}} {{.Name}} {{.Position.File}}:{{.Position.Line}}{{"\n"}}{{end}}' ./...)" || return 2
	awk -v allowfile="$allow" '
	function exported(name,   parts, n, i) {
		n = split(name, parts, ".")
		for (i = 1; i <= n; i++) if (parts[i] !~ /^[A-Z]/) return 0
		return 1
	}
	BEGIN {
		while ((getline line < allowfile) > 0) {
			ln++
			if (line ~ /^[ \t]*(#|$)/) continue
			if (line !~ /#[ \t]*[^ \t]/) { printf "%s:%d: allow rule without a reason: %s\n", allowfile, ln, line; bad = 1; continue }
			split(line, f, /[ \t]+/)
			if (f[1] != "api" && f[1] != "pkg" && f[1] != "func") { printf "%s:%d: unknown kind %s (api, pkg or func)\n", allowfile, ln, f[1]; bad = 1; continue }
			n++; kind[n] = f[1]; re[n] = "^(" f[2] ")$"; where[n] = allowfile ":" ln; used[n] = 0
		}
	}
	NF == 3 {
		ok = 0
		for (i = 1; i <= n && !ok; i++) {
			if (kind[i] == "func" && ($1 "." $2) ~ re[i]) ok = 1
			else if (kind[i] == "pkg" && $1 ~ re[i]) ok = 1
			else if (kind[i] == "api" && $1 ~ re[i] && exported($2)) ok = 1
			if (ok) used[i] = 1
		}
		if (!ok) dead[++nd] = $3 ": " $1 "." $2
	}
	END {
		if (nd > 0) {
			printf "deadcode: %d function(s) no main package reaches: delete them; if only tests call them, move them into a _test.go file (export_test.go for other packages'"'"' tests); allow public API or a whole test-only package in %s, with a reason:\n", nd, allowfile
			for (i = 1; i <= nd; i++) print "  " dead[i]
			bad = 1
		}
		for (i = 1; i <= n; i++) if (!used[i]) { printf "%s: allow rule matches nothing (stale: delete it)\n", where[i]; bad = 1 }
		exit bad
	}' <<<"$found"
}

if [ $# -ge 3 ]; then
	check "$2" "$3"
	exit
fi

# Self-test: the check must fail on the fixture, naming exactly its dead
# functions (a plain one, an unexported helper and an exported method of an
# unexported type in the "public" package api) and none of api's API.
want='deadcode: 3 function(s) no main package reaches
  main.go:12: example.com/fixture.dead
  api/api.go:20: example.com/fixture/api.t.M
  api/api.go:23: example.com/fixture/api.helper'
set +e
got="$(check "$here/testdata/fixture" "$here/testdata/fixture/allow.txt" | sed '1s/ reaches: .*/ reaches/')"
rc=$?
set -e
if [ "$rc" -ne 1 ] || [ "$got" != "$want" ]; then
	printf 'deadcode self-test on hack/deadcode/testdata/fixture failed (exit %d), got:\n%s\nwant:\n%s\n' "$rc" "$got" "$want" >&2
	exit 1
fi
check "$(cd "$here/../.." && pwd)" "$here/allow.txt"
