package preemption

import (
	"errors"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/qos"
)

// ErrNoVictims is the class of the error SelectVictims returns when even killing
// every pod the preemptor may preempt would not free the requirement.
var ErrNoVictims = errors.New("no set of running pods found to reclaim resources")

// SelectVictims returns the pods to kill so that reqs is freed for preemptor, or an
// error wrapping ErrNoVictims that names what could not be freed. It is a pure
// function: it reads the pods and modifies nothing.
//
// The result is the kubelet's:
//   - candidates are the pods p with Preemptable(preemptor, p), split by QoS class;
//   - if killing all candidates would not free reqs, there is no answer;
//   - the Guaranteed victims are the fewest needed assuming every Burstable and
//     BestEffort candidate is killed; then the Burstable victims, assuming every
//     BestEffort candidate and the chosen Guaranteed victims are killed; then the
//     BestEffort victims, assuming the chosen Guaranteed and Burstable victims are;
//   - within a class victims are chosen greedily (see below);
//   - the result lists the BestEffort, then Burstable, then Guaranteed victims.
//
// A greedy step picks the pod with the smallest distance to the remaining
// requirement: the sum, over the requirements not yet met and in their order, of
// ((remaining - request) / remaining)², where a term is 0 when the pod's request
// covers the remaining amount. A pod that requests none of a resource thus adds 1.
// Ties go to the pod with the smaller memory request, then the smaller cpu request;
// when those tie too, to the pod the kubelet's scan would see last (the kubelet
// removes a chosen pod by moving the last candidate into its slot, and so do we).
// Requirements with Quantity <= 0 are already met and ignored.
//
// Requests are the ones Request returns. Unlike the kubelet, SelectVictims computes
// each pod's requests once, up front, so a greedy step scans integers instead of
// recomputing every candidate's requests from its spec.
func SelectVictims(preemptor *v1.Pod, pods []*v1.Pod, reqs Requirements) ([]*v1.Pod, error) {
	s := newSelection(reqs)
	var byClass [3][]int32 // candidate indices per QoS class, in input order
	for _, p := range pods {
		if p == nil || !Preemptable(preemptor, p) {
			continue
		}
		var c int
		switch qos.Class(p) {
		case v1.PodQOSBestEffort:
			c = 0
		case v1.PodQOSBurstable:
			c = 1
		case v1.PodQOSGuaranteed:
			c = 2
		default:
			continue
		}
		byClass[c] = append(byClass[c], s.add(p))
	}
	bestEffort, burstable, guaranteed := byClass[0], byClass[1], byClass[2]

	all := s.initial()
	if rem := s.subtract(all, bestEffort, burstable, guaranteed); len(rem) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrNoVictims, s.requirements(rem))
	}
	guaranteedVictims, err := s.byDistance(guaranteed, s.subtract(all, bestEffort, burstable))
	if err != nil {
		return nil, err
	}
	burstableVictims, err := s.byDistance(burstable, s.subtract(all, bestEffort, guaranteedVictims))
	if err != nil {
		return nil, err
	}
	bestEffortVictims, err := s.byDistance(bestEffort, s.subtract(all, burstableVictims, guaranteedVictims))
	if err != nil {
		return nil, err
	}
	victims := make([]*v1.Pod, 0, len(bestEffortVictims)+len(burstableVictims)+len(guaranteedVictims))
	for _, group := range [][]int32{bestEffortVictims, burstableVictims, guaranteedVictims} {
		for _, i := range group {
			victims = append(victims, s.pods[i])
		}
	}
	return victims, nil
}

// selection holds the candidates of one SelectVictims call with their requests
// precomputed. It is owned by that call.
type selection struct {
	reqs Requirements
	pods []*v1.Pod
	// vec holds, for candidate i, its request for reqs[j] at vec[i*len(reqs)+j].
	vec []int64
	// mem and cpu are the tie-break requests of each candidate.
	mem, cpu []int64
	// names are the resources read from each candidate (reqs, then memory and
	// cpu) and buf receives them.
	names []v1.ResourceName
	buf   []int64
}

// need is a requirement not yet met: the index in reqs and the amount still to free.
type need struct {
	req int
	q   int64
}

