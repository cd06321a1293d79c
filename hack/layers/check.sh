#!/usr/bin/env bash
# check.sh [IMPORTS]: checks that the module's folders form layers. IMPORTS
# holds one package a line, "PKG IMPORT...", as
# `go list -f '{{.ImportPath}} {{join .Imports " "}}' ./...` prints it
# (non-test imports; the default: that command run at the repository root).
# Each package belongs to a folder (cmd, internal/daemon, internal/core, ...,
# nodeapi) and each folder to a layer, highest first:
#
#   7  cmd, test, bench, images, hack, internal/testenv (commands, test tools)
#   6  internal/daemon, internal/offline             (the roots)
#   5  internal/core, internal/servers, internal/cluster
#   4  internal/config
#   3  internal/machine
#   2  eviction, imagegc, containergc, devicemanager, prober, preemption
#   1  internal/base, qos
#   0  nodeapi
#
# It exits 1, naming each offending package and import, when a folder imports
# one of a higher layer, when folders of one layer import each other in a
# cycle, or when a package is in no folder of the table. Without
# IMPORTS it first checks itself on testdata/up.txt, which must fail naming
# exactly the edges testdata/up.want lists. make layers runs it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
module=github.com/nodekeeper/nodekeeper

# check FILE: prints the offences, returns 1 when there are any.
check() {
	awk -v M="$module" '
	BEGIN {
		split("cmd test bench images hack internal/testenv", l7); for (i in l7) rank[l7[i]] = 7
		split("internal/daemon internal/offline", l6); for (i in l6) rank[l6[i]] = 6
		split("internal/core internal/servers internal/cluster", l5); for (i in l5) rank[l5[i]] = 5
		rank["internal/config"] = 4
		rank["internal/machine"] = 3
		split("eviction imagegc containergc devicemanager prober preemption", l2); for (i in l2) rank[l2[i]] = 2
		split("internal/base qos", l1); for (i in l1) rank[l1[i]] = 1
		rank["nodeapi"] = 0
	}
	# folder: the folder of a package of the module, "" for one outside it.
	function folder(p,   r, a) {
		if (p != M && index(p, M "/") != 1) return ""
		r = substr(p, length(M) + 2)
		split(r, a, "/")
		if (a[1] == "internal") return a[1] "/" a[2]
		return a[1]
	}
	{
		f = folder($1)
		if (!(f in rank)) { printf "%s: in no layer (hack/layers/check.sh lists the folders)\n", $1; bad = 1; next }
		for (i = 2; i <= NF; i++) {
			g = folder($i)
			if (g == "" || g == f) continue
			if (!(g in rank)) { printf "%s imports %s: in no layer\n", $1, $i; bad = 1; continue }
			if (rank[g] > rank[f]) { printf "%s imports %s: %s (layer %d) is above %s (layer %d)\n", $1, $i, g, rank[g], f, rank[f]; bad = 1 }
			if (!((f, g) in edge)) { edge[f, g] = $1 " imports " $i; folders[f]; folders[g] }
		}
	}
	END {
		# reach: the transitive closure of the folder graph (a few dozen folders).
		for (e in edge) reach[e] = 1
		for (k in folders) for (a in folders) if ((a, k) in reach) for (b in folders) if ((k, b) in reach) reach[a, b] = 1
		for (e in edge) {
			split(e, ab, SUBSEP)
			# a cycle across layers has an edge going up, named above
			if (rank[ab[1]] == rank[ab[2]] && (ab[2], ab[1]) in reach) { printf "%s: %s and %s import each other (a cycle)\n", edge[e], ab[1], ab[2]; bad = 1 }
		}
		exit bad
	}' "$1"
}

if [ $# -eq 0 ]; then
	got="$(check "$here/testdata/up.txt" | sort)" && { echo "layers: testdata/up.txt passed; the check is broken" >&2; exit 1; }
	if [ "$got" != "$(sort "$here/testdata/up.want")" ]; then
		echo "layers: testdata/up.txt, want:" >&2; sort "$here/testdata/up.want" >&2
		echo "got:" >&2; echo "$got" >&2
		exit 1
	fi
	imports="$(mktemp)"
	trap 'rm -f "$imports"' EXIT
	(cd "$here/../.." && go list -f '{{.ImportPath}} {{join .Imports " "}}' ./...) >"$imports"
	check "$imports"
	exit
fi
check "$1"
