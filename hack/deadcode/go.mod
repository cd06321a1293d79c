// Module deadcode pins the dead-code checker that make deadcode runs
// (golang.org/x/tools/cmd/deadcode). It is a module of its own so that the
// checker's dependencies never enter nodekeeper's go.mod, nor hack/tools'
// build of the device plugins.
module github.com/nodekeeper/nodekeeper/hack/deadcode

go 1.26.0

tool golang.org/x/tools/cmd/deadcode

require (
	golang.org/x/mod v0.42.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/telemetry v0.0.0-20261009151841-97e8ea77aa2a // indirect
	golang.org/x/tools v0.52.0 // indirect
)
