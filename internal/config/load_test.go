package config

import (
	"context"

	inputs "github.com/nodekeeper/nodekeeper/internal/base/decode"
)

// load reads the configuration file at path as LoadSources reads its file
// (a failure to read it is returned wrapped, an *os.PathError, so
// errors.Is(err, fs.ErrNotExist) works), then parses it.
func load(path string) (*Config, error) {
	data, err := readConfig(context.Background(), path, inputs.DefaultMaxConfigSize)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}
