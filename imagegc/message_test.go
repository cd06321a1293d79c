package imagegc

import "testing"

func TestEventSize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   int64
		want string
	}{
		{"zero", 0, "0 B"},
		{"below a KiB", 1023, "1023 B"},
		{"one KiB", 1024, "1.0 KiB"},
		{"rounds to one decimal", 1536 + 51, "1.5 KiB"},
		{"just below a MiB stays in KiB", 1<<20 - 1, "1024.0 KiB"},
		{"MiB", 80 << 20, "80.0 MiB"},
		{"GiB", 20 << 30, "20.0 GiB"},
		{"fraction of a GiB", 28346740736, "26.4 GiB"},
		{"TiB", 3 << 40, "3.0 TiB"},
		{"TiB is the largest unit", 2 << 50, "2048.0 TiB"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := eventSize(tc.in); got != tc.want {
				t.Errorf("eventSize(%d) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestFreeDiskSpaceFailedMessage(t *testing.T) {
	t.Parallel()
	got := FreeDiskSpaceFailedMessage(88, 28346740736, 385820817)
	want := "Insufficient free disk space on the node's image filesystem (88% of 26.4 GiB used). " +
		"Failed to free sufficient space by deleting unused images (freed 385820817 bytes). " +
		"Investigate disk usage, as it could be used by active images, logs, volumes, or other data."
	if got != want {
		t.Errorf("message:\n got %q\nwant %q", got, want)
	}
}
