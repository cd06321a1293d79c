package volumes

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient"
	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient/clientgo"
)

// TestCachedAPI: reads of one object within the TTL reach the API once; after
// the TTL, again; a missing object is kept as missing; other errors are not
// kept; tokens are never cached.
func TestCachedAPI(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testCachedAPI)
}

func testCachedAPI(t *testing.T) {
	fc := fake.NewClientset(&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm"}, Data: map[string]string{"k": "v1"}})
	gets := map[string]int{}
	fail := false
	fc.PrependReactor("get", "*", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		gets[a.(k8stesting.GetAction).GetName()]++
		if fail {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	c := NewCachedAPI(kubeclient.PodObjects{Client: clientgo.Wrap(fc)}, 30*time.Second)
	ctx := context.Background()
	for range 3 {
		if cm, err := c.GetConfigMap(ctx, "ns", "cm"); err != nil || cm.Data["k"] != "v1" {
			t.Fatalf("GetConfigMap = %v, %v", cm, err)
		}
	}
	if _, err := c.GetConfigMap(ctx, "ns", "gone"); !apierrors.IsNotFound(err) {
		t.Fatalf("missing ConfigMap: %v", err)
	}
	if _, err := c.GetConfigMap(ctx, "ns", "gone"); !apierrors.IsNotFound(err) {
		t.Fatalf("missing ConfigMap again: %v", err)
	}
	if gets["cm"] != 1 || gets["gone"] != 1 {
		t.Errorf("API reads within the TTL: %v, want one each", gets)
	}
	fc.Tracker().Update(v1.SchemeGroupVersion.WithResource("configmaps"),
		&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm"}, Data: map[string]string{"k": "v2"}}, "ns")
	time.Sleep(29 * time.Second)
	if cm, _ := c.GetConfigMap(ctx, "ns", "cm"); cm.Data["k"] != "v1" {
		t.Errorf("within the TTL: %q, want the cached v1", cm.Data["k"])
	}
	time.Sleep(time.Second)
	if cm, _ := c.GetConfigMap(ctx, "ns", "cm"); cm.Data["k"] != "v2" {
		t.Errorf("after the TTL: %q, want v2", cm.Data["k"])
	}
	fail = true
	time.Sleep(time.Minute)
	if _, err := c.GetConfigMap(ctx, "ns", "cm"); err == nil || apierrors.IsNotFound(err) {
		t.Fatalf("API down: %v, want its error", err)
	}
	fail = false
	if cm, err := c.GetConfigMap(ctx, "ns", "cm"); err != nil || cm.Data["k"] != "v2" {
		t.Errorf("after the failure (not kept): %v, %v", cm, err)
	}
}

// TestCachedAPIServicesFresh: a Service created right after a list is in the
// next list (a pod's service environment sees a Service made just before it).
func TestCachedAPIServicesFresh(t *testing.T) {
	t.Parallel()
	fc := fake.NewClientset()
	c := NewCachedAPI(kubeclient.PodObjects{Client: clientgo.Wrap(fc)}, time.Hour)
	ctx := context.Background()
	if svcs, err := c.ListServices(ctx, "ns"); err != nil || len(svcs) != 0 {
		t.Fatalf("ListServices = %v, %v; want none", svcs, err)
	}
	if _, err := fc.CoreV1().Services("ns").Create(ctx, &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "fooservice"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if svcs, err := c.ListServices(ctx, "ns"); err != nil || len(svcs) != 1 {
		t.Errorf("ListServices after a create = %v, %v; want the new Service", svcs, err)
	}
	if _, err := c.GetService(ctx, "ns", "fooservice"); err != nil {
		t.Errorf("GetService after a create: %v", err)
	}
}

// TestCachedAPIConcurrentMisses: many readers missing the same object at once
// (every pod's resync) share one API read.
func TestCachedAPIConcurrentMisses(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var reads atomic.Int32
		c := NewCachedAPI(blockingAPI{release: release, reads: &reads}, time.Minute)
		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() {
				if cm, err := c.GetConfigMap(context.Background(), "ns", "cm"); err != nil || cm.Name != "cm" {
					t.Errorf("GetConfigMap = %v, %v", cm, err)
				}
			})
		}
		synctest.Wait() // every reader is blocked: on the API or on the shared read
		close(release)
		wg.Wait()
		if n := reads.Load(); n != 1 {
			t.Errorf("%d API reads for 50 concurrent misses, want 1", n)
		}
	})
}

// blockingAPI answers GetConfigMap once release is closed, counting reads.
type blockingAPI struct {
	API
	release chan struct{}
	reads   *atomic.Int32
}

func (b blockingAPI) GetConfigMap(_ context.Context, ns, name string) (*v1.ConfigMap, error) {
	b.reads.Add(1)
	<-b.release
	return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, nil
}
