package main

import "testing"

// TestGreeting is run by toolbuild's TestBuildTests through a test binary.
func TestGreeting(t *testing.T) {
	t.Log("greeting:", greeting)
}
