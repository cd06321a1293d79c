package simulate

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// The managers' log lines carry the virtual time at which they were logged: the
// eviction at 1m30s of the memory-pressure example is logged at 00:01:30 of the
// scenario's day, not at the host's time.
func TestLogRecordsCarryVirtualTime(t *testing.T) {
	t.Parallel()
	sc, err := Load(t.Context(), "../../../examples/scenarios/memory-pressure.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil)).With("run", "t")
	if _, err := Run(t.Context(), sc, logger); err != nil {
		t.Fatal(err)
	}
	var evicting string
	for _, line := range strings.Split(buf.String(), "\n") {
		if line == "" {
			continue
		}
		if !strings.HasPrefix(line, "time=2026-01-01T00:") {
			t.Errorf("log line not stamped with the virtual time: %s", line)
		}
		if strings.Contains(line, "evicting pod") {
			evicting = line
		}
	}
	if !strings.HasPrefix(evicting, "time=2026-01-01T00:01:30.000Z ") {
		t.Errorf("eviction logged as %q, want it at the virtual time 00:01:30", evicting)
	}
}