func newSelection(reqs Requirements) *selection {
	return &selection{reqs: reqs}
}

// add records pod as a candidate and returns its index.
func (s *selection) add(p *v1.Pod) int32 {
	if s.names == nil {
		for _, req := range s.reqs {
			s.names = append(s.names, req.Resource)
		}
		s.names = append(s.names, v1.ResourceMemory, v1.ResourceCPU)
		s.buf = make([]int64, len(s.names))
	}
	requestsOf(p, s.names, s.buf)
	n := len(s.reqs)
	s.vec = append(s.vec, s.buf[:n]...)
	s.mem = append(s.mem, s.buf[n])
	s.cpu = append(s.cpu, s.buf[n+1])
	s.pods = append(s.pods, p)
	return int32(len(s.pods) - 1)
}

func (s *selection) request(i int32, req int) int64 {
	return s.vec[int(i)*len(s.reqs)+req]
}

// initial returns the requirements with a positive quantity, in order.
func (s *selection) initial() []need {
	var ns []need
	for j, r := range s.reqs {
		if r.Quantity > 0 {
			ns = append(ns, need{req: j, q: r.Quantity})
		}
	}
	return ns
}

// subtract returns what remains of ns once the given candidates are killed; met
// requirements are dropped and the order is kept. Requests are never negative, so a
// requirement is met once its remainder reaches zero and the sum cannot overflow.
func (s *selection) subtract(ns []need, groups ...[]int32) []need {
	var out []need
	for _, n := range ns {
		q := n.q
	groups:
		for _, g := range groups {
			for _, i := range g {
				q -= s.request(i, n.req)
				if q <= 0 {
					break groups
				}
			}
		}
		if q > 0 {
			out = append(out, need{req: n.req, q: q})
		}
	}
	return out
}

func (s *selection) requirements(ns []need) Requirements {
	out := make(Requirements, len(ns))
	for k, n := range ns {
		out[k] = Requirement{Resource: s.reqs[n.req].Resource, Quantity: n.q}
	}
	return out
}

// byDistance picks victims among cands until ns is met, with the kubelet's greedy
// rule (see SelectVictims), and returns candidate indices in the order chosen. It
// follows the rule directly: every step scans the candidates left, in the order
// of the kubelet's candidate slice, keeps the first one that no later one beats or
// ties (so ties go to the pod scanned last), and removes it by moving the last
// candidate into its slot. cands is not modified.
func (s *selection) byDistance(cands []int32, ns []need) ([]int32, error) {
	if len(ns) == 0 {
		return nil, nil
	}
	left := slices.Clone(cands)
	var victims []int32
	for len(ns) > 0 {
		if len(left) == 0 {
			return nil, fmt.Errorf("%w: %s", ErrNoVictims, s.requirements(ns))
		}
		best := 0
		bestDist := s.distance(left[0], ns)
		for k := 1; k < len(left); k++ {
			i, b := left[k], left[best]
			d := s.distance(i, ns)
			if !less(bestDist, s.mem[b], s.cpu[b], d, s.mem[i], s.cpu[i]) {
				best, bestDist = k, d
			}
		}
		victim := left[best]
		victims = append(victims, victim)
		ns = s.subtract(ns, []int32{victim})
		last := len(left) - 1
		left[best] = left[last]
		left = left[:last]
	}
	return victims, nil
}

// distance is the kubelet's distance of candidate i from the unmet requirements,
// summed in requirement order. x*x equals math.Pow(x, 2) for the x in (0, 1] that
// occur here.
func (s *selection) distance(i int32, ns []need) float64 {
	var d float64
	for _, n := range ns {
		if rem := n.q - s.request(i, n.req); rem > 0 {
			x := float64(rem) / float64(n.q)
			d += x * x
		}
	}
	return d
}

// less orders candidates by distance, then memory request, then cpu request.
func less(d1 float64, mem1, cpu1 int64, d2 float64, mem2, cpu2 int64) bool {
	if d1 != d2 {
		return d1 < d2
	}
	if mem1 != mem2 {
		return mem1 < mem2
	}
	return cpu1 < cpu2
}
