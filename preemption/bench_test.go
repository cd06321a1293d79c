package preemption

import (
	"fmt"
	"math/rand/v2"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// benchNode returns n running pods: 20% BestEffort, 50% Burstable, 30% Guaranteed.
// With distinct false, requests come from a few common sizes (as replicas of
// deployments do: about 60 shapes); with distinct true every pod's requests differ.
func benchNode(n int, distinct bool) []*v1.Pod {
	rng := rand.New(rand.NewPCG(1, uint64(n)))
	cpus := []int64{100, 250, 500, 1000, 2000}
	mems := []int64{128 << 20, 256 << 20, 512 << 20, 1 << 30, 2 << 30}
	disks := []int64{0, 1 << 30}
	pods := make([]*v1.Pod, n)
	for i := range pods {
		cpu, mem, disk := cpus[rng.IntN(len(cpus))], mems[rng.IntN(len(mems))], disks[rng.IntN(len(disks))]
		if distinct {
			cpu, mem = cpu+int64(i), mem+int64(i)<<10
		}
		reqs := v1.ResourceList{
			v1.ResourceCPU:    *resource.NewMilliQuantity(cpu, resource.DecimalSI),
			v1.ResourceMemory: *resource.NewQuantity(mem, resource.BinarySI),
		}
		if disk > 0 {
			reqs[v1.ResourceEphemeralStorage] = *resource.NewQuantity(disk, resource.BinarySI)
		}
		c := v1.Container{Name: "app"}
		switch x := rng.IntN(10); {
		case x < 2:
			c.Resources.Requests = v1.ResourceList{}
			if disk > 0 {
				c.Resources.Requests[v1.ResourceEphemeralStorage] = reqs[v1.ResourceEphemeralStorage]
			}
		case x < 7:
			c.Resources.Requests = reqs
		default:
			c.Resources.Requests = reqs
			c.Resources.Limits = reqs.DeepCopy()
		}
		pods[i] = &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d", i), Namespace: "default", UID: types.UID(fmt.Sprint(i))},
			Spec:       v1.PodSpec{Containers: []v1.Container{c}},
		}
	}
	return pods
}

// benchRequirements asks for frac of the node's total requests of the first k of
// cpu, memory, ephemeral-storage and pods.
func benchRequirements(pods []*v1.Pod, k int, frac float64) Requirements {
	names := []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage, v1.ResourcePods}
	var reqs Requirements
	for _, name := range names[:k] {
		var total int64
		for _, p := range pods {
			total += Request(p, name)
		}
		reqs = append(reqs, Requirement{Resource: name, Quantity: max(1, int64(float64(total)*frac))})
	}
	return reqs
}

// BenchmarkSelectVictims measures SelectVictims on 110 (the kubelet's default
// maxPods), 1,000 and 10,000 running pods
// for 1-4 insufficient resources, freeing 1% of the node's requests (a few victims)
// or 10% (many victims: the quadratic case), with common or all-distinct request
// shapes. BenchmarkSelectVictimsKubelet runs the kubelet's algorithm on the same
// inputs for comparison.
func BenchmarkSelectVictims(b *testing.B) {
	benchSelect(b, SelectVictims, false)
}

// BenchmarkSelectVictimsKubelet is the baseline: the kubelet's algorithm, as in
// referenceSelect. Its 10,000-pod, 10% cases take 8-30 s per operation; -short
// skips them.
func BenchmarkSelectVictimsKubelet(b *testing.B) {
	benchSelect(b, referenceSelect, true)
}

func benchSelect(b *testing.B, sel func(*v1.Pod, []*v1.Pod, Requirements) ([]*v1.Pod, error), baseline bool) {
	critical := newPod("critical", static())
	for _, n := range []int{110, 1000, 10000} {
		for _, shapes := range []string{"common", "distinct"} {
			pods := benchNode(n, shapes == "distinct")
			for _, frac := range []float64{0.01, 0.10} {
				for k := 1; k <= 4; k++ {
					reqs := benchRequirements(pods, k, frac)
					name := fmt.Sprintf("pods=%d/shapes=%s/free=%d%%/resources=%d", n, shapes, int(frac*100), k)
					b.Run(name, func(b *testing.B) {
						if baseline && n == 10000 && frac > 0.05 && testing.Short() {
							b.Skip("kubelet baseline takes minutes here; run without -short")
						}
						var victims int
						for b.Loop() {
							v, err := sel(critical, pods, reqs)
							if err != nil {
								b.Fatal(err)
							}
							victims = len(v)
						}
						b.ReportMetric(float64(victims), "victims")
					})
				}
			}
		}
	}
}
