package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/nodekeeper/nodekeeper/internal/base/decode"
	v1 "k8s.io/api/core/v1"
)

// activeOnNode keeps the pods the kubelet of node would count as active: not
// finished (phase Succeeded or Failed) and bound to node, or to no node (a
// hand-written pod). With node "", pods of every node are kept. What it
// leaves out is said in one warning line on stderr, so that a snapshot of a
// whole cluster (kubectl get pods -A) does not silently rank or preempt pods
// of other nodes.
func activeOnNode(pods []*v1.Pod, node string, stderr io.Writer) []*v1.Pod {
	var finished, elsewhere int
	kept := slices.DeleteFunc(slices.Clone(pods), func(p *v1.Pod) bool {
		switch {
		case p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed:
			finished++
		case node != "" && p.Spec.NodeName != "" && p.Spec.NodeName != node:
			elsewhere++
		default:
			return false
		}
		return true
	})
	var left []string
	if finished > 0 {
		left = append(left, fmt.Sprintf("%d finished (Succeeded or Failed)", finished))
	}
	if elsewhere > 0 {
		left = append(left, fmt.Sprintf("%d on other nodes than %s", elsewhere, node))
	}
	if len(left) > 0 {
		fmt.Fprintf(stderr, "warning: left out %s of %d pods\n", decode.Escape(strings.Join(left, " and ")), len(pods))
	}
	return kept
}

// podNodes returns the distinct spec.nodeName values of pods, sorted, without "".
func podNodes(pods []*v1.Pod) []string {
	var nodes []string
	for _, p := range pods {
		if n := p.Spec.NodeName; n != "" && !slices.Contains(nodes, n) {
			nodes = append(nodes, n)
		}
	}
	slices.Sort(nodes)
	return nodes
}
