package main

import (
	"testing"
	"time"
)

func TestRender(t *testing.T) {
	at := time.Date(2026, 11, 24, 15, 4, 5, 123456789, time.UTC)
	for _, tc := range []struct{ format, want string }{
		{"%3t", "15:04:05.123"},
		{"%t", "15:04:05"},
		{"%6t", "15:04:05.123456"},
		{"at %1t, 100%%", "at 15:04:05.1, 100%"},
	} {
		got, err := render(tc.format, at)
		if err != nil || got != tc.want {
			t.Errorf("render(%q) = %q, %v; want %q", tc.format, got, err, tc.want)
		}
	}
	for _, bad := range []string{"%c", "%", "%3"} {
		if _, err := render(bad, at); err == nil {
			t.Errorf("render(%q): no error", bad)
		}
	}
}

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		delay  time.Duration
		format string
	}{
		{[]string{"-d0", "%3t"}, 0, "%3t"},
		{[]string{"-d", "250", "%t"}, 250 * time.Millisecond, "%t"},
		{[]string{"%t"}, time.Second, "%t"},
	} {
		d, f, err := parseArgs(tc.args)
		if err != nil || d != tc.delay || f != tc.format {
			t.Errorf("parseArgs(%q) = %v, %q, %v; want %v, %q", tc.args, d, f, err, tc.delay, tc.format)
		}
	}
	for _, bad := range [][]string{{}, {"-dx", "%t"}, {"-d0"}, {"%t", "%t"}} {
		if _, _, err := parseArgs(bad); err == nil {
			t.Errorf("parseArgs(%q): no error", bad)
		}
	}
}
