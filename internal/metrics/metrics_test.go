package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRegisterSharesAnIdenticalCollector(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	newVec := func() *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"l"})
	}
	a, err := Register(reg, "test", newVec())
	if err != nil {
		t.Fatal(err)
	}
	b, err := Register(reg, "test", newVec())
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Error("second registration did not return the first collector")
	}
	other := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "different help"}, []string{"l"})
	if _, err := Register(reg, "test", other); err == nil {
		t.Error("a conflicting collector registered")
	}
	if c, err := Register(nil, "test", newVec()); err != nil || c == nil {
		t.Errorf("nil registerer: %v, %v", c, err)
	}
}
