package podruntime

import "testing"

func TestExpand(t *testing.T) {
	t.Parallel()
	vars := mapVars(map[string]string{"A": "x", "B": "y z", "EMPTY": ""})
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{"$(A)", "x"},
		{"pre-$(A)-$(B)-post", "pre-x-y z-post"},
		{"$(UNDEFINED)", "$(UNDEFINED)"},
		{"$$(A)", "$(A)"},
		{"$$$(A)", "$x"},
		{"$$", "$"},
		{"$A", "$A"},
		{"cost $", "cost $"},
		{"$(A", "$(A"},
		{"$()", "$()"},
		{"$(EMPTY)!", "!"},
		{"$(A)$(A)", "xx"},
	}
	for _, tc := range tests {
		if got := expand(tc.in, vars); got != tc.want {
			t.Errorf("expand(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
