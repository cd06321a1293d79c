package doccmd

import (
	"regexp"
	"strings"

	"github.com/google/go-cmp/cmp"
)

// masks are what differs between a document's output and a run's for no
// fault of either, in the order they apply: each match becomes the mask's
// name, so a document may also write the name itself (`<AGE>`).
var masks = []struct {
	name string
	re   *regexp.Regexp
}{
	{"<TIME>", regexp.MustCompile(`\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:?\d\d)?`)},
	{"<TIME>", regexp.MustCompile(`[A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d [+-]\d{4}`)},
	{"<UID>", regexp.MustCompile(`\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`)},
	{"<ID>", regexp.MustCompile(`\b(sha256:)?[0-9a-f]{12,64}\b`)},
	{"<IP>", regexp.MustCompile(`\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b`)},
	{"<AGE>", regexp.MustCompile(`\b(\d+(\.\d+)?(ns|µs|us|ms|s|m|h|d|y))+\b`)},
}

// Mask replaces in line what Masks names (times, UIDs, container and image
// IDs, IPv4 addresses, ages and durations) by the mask's name and turns every
// run of blanks into one space, as columns widen and narrow with the values
// they hold.
func Mask(line string) string {
	for _, m := range masks {
		line = m.re.ReplaceAllString(line, m.name)
	}
	return strings.Join(strings.Fields(line), " ")
}

// Masks is the masks' names, for messages.
func Masks() string { return "<TIME> <UID> <ID> <IP> <AGE>; blanks collapsed" }

// DiffOutput compares the output a document shows with the one a run
// printed, both masked, and returns their difference (-doc +printed), or ""
// when they agree.
func DiffOutput(doc []string, printed string) string {
	var want, got []string
	for _, l := range doc {
		want = append(want, Mask(l))
	}
	for _, l := range strings.Split(strings.TrimRight(printed, "\n"), "\n") {
		got = append(got, Mask(l))
	}
	for len(want) > 0 && want[len(want)-1] == "" {
		want = want[:len(want)-1]
	}
	return cmp.Diff(want, got)
}
