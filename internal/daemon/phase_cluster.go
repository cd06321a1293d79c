package daemon

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/internal/cluster/apipods"
	"github.com/nodekeeper/nodekeeper/internal/cluster/kubenode"
)

// cluster is the third phase: the events writer (to the API server, or
// standalone to the ring of /events; the recorder comes with the core), then,
// with a kubeconfig only (the clients come with the machine phase's checks),
// the Node's status and Lease, the pods bound to the node (run like
// the others, their status and deletion written back, mirror pods for the
// static ones), and the Node updated at once when a device plugin comes or
// goes; standalone, a loop that looks at the node conditions as the Node's
// status loop would.
func (r *root) cluster(ctx context.Context, p *plan) error {
	if r.events != nil {
		// The writer outlives the other parts, so that their last events
		// get out: it stops, and flushes, once they all returned.
		p.add(part{Name: "events", Last: true, Run: func(ctx context.Context) error {
			if err := r.events.Run(ctx); err != nil {
				r.log.Error("event writer", "err", err)
			}
			return nil
		}})
	}
	warnCgroupV1(r.recorder, r.o.NodeName, r.layout.Version)
	if r.client == nil {
		p.add(part{Name: "nodeconditions", Run: func(ctx context.Context) error {
			return r.noteConditions(ctx, r.o.Config.Cluster.NodeStatusUpdateFrequency)
		}})
		return nil
	}
	kn, err := nodeStatus(ctx, r.o, r.heartbeat, r.client, r.rt, r.hostIP, r.nodeObject, r.recorder, r.log)
	if err != nil {
		return err
	}
	r.kn.Store(kn)
	ap, err := apipods.New(apipods.Config{NodeName: r.o.NodeName},
		apipods.Deps{Client: r.client, Agent: r.table, Logger: r.log.With("subsystem", "apipods")})
	if err != nil {
		return ConfigError{err}
	}
	p.add(part{Name: "apipods", Run: ap.Run},
		part{Name: "nodestatus", Run: kn.Run},
		part{Name: "devicechanges", Run: func(ctx context.Context) error { return r.pokeOnDevices(ctx, kn) }})
	return nil
}

// nodeObject is the Node as the agent reports it at now: the managers'
// conditions, capacity and allocatable, Ready while the sync loop is healthy.
func (r *root) nodeObject(now time.Time) (*v1.Node, error) {
	return r.n.Object(r.o.NodeName, r.ag.Healthy(), now)
}

// noteConditions looks at the Node's conditions every period until ctx
// ends, as a joined node's status loop does, so that a standalone node's
// /node dates a condition's change within period of it rather than at the
// next request.
func (r *root) noteConditions(ctx context.Context, period time.Duration) error {
	if period <= 0 {
		return nil // a configuration not through config's defaults: Object alone dates them
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			if _, err := r.nodeObject(now); err != nil {
				r.log.Warn("Node conditions unavailable", "err", err)
			}
		}
	}
}

// pokeOnDevices has the Node's status written at once whenever the device
// manager's devices change, until ctx ends.
func (r *root) pokeOnDevices(ctx context.Context, kn *kubenode.Controller) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.n.Devices.Changed():
			kn.Poke()
		}
	}
}
