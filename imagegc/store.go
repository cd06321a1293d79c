package imagegc

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/nodekeeper/nodekeeper/internal/base/checkpoint"
)

// RecordStore keeps the image records across restarts, so an image's first
// detection and last use survive them. Load and Save are called with the
// Manager's pass held, never at the same time.
type RecordStore interface {
	// Load returns the saved records; nil and no error when none were saved.
	Load() (map[string]*Record, error)
	// Save replaces the saved records with records.
	Save(records map[string]*Record) error
}

// recordFileVersion is the version of FileStore's format.
const recordFileVersion = 1

// recordFile is FileStore's format.
type recordFile struct {
	Version int                `json:"version"`
	Records map[string]*Record `json:"records"`
}

// ErrCorruptRecords is wrapped by FileStore.Load's error for a file it cannot
// read; the file has then been moved aside.
var ErrCorruptRecords = errors.New("corrupt image records")

// FileStore is a RecordStore in one JSON file, written atomically.
type FileStore struct {
	// Path is the file.
	Path string
	// Now stamps a corrupt file's moved-aside name; nil is time.Now.
	Now func() time.Time
}

// Load reads the file: no file is no records; a file that does not decode, or
// has another version, is moved aside (checkpoint.MoveAside) and reported as
// an error wrapping ErrCorruptRecords that names the new name.
func (s FileStore) Load() (map[string]*Record, error) {
	data, err := os.ReadFile(s.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var f recordFile
	err = json.Unmarshal(data, &f)
	if err == nil && f.Version != recordFileVersion {
		err = fmt.Errorf("field version: %d, want %d", f.Version, recordFileVersion)
	}
	if err == nil {
		for id, r := range f.Records {
			if id == "" || r == nil {
				err = fmt.Errorf("field records: empty entry %q", id)
				break
			}
		}
	}
	if err != nil {
		now := time.Now
		if s.Now != nil {
			now = s.Now
		}
		aside, mvErr := checkpoint.MoveAside(s.Path, now())
		if mvErr != nil {
			return nil, fmt.Errorf("%s: %w: %v (%v)", s.Path, ErrCorruptRecords, err, mvErr)
		}
		return nil, fmt.Errorf("%s: %w: %v; moved aside to %s", s.Path, ErrCorruptRecords, err, aside)
	}
	if f.Records == nil {
		f.Records = map[string]*Record{}
	}
	return f.Records, nil
}

// Save writes records to the file atomically.
func (s FileStore) Save(records map[string]*Record) error {
	data, err := json.Marshal(recordFile{Version: recordFileVersion, Records: records})
	if err != nil {
		return err
	}
	return checkpoint.WriteFile(s.Path, data, 0o600)
}
