package simulate

import (
	"context"
	"log/slog"

	"github.com/nodekeeper/nodekeeper/internal/base/decode"
)

// The tests' ways in: the command reads the file itself and streams
// (Parse, Stream).

// Load reads (up to decode.DefaultMaxInputSize, honouring ctx) and validates a
// scenario file (YAML or JSON).
func Load(ctx context.Context, path string) (*Scenario, error) {
	data, err := decode.ReadFile(ctx, path, decode.DefaultMaxInputSize)
	if err != nil {
		return nil, decode.Bad(err)
	}
	return Parse(path, data)
}

// Run plays the scenario and returns its events in time order, with those
// computed before an error.
func Run(ctx context.Context, sc *Scenario, logger *slog.Logger) ([]Event, error) {
	return newSim(sc, logger).run(ctx)
}

// run plays the scenario once and collects its events.
func (s *sim) run(ctx context.Context) ([]Event, error) {
	var events []Event
	err := s.stream(ctx, func(batch []Event) error {
		events = append(events, batch...)
		return nil
	})
	return events, err
}
