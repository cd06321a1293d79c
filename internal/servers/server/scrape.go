package server

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// scrapeCollector is the collector of one scrape of an endpoint read on
// demand (/metrics/resource, /metrics/cadvisor): it reads once and sends
// the series emit makes of what it read, with the error gauge failed at 0.
// A failed read sends the gauge at 1 alone, and is logged as failMsg.
type scrapeCollector[T any] struct {
	ctx     context.Context
	descs   []*prometheus.Desc // every series it may send, failed included
	failed  *prometheus.Desc
	read    func(ctx context.Context) (T, error)
	emit    func(ch chan<- prometheus.Metric, v T)
	log     *slog.Logger
	failMsg string
}

func (c scrapeCollector[T]) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c scrapeCollector[T]) Collect(ch chan<- prometheus.Metric) {
	v, err := c.read(c.ctx)
	if err != nil {
		c.log.Error(c.failMsg, "err", err)
		ch <- prometheus.MustNewConstMetric(c.failed, prometheus.GaugeValue, 1)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.failed, prometheus.GaugeValue, 0)
	c.emit(ch, v)
}

// serveScrape serves the series c collects for this request alone.
func (s *Server) serveScrape(w http.ResponseWriter, r *http.Request, c prometheus.Collector) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
	}).ServeHTTP(w, r)
}
