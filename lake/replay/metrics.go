package replay

import (
	"github.com/prometheus/client_golang/prometheus"
)

// RegisterMetrics exposes a replay's or backfill's progress on reg:
//
//	simtel_lake_replay_samples_total{source="lake"|"broker"}  samples emitted
//	simtel_lake_replay_sample_time_seconds                     time of the last sample emitted
//	simtel_lake_replay_produced_total                          records acknowledged (idempotent) or committed (transactions)
//	simtel_lake_replay_transactions_total                      transactions committed (transactions only)
//	simtel_lake_replay_skipped_total                           records skipped as committed by an earlier run (transactions only)
//
// stats or p may be nil (a raw backfill has no Stats, stdout no producer).
func RegisterMetrics(reg prometheus.Registerer, stats *Stats, p Output) error {
	var cs []prometheus.Collector
	if stats != nil {
		cs = append(cs,
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "simtel_lake_replay_samples_total", Help: "Samples emitted by the replay, by source.", ConstLabels: prometheus.Labels{"source": "lake"}},
				func() float64 { return float64(stats.Lake.Load()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "simtel_lake_replay_samples_total", Help: "Samples emitted by the replay, by source.", ConstLabels: prometheus.Labels{"source": "broker"}},
				func() float64 { return float64(stats.Broker.Load()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "simtel_lake_replay_sample_time_seconds", Help: "Sample time (Unix seconds) of the last sample emitted."},
				func() float64 { return float64(stats.LastTime.Load()) / 1e9 }),
		)
	}
	if p != nil {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "simtel_lake_replay_produced_total", Help: "Records produced and acknowledged by the broker (committed, with transactions)."},
			func() float64 { return float64(p.Acked()) }))
	}
	if tp, ok := p.(*TxnProducer); ok && tp != nil {
		cs = append(cs,
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "simtel_lake_replay_transactions_total", Help: "Transactions committed."},
				func() float64 { return float64(tp.Transactions()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "simtel_lake_replay_skipped_total", Help: "Records skipped because an earlier run of the job committed them."},
				func() float64 { return float64(tp.Skipped()) }),
		)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
