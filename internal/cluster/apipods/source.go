package apipods

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/nodeapi"
	"github.com/nodekeeper/nodekeeper/qos"
)

// runSource hands the agent the node's pods after every change the informer
// saw, until ctx ends. Changes during a SetPods coalesce into the next one.
func (s *Syncer) runSource(ctx context.Context) {
	for {
		cached, err := s.lister.List(everything)
		if err != nil { // the indexer's List does not fail
			s.log.Error("Listing cached pods failed", "err", err)
		}
		pods := s.agentPods(cached)
		if err := s.agent.SetPods(ctx, Source, pods); err != nil && ctx.Err() == nil {
			s.log.Error("Handing pods to the agent failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-s.podsC:
		}
	}
}

// agentPods is the set the agent runs from the cached pods: every valid
// pod that is not a mirror pod, copied with the config.source annotation set
// and without the fields that change with every status write
// (resourceVersion, managed fields), sorted by namespace and name. Malformed
// pods are left out, each logged once per resourceVersion.
func (s *Syncer) agentPods(cached []*v1.Pod) []*v1.Pod {
	out := make([]*v1.Pod, 0, len(cached))
	uids := map[string]bool{}
	for _, p := range cached {
		if qos.IsMirror(p) {
			continue
		}
		err := checkPod(p, s.cfg.NodeName)
		if err == nil && uids[string(p.UID)] {
			err = fmt.Errorf("metadata.uid %q: repeated", p.UID)
		}
		if err != nil {
			s.skip(p, err)
			continue
		}
		uids[string(p.UID)] = true
		c := p.DeepCopy()
		c.ResourceVersion, c.ManagedFields = "", nil
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations[qos.ConfigSourceAnnotation] = Source
		out = append(out, c)
	}
	s.forgetSkipped(cached)
	slices.SortFunc(out, func(a, b *v1.Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// skip logs a malformed pod once per resourceVersion.
func (s *Syncer) skip(p *v1.Pod, err error) {
	key := skipKey(p)
	s.mu.Lock()
	logged := s.skipped[key] == p.ResourceVersion
	s.skipped[key] = p.ResourceVersion
	s.mu.Unlock()
	if !logged {
		s.log.Error("Skipping malformed pod from the API server", "pod", nodeapi.PodName(p), "podUID", p.UID, "err", err)
	}
}

// forgetSkipped drops the malformed pods the cache no longer holds.
func (s *Syncer) forgetSkipped(cached []*v1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.skipped) == 0 {
		return
	}
	live := make(map[string]bool, len(cached))
	for _, p := range cached {
		live[skipKey(p)] = true
	}
	for k := range s.skipped {
		if !live[k] {
			delete(s.skipped, k)
		}
	}
}

func skipKey(p *v1.Pod) string { return p.Namespace + "/" + p.Name + "/" + string(p.UID) }

// checkPod returns an error naming the field and value when p is not a pod
// the node can run: no name, namespace or UID, bound to another node, no
// containers, or a container without a name or image, or with a repeated
// name. The API server validates pods; this guards the agent against what
// slipped through (or a broken server).
func checkPod(p *v1.Pod, nodeName string) error {
	switch {
	case p.Name == "":
		return fmt.Errorf("metadata.name: empty")
	case p.Namespace == "":
		return fmt.Errorf("metadata.namespace: empty")
	case p.UID == "":
		return fmt.Errorf("metadata.uid: empty")
	case p.Spec.NodeName != nodeName:
		return fmt.Errorf("spec.nodeName %q: not this node (%q)", p.Spec.NodeName, nodeName)
	case len(p.Spec.Containers) == 0:
		return fmt.Errorf("spec.containers: empty")
	}
	names := map[string]bool{}
	check := func(path string, cs []v1.Container) error {
		for i, c := range cs {
			switch {
			case c.Name == "":
				return fmt.Errorf("%s[%d].name: empty", path, i)
			case names[c.Name]:
				return fmt.Errorf("%s[%d].name %q: repeated", path, i, c.Name)
			case c.Image == "":
				return fmt.Errorf("%s[%d].image: empty", path, i)
			}
			names[c.Name] = true
		}
		return nil
	}
	if err := check("spec.initContainers", p.Spec.InitContainers); err != nil {
		return err
	}
	return check("spec.containers", p.Spec.Containers)
}
