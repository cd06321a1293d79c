package nodeapi

import "strings"

// ExpandVars replaces each $(NAME) in s with the value vars gives NAME, as
// the kubelet does for a container's command, args and env values (and exec
// probes' commands): a reference to an undefined name stays as
// written, "$$" is a literal "$" (so "$$(NAME)" gives "$(NAME)"), and any
// other "$" is kept.
func ExpandVars(s string, vars func(string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars(name); ok && name != "" {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
