package nodeapi

import "testing"

func TestExpandVars(t *testing.T) {
	t.Parallel()
	m := map[string]string{"A": "x", "B": "y z", "EMPTY": ""}
	vars := func(k string) (string, bool) { v, ok := m[k]; return v, ok }
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
		if got := ExpandVars(tc.in, vars); got != tc.want {
			t.Errorf("ExpandVars(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
