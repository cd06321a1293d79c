package main

import (
	"regexp"
	"strings"
)

// regexpLine reports whether any line of s matches the pattern.
func regexpLine(s, pattern string) bool {
	re := regexp.MustCompile(pattern)
	for _, line := range strings.Split(s, "\n") {
		if re.MatchString(line) {
			return true
		}
	}
	return false
}
